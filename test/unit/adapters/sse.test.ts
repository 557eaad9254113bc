import { describe, expect, it } from 'vitest';
import { sseData } from '#adapters/upstream/sse.ts';
import { UpstreamFailure } from '#core/fallback.ts';
import { frame } from '#http/sse.ts';

const collect = async (chunks: string[]): Promise<string[]> => {
  async function* source() {
    for (const chunk of chunks) yield new TextEncoder().encode(chunk);
  }
  const out: string[] = [];
  for await (const data of sseData(source())) out.push(data);
  return out;
};

describe('sseData', () => {
  it('yields each event as soon as its blank line arrives, across chunk boundaries', async () => {
    expect(await collect(['data: {"a":', '1}\n', '\ndata: [DONE]\n\n'])).toEqual(['{"a":1}', '[DONE]']);
  });

  it('handles CRLF line endings, comments and multi-line data', async () => {
    expect(
      await collect([': keep-alive\r\n\r\ndata: one\r\ndata: two\r\n\r\nevent: x\r\ndata:three\r\n\r\n']),
    ).toEqual(['one\ntwo', 'three']);
  });

  it('keeps multi-byte characters split across chunks intact', async () => {
    const bytes = new TextEncoder().encode('data: héllo 👋\n\n');
    async function* split() {
      yield bytes.slice(0, 8);
      yield bytes.slice(8, 15);
      yield bytes.slice(15);
    }
    const out: string[] = [];
    for await (const data of sseData(split())) out.push(data);
    expect(out).toEqual(['héllo 👋']);
  });

  it('yields a final event that ends without a blank line', async () => {
    expect(await collect(['data: last'])).toEqual(['last']);
  });

  it('reads a CRLF split between chunks as one line end, wherever the chunks break', async () => {
    const text = 'data: one\r\n\r\ndata: two\r\n\r\n: c\r\n\r\ndata: three\r\n\r\n';
    for (let at = 1; at < text.length; at++) {
      expect(await collect([text.slice(0, at), text.slice(at)]), `split at ${at}`).toEqual([
        'one',
        'two',
        'three',
      ]);
    }
    expect(await collect(['data: end\r'])).toEqual(['end']);
  });

  it('takes the LF of a CRLF alone in its chunk for that CRLF only, not the next line end too', async () => {
    expect(await collect(['data: {"a":1}\r', '\n', '\ndata: {"b":2}\n\n'])).toEqual(['{"a":1}', '{"b":2}']);
    expect(await collect(['data: a\r', '', '\n', '\r\ndata: b\r\n\r\n'])).toEqual(['a', 'b']);
  });

  it('yields an event that ends in bare CRs at once, without waiting for the next chunk', async () => {
    async function* thenBroken() {
      yield new TextEncoder().encode('data: one\r\r');
      throw new Error('connection lost');
    }
    const out: string[] = [];
    const reading = (async () => {
      for await (const data of sseData(thenBroken())) out.push(data);
    })();
    await expect(reading).rejects.toThrow('connection lost');
    expect(out).toEqual(['one']);
  });

  it('splits events the same however the stream is chunked, byte by byte included', async () => {
    const text = 'data: a\n\n: c\r\n\r\ndata: b1\ndata: b2\r\rdata: c\r\n\r\n\n\ndata: d\n\n';
    const expected = ['a', 'b1\nb2', 'c', 'd'];
    expect(await collect([text])).toEqual(expected);
    expect(await collect([...text])).toEqual(expected);
    for (let size = 2; size < 9; size++)
      expect(await collect(text.match(new RegExp(`[\\s\\S]{1,${size}}`, 'g')) ?? [])).toEqual(expected);
  });

  it('fails as a protocol fault when an event grows past its limit without ending', async () => {
    async function* endless() {
      yield new TextEncoder().encode('data: ');
      for (let i = 0; i < 100; i++) yield new TextEncoder().encode('x'.repeat(1024));
    }
    const out: string[] = [];
    const reading = (async () => {
      for await (const data of sseData(endless(), { maxEventLength: 16 * 1024 })) out.push(data);
    })();
    await expect(reading).rejects.toBeInstanceOf(UpstreamFailure);
    await expect(reading).rejects.toMatchObject({ kind: 'protocol' });
    expect(out).toEqual([]);
  });

  it('holds the events after the first to a limit lowered meanwhile (a body that showed itself a stream)', async () => {
    const limit = { maxEventLength: 64 * 1024 };
    async function* source() {
      yield new TextEncoder().encode(`data: ${'a'.repeat(40_000)}\n\n`);
      yield new TextEncoder().encode(`data: ${'b'.repeat(40_000)}`);
      yield new TextEncoder().encode('\n\n');
    }
    const events = sseData(source(), limit);
    expect((await events.next()).value).toHaveLength(40_000);
    limit.maxEventLength = 16 * 1024;
    await expect(events.next()).rejects.toMatchObject({ kind: 'protocol' });
  });

  it('still takes events up to the limit, however they are chunked', async () => {
    const big = 'y'.repeat(10_000);
    const chunks = `data: ${big}\n\ndata: after\n\n`.match(/[\s\S]{1,700}/g) ?? [];
    async function* source() {
      for (const chunk of chunks) yield new TextEncoder().encode(chunk);
    }
    const out: string[] = [];
    for await (const data of sseData(source(), { maxEventLength: 16 * 1024 })) out.push(data);
    expect(out).toEqual([big, 'after']);
  });
});

describe('frame', () => {
  it('writes one data field per line, as SSE requires of data that spans lines', () => {
    expect(frame('{"a":1}')).toBe('data: {"a":1}\n\n');
    expect(frame('not json\nover two lines')).toBe('data: not json\ndata: over two lines\n\n');
  });
});
