import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openEndpoint, runRound } from '../../../bench/lib/load.ts';

/** A stand-in gateway: waits a little, then answers with the Server-Timing a metered gateway sends. */
let server: Server;
let url: string;
beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    req.on('end', () =>
      setTimeout(() => {
        const stream = req.url === '/stream';
        res.writeHead(200, {
          'content-type': stream ? 'text/event-stream' : 'application/json',
          'server-timing':
            req.url === '/overlap'
              ? 'admit;dur=1.50, admit-wait;dur=0.25, upstream;dur=2.25, handler;dur=3.00'
              : 'admit;dur=1.50, upstream;dur=2.25, handler;dur=4.00',
        });
        res.end(stream ? 'data: {}\n\ndata: [DONE]\n\n' : '{}');
      }, 5),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise((resolve) => server.close(resolve)));

const round = async (path: string, stream: boolean) => {
  const endpoint = openEndpoint({ name: 'fake', url: `${url}${path}`, headers: {} }, 2);
  try {
    return await runRound(endpoint, { body: Buffer.from('{}'), stream, concurrency: 2, durationMs: 100 });
  } finally {
    await endpoint.pool.close();
  }
};

describe('bench load rounds read the gateway’s Server-Timing', () => {
  it('records admission, the upstream call and the rest of each request’s latency', async () => {
    const result = await round('/', false);
    expect(result.errors).toBe(0);
    expect(result.requests).toBeGreaterThan(2);
    const latency = [...result.latency.view()];
    expect([...result.admit.view()]).toEqual(latency.map(() => 1.5));
    expect([...result.upstream.view()]).toEqual(latency.map(() => 2.25));
    // The rest: what the client waited beyond both reported durations.
    for (const [i, beside] of [...result.beside.view()].entries())
      expect(beside).toBeCloseTo((latency[i] as number) - 3.75, 6);
    // Outside the handler: what the client waited beyond the handler's whole share.
    const outside = [...result.outside.view()];
    expect(outside).toHaveLength(latency.length);
    for (const [i, value] of outside.entries()) expect(value).toBeCloseTo((latency[i] as number) - 4, 6);
  });

  it('counts only the wait for the hold when the upstream call ran beside admission', async () => {
    const result = await round('/overlap', false);
    expect(result.errors).toBe(0);
    const latency = [...result.latency.view()];
    expect([...result.admit.view()]).toEqual(latency.map(() => 1.5));
    expect([...result.admitWait.view()]).toEqual(latency.map(() => 0.25));
    for (const [i, beside] of [...result.beside.view()].entries())
      expect(beside).toBeCloseTo((latency[i] as number) - 2.5, 6);
  });

  it('leaves a stream’s upstream call out: its Server-Timing leaves before the call has ended', async () => {
    const result = await round('/stream', true);
    expect(result.errors).toBe(0);
    expect(result.requests).toBeGreaterThan(2);
    expect(result.admit.length).toBe(result.requests);
    expect(result.upstream.length).toBe(0);
    expect(result.beside.length).toBe(0);
    expect(result.outside.length).toBe(0);
  });
});
