import type { AddressInfo } from 'node:net';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInstanceServer, type InstanceServer, NO_SITE, type Route } from '#local/function-host.ts';

/**
 * The local host buffers a request's body (up to Lambda's 6 MB) before any handler authenticates it: a sender
 * that trickles its body must not hold that memory, and its connection, for ever.
 */
/** A route whose handler a body that never arrives whole must never reach. */
const route: Route = {
  method: 'POST',
  path: '/v1/chat/completions',
  name: 'chat-completions',
  timeoutMs: 60_000,
  handler: (() => {
    throw new Error('the body never arrived: no invocation');
  }) as unknown as Route['handler'],
};

let instance: InstanceServer;
let port: number;
beforeAll(async () => {
  instance = createInstanceServer([route], NO_SITE, () => {}, {
    requestTimeoutMs: 300,
    checkIntervalMs: 50,
  });
  await new Promise<void>((resolve) => instance.server.listen(0, '127.0.0.1', resolve));
  port = (instance.server.address() as AddressInfo).port;
});
afterAll(async () => {
  instance.server.closeAllConnections();
  await new Promise((resolve) => instance.server.close(resolve));
});

describe('the local host and a body that never finishes arriving', () => {
  it('answers 408 and closes the connection once the request timeout passes', async () => {
    const socket = connect(port, '127.0.0.1');
    let received = '';
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString();
    });
    const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    socket.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n');
    socket.write('Content-Length: 1000000\r\n\r\n{"model":');
    // Bounded: the test fails on its own timeout if the server never closes the connection.
    await closed;
    expect(received).toMatch(/^HTTP\/1\.1 408/);
    // Nothing of it is left running: a stop of the host would not wait for it.
    expect(await instance.drain(1_000)).toEqual({ cut: 0, unfinished: 0 });
  });
});

describe('the local host and a client that leaves while sending its body', () => {
  it('lets it go quietly: no invocation, and no failure of its own to report', async () => {
    const failures: unknown[] = [];
    const host = createInstanceServer([route], NO_SITE, (error) => failures.push(error));
    await new Promise<void>((resolve) => host.server.listen(0, '127.0.0.1', resolve));
    try {
      const socket = connect((host.server.address() as AddressInfo).port, '127.0.0.1');
      await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
      socket.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n');
      socket.write('Content-Length: 1000\r\n\r\n{"model":');
      while (host.served() === 0) await new Promise((resolve) => setTimeout(resolve, 10));
      socket.destroy();
      // Every request under way has ended (bounded by the test's timeout), and reported nothing.
      expect(await host.drain(5_000)).toEqual({ cut: 0, unfinished: 0 });
      expect(failures).toEqual([]);
    } finally {
      host.server.closeAllConnections();
    }
  });
});
