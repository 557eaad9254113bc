import type { AddressInfo } from 'node:net';
import { createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { STORE_CALL_TIMEOUTS } from '#adapters/aws-clients.ts';
import { ServiceUnavailableError } from '#core/errors.ts';
import { createContainer } from '#functions/container.ts';
import { createUsageReportDeps } from '#functions/usage-report.ts';
import { buckets } from '#lib/resources.ts';
import { localClientConfig } from '#local/emulators.ts';
import { functionConfig } from '../../support/fixtures.ts';

/**
 * A store that takes connections and never answers (a network black hole, a brown-out) must not hold requests
 * until their function's own timeout: the request path's calls to it give up, and the request is refused with 503.
 */

let blackHole: Server;
const sockets = new Set<Socket>();
/** Connections the black hole took: the store was reached, not refused before any call. */
let accepted = 0;
let endpoint: string;

beforeAll(async () => {
  blackHole = createServer((socket) => {
    // Reads everything, answers nothing.
    accepted++;
    sockets.add(socket);
    socket.resume();
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => blackHole.listen(0, '127.0.0.1', resolve));
  endpoint = `http://127.0.0.1:${(blackHole.address() as AddressInfo).port}`;
});

afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await new Promise((resolve) => blackHole.close(resolve));
});

describe('a store that never answers', () => {
  it('gets a 503 for the request within its attempts × the per-attempt limit, not a hang', async () => {
    const config = functionConfig({ SETTLEMENT_QUEUE_URL: `${endpoint}/000000000000/settlement` });
    const container = createContainer(config, { aws: { dynamodb: localClientConfig(endpoint) } });
    const started = performance.now();
    try {
      // The key's lookup is the request's first call to the store.
      await expect(
        container.gateway.authenticateOnly(`Bearer svc_live_${'a'.repeat(32)}`),
      ).rejects.toBeInstanceOf(ServiceUnavailableError);
      const elapsed = performance.now() - started;
      // Three attempts (the client's maxAttempts), each cut at the request timeout, plus the SDK's back-off.
      expect(elapsed).toBeGreaterThanOrEqual(STORE_CALL_TIMEOUTS.requestTimeout);
      expect(elapsed).toBeLessThan(3 * STORE_CALL_TIMEOUTS.requestTimeout + 5_000);
      expect(accepted).toBeGreaterThan(0);
    } finally {
      await container.close();
    }
  }, 40_000);

  it('ends the usage report’s store and bucket calls too, instead of holding the run to its timeout', async () => {
    const config = functionConfig({
      [buckets.site.envVar]: 'site',
      SETTLEMENT_QUEUE_URL: `${endpoint}/000000000000/settlement`,
    });
    const before = accepted;
    const deps = createUsageReportDeps(config, {
      aws: {
        dynamodb: localClientConfig(endpoint),
        s3: { ...localClientConfig(endpoint), forcePathStyle: true },
      },
    });
    const bounded = async (call: () => Promise<unknown>) => {
      const started = performance.now();
      await expect(call()).rejects.toThrow();
      const elapsed = performance.now() - started;
      expect(elapsed).toBeGreaterThanOrEqual(STORE_CALL_TIMEOUTS.requestTimeout);
      expect(elapsed).toBeLessThan(3 * STORE_CALL_TIMEOUTS.requestTimeout + 5_000);
    };
    try {
      await Promise.all([
        bounded(() => deps.models()),
        // The read of the report online, before a run writes its own, too.
        bounded(() => deps.site.get('usage.json')),
        bounded(() => deps.site.putJson('usage.json', '{}', 'max-age=60')),
      ]);
      expect(accepted - before).toBeGreaterThanOrEqual(2);
    } finally {
      deps.close();
    }
  }, 40_000);
});
