import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KeyRing } from '#adapters/upstream/key-ring.ts';
import { OpenAiCompatiblePrices } from '#adapters/upstream/openai-prices.ts';
import { deployment } from '#test/fixtures.ts';

/** A provider's `/models` list, sent chunked (no content-length), of the size each test picks. */
let server: Server;
let baseUrl: string;
let padding = 0;
/** Whether the next answer is an error whose body never ends, and when its connection closed. */
let failing = false;
let failedClosed: Promise<void> = Promise.resolve();
beforeAll(async () => {
  server = createServer((_req, res) => {
    if (failing) {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.write('{"error":{"message":"busy"');
      failedClosed = new Promise((resolve) => res.once('close', () => resolve()));
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write('{"data":[{"id":"m","pricing":{"prompt":"0.000001","completion":"0.000002"}}]');
    // Whitespace is valid JSON: a list this long is as well-formed as it is oversized.
    for (let sent = 0; sent < padding; sent += 64 * 1024) res.write(' '.repeat(64 * 1024));
    res.end('}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

const prices = () =>
  new OpenAiCompatiblePrices({ key: async () => null } as unknown as KeyRing).prices({
    deployment: deployment({ baseUrl }),
    keyIndex: 0,
  });

describe('OpenAiCompatiblePrices', () => {
  it('reads a chunked price list', async () => {
    padding = 0;
    expect((await prices())?.get('m')).toEqual({ input: 1, output: 2 });
  });

  it('lets the connection of an error answer go at once, not when its body is collected', async () => {
    failing = true;
    try {
      await expect(prices()).rejects.toThrow('price list: upstream answered 500');
      // The body never ends: only our side closing the connection ends the wait.
      await failedClosed;
    } finally {
      failing = false;
    }
  });

  it('refuses a chunked price list past 8 MiB, which states no length to check first', async () => {
    padding = 9 * 1024 * 1024;
    await expect(prices()).rejects.toThrow('price list: response too large');
  });
});
