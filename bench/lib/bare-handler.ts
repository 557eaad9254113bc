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
import { createLogger } from '#adapters/logger.ts';
import { createInstanceServer, NO_SITE } from '#local/function-host.ts';
import { installLambdaGlobals, type StreamingHandler } from '#local/lambda-runtime.ts';
import { bareUpstream } from './bare-upstream.ts';

const upstream = bareUpstream('bare-handler');
// middy's streaming mode needs the runtime's `awslambda` globals when the handler is built.
installLambdaGlobals();
const { httpHandler, JSON_HEADERS } = await import('#http/handler.ts');
const { SSE_HEADERS } = await import('#http/sse.ts');
const log = createLogger('silent');

const handler = httpHandler(
  async (event) => {
    const reply = await upstream.forward(event.body ?? '{}');
    return 'stream' in reply
      ? { statusCode: reply.statusCode, headers: { ...SSE_HEADERS }, body: reply.stream }
      : { statusCode: reply.statusCode, headers: { ...JSON_HEADERS }, body: reply.json };
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
  NO_SITE,
  (error) => console.error(error),
);
host.server.listen(0, '127.0.0.1', () => {
  upstream.serve('bare handler', (host.server.address() as AddressInfo).port, () => {
    host.server.close();
    host.server.closeAllConnections();
  });
});
