/**
 * The bench's second reference (`npm run bench -- --floor`): the bare proxy's work (lib/bare-proxy.ts) as a
 * response-streaming Lambda handler — middy with the gateway's own `httpHandler` wrapping — served by the local
 * host's Function URL emulation (bin/local/function-host.ts). Between the two references lies what the Lambda
 * shape costs on this machine; between this one and the gateway, what the gateway's own request work costs
 * (authentication, validation, estimate, routing, accounting, recording).
 *
 * Run as its own process: `node bench/lib/bare-handler.ts UPSTREAM_CHAT_URL UPSTREAM_KEY`. Prints
 * `bare handler listening on URL` once it listens on a free loopback port; stops on SIGTERM/SIGINT.
 */
import type { AddressInfo } from 'node:net';
import type { Readable } from 'node:stream';
import { Pool } from 'undici';
import { createLogger } from '#adapters/logger.ts';
import { createInstanceServer } from '#local/function-host.ts';
import { installLambdaGlobals, type StreamingHandler } from '#local/lambda-runtime.ts';

const [upstreamUrl, upstreamKey] = process.argv.slice(2);
if (!upstreamUrl || !upstreamKey) {
  console.error('usage: node bench/lib/bare-handler.ts UPSTREAM_CHAT_URL UPSTREAM_KEY');
  process.exit(2);
}
// middy's streaming mode needs the runtime's `awslambda` globals when the handler is built.
installLambdaGlobals();
const { httpHandler, JSON_HEADERS } = await import('#http/handler.ts');
const { SSE_HEADERS } = await import('#http/sse.ts');

const upstream = new URL(upstreamUrl);
const pool = new Pool(upstream.origin, { connections: 256, pipelining: 1 });
const upstreamHeaders = { authorization: `Bearer ${upstreamKey}`, 'content-type': 'application/json' };
const log = createLogger('silent');

const handler = httpHandler(
  async (event) => {
    const body = JSON.parse(event.body ?? '{}') as { model: string; stream?: boolean };
    const reply = await pool.request({
      path: upstream.pathname,
      method: 'POST',
      headers: upstreamHeaders,
      body: JSON.stringify(body),
    });
    if (body.stream)
      return { statusCode: reply.statusCode, headers: { ...SSE_HEADERS }, body: reply.body as Readable };
    const json = (await reply.body.json()) as Record<string, unknown>;
    json.model = body.model;
    return { statusCode: reply.statusCode, headers: { ...JSON_HEADERS }, body: JSON.stringify(json) };
  },
  () => log,
);

const host = createInstanceServer(
  [
    {
      method: 'POST',
      path: '/v1/chat/completions',
      name: 'chat-completions',
      timeoutMs: 900_000,
      handler: handler as unknown as StreamingHandler,
    },
  ],
  { handles: () => false, serve: async () => {} },
  (error) => console.error(error),
);
host.server.listen(0, '127.0.0.1', () => {
  const { port } = host.server.address() as AddressInfo;
  console.log(`bare handler listening on http://127.0.0.1:${port}`);
});
const stop = () => {
  host.server.close();
  host.server.closeAllConnections();
  void pool.close().finally(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
