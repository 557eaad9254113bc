/**
 * The bench's reference proxy (`npm run bench -- --floor`): the least a Node proxy in front of the same upstream
 * does (bare-upstream.ts) on a plain `node:http` server. No authentication, validation, routing, accounting or
 * Lambda emulation. What it adds over direct calls is the machine's share of any proxy (two more loopback hops, a
 * process more on two cores); what the gateway adds beyond it is the gateway's own.
 *
 * Run as its own process: `node bench/lib/bare-proxy.ts UPSTREAM_CHAT_URL UPSTREAM_KEY`. Prints
 * `bare proxy listening on URL` once it listens on a free loopback port; stops on SIGTERM/SIGINT.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { bareUpstream } from './bare-upstream.ts';

const upstream = bareUpstream('bare-proxy');

const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    void (async () => {
      const reply = await upstream.forward(Buffer.concat(chunks).toString('utf8'));
      if ('stream' in reply) {
        res.writeHead(reply.statusCode, { 'content-type': 'text/event-stream' });
        for await (const chunk of reply.stream) res.write(chunk);
        res.end();
        return;
      }
      res.writeHead(reply.statusCode, { 'content-type': 'application/json' });
      res.end(reply.json);
    })().catch(() => {
      if (!res.headersSent) res.writeHead(502).end();
      else res.destroy();
    });
  });
});

server.listen(0, '127.0.0.1', () => {
  upstream.serve('bare proxy', (server.address() as AddressInfo).port, () => {
    server.close();
    server.closeAllConnections();
  });
});
