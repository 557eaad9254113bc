/**
 * The bench's reference proxy (`npm run bench -- --floor`): the least a Node proxy in front of the same upstream
 * does — read the JSON body, parse it, forward it with the upstream's key, relabel the reply's model (a non-stream
 * reply is parsed and serialised again), relay a stream's bytes as they come. No authentication, validation,
 * routing, accounting or Lambda emulation. What it adds over direct calls is the machine's share of any proxy
 * (two more loopback hops, a process more on two cores); what the gateway adds beyond it is the gateway's own.
 *
 * Run as its own process: `node bench/lib/bare-proxy.ts UPSTREAM_CHAT_URL UPSTREAM_KEY`. Prints
 * `bare proxy listening on URL` once it listens on a free loopback port; stops on SIGTERM/SIGINT.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';

const [upstreamUrl, upstreamKey] = process.argv.slice(2);
if (!upstreamUrl || !upstreamKey) {
  console.error('usage: node bench/lib/bare-proxy.ts UPSTREAM_CHAT_URL UPSTREAM_KEY');
  process.exit(2);
}
const upstream = new URL(upstreamUrl);
const pool = new Pool(upstream.origin, { connections: 256, pipelining: 1 });
const upstreamHeaders = { authorization: `Bearer ${upstreamKey}`, 'content-type': 'application/json' };

const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    void (async () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { model: string; stream?: boolean };
      const reply = await pool.request({
        path: upstream.pathname,
        method: 'POST',
        headers: upstreamHeaders,
        body: JSON.stringify(body),
      });
      if (body.stream) {
        res.writeHead(reply.statusCode, { 'content-type': 'text/event-stream' });
        for await (const chunk of reply.body) res.write(chunk);
        res.end();
        return;
      }
      const json = (await reply.body.json()) as Record<string, unknown>;
      json.model = body.model;
      res.writeHead(reply.statusCode, { 'content-type': 'application/json' });
      res.end(JSON.stringify(json));
    })().catch(() => {
      if (!res.headersSent) res.writeHead(502).end();
      else res.destroy();
    });
  });
});

server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  console.log(`bare proxy listening on http://127.0.0.1:${port}`);
});
const stop = () => {
  server.close();
  server.closeAllConnections();
  void pool.close().finally(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
