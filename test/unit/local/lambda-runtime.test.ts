import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { installLambdaGlobals, isStreamingHandler, LambdaResponseStream } from '#local/lambda-runtime.ts';

/** Records what a Node ServerResponse would have been asked to send. */
const fakeResponse = () => {
  const sent = { status: 0, headers: {} as Record<string, unknown>, body: '', ended: false };
  /** Each bytes-carrying call to the socket, in order: what would leave as separate packets. */
  const calls: string[] = [];
  const res = {
    writeHead: (status: number, headers: Record<string, unknown>) => {
      sent.status = status;
      sent.headers = headers;
    },
    cork: () => {},
    uncork: () => {},
    write: (chunk: Buffer) => {
      sent.body += chunk.toString();
      calls.push(chunk.toString());
      return true;
    },
    end: (...args: unknown[]) => {
      if (Buffer.isBuffer(args[0])) sent.body += args[0].toString();
      if (Buffer.isBuffer(args[0])) calls.push(args[0].toString());
      sent.ended = true;
      (args.find((a) => typeof a === 'function') as () => void)();
    },
    once: () => {},
    destroy: () => {},
    writableEnded: false,
    writableNeedDrain: false,
  };
  return { res: res as unknown as ServerResponse, sent, calls };
};

const finish = (stream: LambdaResponseStream) => new Promise<void>((resolve) => stream.end(resolve));

installLambdaGlobals();
const { HttpResponseStream, streamifyResponse } = (
  globalThis as unknown as {
    awslambda: {
      HttpResponseStream: { from(s: LambdaResponseStream, p: object): LambdaResponseStream };
      streamifyResponse(h: unknown): unknown;
    };
  }
).awslambda;

describe('the local response stream', () => {
  it('decodes the HttpResponseStream prelude into status, headers and cookies', async () => {
    const { res, sent } = fakeResponse();
    const stream = HttpResponseStream.from(new LambdaResponseStream(res), {
      statusCode: 201,
      headers: { 'x-a': '1' },
      cookies: ['a=b'],
    });
    stream.write('hello ');
    stream.write('world');
    await finish(stream);
    expect(sent).toEqual({
      status: 201,
      headers: { 'x-a': '1', 'set-cookie': ['a=b'] },
      body: 'hello world',
      ended: true,
    });
  });

  it('finds the prelude delimiter when it is split across writes', async () => {
    const { res, sent } = fakeResponse();
    const stream = new LambdaResponseStream(res);
    stream.setContentType('application/vnd.awslambda.http-integration-response');
    stream.write('{"statusCode":404}\0\0\0');
    stream.write(Buffer.from([0, 0, 0, 0, 0, 0x62]));
    stream.write('ody');
    await finish(stream);
    expect(sent.status).toBe(404);
    expect(sent.body).toBe('body');
  });

  it('sends a plain stream with its content type and status 200', async () => {
    const { res, sent } = fakeResponse();
    const stream = new LambdaResponseStream(res);
    stream.setContentType('text/plain');
    stream.write('x');
    await finish(stream);
    expect(sent).toMatchObject({ status: 200, headers: { 'content-type': 'text/plain' }, body: 'x' });
  });

  it('completes a response whose body is empty', async () => {
    const { res, sent } = fakeResponse();
    const stream = HttpResponseStream.from(new LambdaResponseStream(res), { statusCode: 204, headers: {} });
    stream.write('');
    await finish(stream);
    expect(sent).toMatchObject({ status: 204, body: '', ended: true });
  });

  it('sends an event stream’s first event at once, and coalesces what the same turn writes after it', async () => {
    const { res, sent, calls } = fakeResponse();
    const stream = HttpResponseStream.from(new LambdaResponseStream(res), {
      statusCode: 200,
      headers: { 'content-type': 'text/event-stream' },
    });
    stream.write('data: 1\n\n');
    // The first event left before the turn ended: its client's time to first token does not wait for the rest.
    expect(calls).toEqual(['data: 1\n\n']);
    stream.write('data: 2\n\n');
    stream.write('data: [DONE]\n\n');
    expect(calls).toHaveLength(1);
    await finish(stream);
    expect(calls).toEqual(['data: 1\n\n', 'data: 2\n\ndata: [DONE]\n\n']);
    expect(sent.body).toBe('data: 1\n\ndata: 2\n\ndata: [DONE]\n\n');
  });

  it('hands an event stream’s first event to the kernel at once, before the microtasks relaying the rest have run', async () => {
    // Node's ServerResponse corks its socket on a write until the next tick, which waits for the microtask queue
    // to empty — and the relay of events that arrived together runs there. Measured on a real socket: the bytes
    // Node still holds right after the first event's write.
    let heldAfterFirst = -1;
    const server = createServer((_req, res) => {
      const stream = HttpResponseStream.from(new LambdaResponseStream(res), {
        statusCode: 200,
        headers: { 'content-type': 'text/event-stream' },
      });
      void (async () => {
        stream.write('data: 1\n\n');
        heldAfterFirst = res.socket?.writableLength ?? -1;
        await Promise.resolve();
        stream.write('data: 2\n\n');
        stream.end();
      })();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const reply = await fetch(`http://127.0.0.1:${port}/`);
      expect(await reply.text()).toBe('data: 1\n\ndata: 2\n\n');
      expect(heldAfterFirst).toBe(0);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it('holds a JSON body to the end of the turn: head, body and end leave together', async () => {
    const { res, calls } = fakeResponse();
    const stream = HttpResponseStream.from(new LambdaResponseStream(res), {
      statusCode: 200,
      headers: { 'content-type': 'application/json' },
    });
    stream.write('{"a":');
    stream.write('1}');
    expect(calls).toEqual([]);
    await finish(stream);
    expect(calls).toEqual(['{"a":1}']);
  });

  it('refuses a content type change after the first write, like the runtime', () => {
    const stream = new LambdaResponseStream(fakeResponse().res);
    stream.write('x');
    expect(() => stream.setContentType('text/plain')).toThrow(/too late/);
  });

  it('marks handlers wrapped by streamifyResponse as streaming', () => {
    expect(isStreamingHandler(streamifyResponse(async () => {}))).toBe(true);
    expect(isStreamingHandler(async () => {})).toBe(false);
  });
});
