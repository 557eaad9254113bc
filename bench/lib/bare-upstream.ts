/**
 * What the two references of `npm run bench -- --floor` share (bare-proxy.ts, bare-handler.ts): the upstream named
 * on their command line, and the least a proxy does with a chat request — parse it, forward it with the upstream's
 * key, relabel a non-stream reply's model (parsed and serialised again), hand a stream's body on as it comes.
 */
import type { Readable } from 'node:stream';
import { Pool } from 'undici';

export type Forwarded =
  | { readonly statusCode: number; readonly stream: Readable }
  | { readonly statusCode: number; readonly json: string };

export interface BareUpstream {
  /** Forwards a request body (JSON text) to the upstream. */
  forward(requestBody: string): Promise<Forwarded>;
  /** Prints `<label> listening on URL` for the bench, and stops `close` on SIGTERM/SIGINT. */
  serve(label: string, port: number, close: () => void): void;
}

/** The upstream of `node bench/lib/SCRIPT.ts UPSTREAM_CHAT_URL UPSTREAM_KEY`; exits with the usage without them. */
export const bareUpstream = (script: string): BareUpstream => {
  const [upstreamUrl, upstreamKey] = process.argv.slice(2);
  if (!upstreamUrl || !upstreamKey) {
    console.error(`usage: node bench/lib/${script}.ts UPSTREAM_CHAT_URL UPSTREAM_KEY`);
    process.exit(2);
  }
  const upstream = new URL(upstreamUrl);
  const pool = new Pool(upstream.origin, { connections: 256, pipelining: 1 });
  const headers = { authorization: `Bearer ${upstreamKey}`, 'content-type': 'application/json' };
  return {
    async forward(requestBody) {
      const body = JSON.parse(requestBody) as { model: string; stream?: boolean };
      const reply = await pool.request({
        path: upstream.pathname,
        method: 'POST',
        headers,
        body: JSON.stringify(body),
      });
      if (body.stream) return { statusCode: reply.statusCode, stream: reply.body };
      const json = (await reply.body.json()) as Record<string, unknown>;
      json.model = body.model;
      return { statusCode: reply.statusCode, json: JSON.stringify(json) };
    },
    serve(label, port, close) {
      console.log(`${label} listening on http://127.0.0.1:${port}`);
      const stop = () => {
        close();
        void pool.close().finally(() => process.exit(0));
      };
      process.once('SIGTERM', stop);
      process.once('SIGINT', stop);
    },
  };
};
