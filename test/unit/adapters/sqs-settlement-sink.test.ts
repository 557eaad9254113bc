import type { SendMessageBatchCommand, SendMessageBatchCommandOutput, SQSClient } from '@aws-sdk/client-sqs';
import { describe, expect, it } from 'vitest';
import { SqsSettlementSink } from '#adapters/sqs-settlement-sink.ts';
import type { SettlementRecord } from '#core/settlement.ts';

const record = (id: string) => ({ id }) as unknown as SettlementRecord;

/** The settlement ids of one queue message (a record, or an array of records). */
const idsOf = (body: string): string[] =>
  [JSON.parse(body) as { id: string } | { id: string }[]].flat().map((r) => r.id);

/**
 * An SQS client that records each call as its messages' settlement ids, and fails the entries holding a record
 * `failures` names (by settlement id, once each).
 */
const fakeClient = (failures: Record<string, { SenderFault: boolean }> = {}) => {
  const calls: string[][][] = [];
  const client = {
    send: async (command: SendMessageBatchCommand): Promise<SendMessageBatchCommandOutput> => {
      const entries = command.input.Entries ?? [];
      const messages = entries.map((e) => idsOf(e.MessageBody ?? '{}'));
      calls.push(messages);
      const Failed = entries.flatMap((e, i) => {
        const named = (messages[i] as string[]).find((id) => failures[id]);
        if (named === undefined) return [];
        const failure = failures[named] as { SenderFault: boolean };
        delete failures[named];
        return [{ Id: e.Id as string, SenderFault: failure.SenderFault, Code: 'X' }];
      });
      return { Successful: [], Failed, $metadata: {} };
    },
  } as unknown as SQSClient;
  return { client, calls };
};

/** An SQS client that accepts every message and keeps its body. */
const recordingClient = () => {
  const bodies: string[] = [];
  const client = {
    send: async (command: SendMessageBatchCommand) => {
      for (const e of command.input.Entries ?? []) bodies.push(e.MessageBody ?? '');
      return { Failed: [], $metadata: {} };
    },
  } as unknown as SQSClient;
  return { client, bodies };
};

const ids = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);

describe('SqsSettlementSink', () => {
  it('sends the records of one turn together, in one message of one call', async () => {
    const { client, calls } = fakeClient();
    const sink = new SqsSettlementSink(client, 'q', { lingerMs: 0 });
    await Promise.all(ids('r', 13).map((id) => sink.send(record(id))));
    expect(calls).toEqual([[ids('r', 13)]]);
  });

  it('sends a record alone as the record itself, not wrapped', async () => {
    const { client, bodies } = recordingClient();
    await new SqsSettlementSink(client, 'q', { lingerMs: 0 }).send(record('solo'));
    expect(bodies).toEqual(['{"id":"solo"}']);
  });

  it('sends only characters SQS accepts, whatever a record carries, and they read back unchanged', async () => {
    const { client, bodies } = recordingClient();
    // What a caller can put in a record: a 404 names the model id it asked for. Controls, a lone surrogate, and
    // U+FFFE/U+FFFF, which JSON.stringify leaves as they are and SQS refuses.
    const detail = "The model 'x\uFFFE\uFFFF\u0000\u0008\uD800y😀' does not exist";
    const sent = { id: 'odd', fault: { detail } } as unknown as SettlementRecord;
    await new SqsSettlementSink(client, 'q', { lingerMs: 0 }).send(sent);
    const [body] = bodies as [string];
    // SQS: #x9 | #xA | #xD | #x20–#xD7FF | #xE000–#xFFFD | #x10000–#x10FFFF.
    expect(body).toMatch(/^[\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]*$/u);
    expect((JSON.parse(body) as { fault: { detail: string } }).fault.detail).toBe(detail);
  });

  it('keeps messages within 64 KiB and calls within 10 messages and 256 KiB', async () => {
    const { client, calls } = fakeClient();
    const sink = new SqsSettlementSink(client, 'q', { lingerMs: 0 });
    // ~10 KiB records: six share a message (60 KiB), four messages fill a call's 256 KiB.
    const big = (id: string) => ({ id, pad: 'x'.repeat(10 * 1024 - 30) }) as unknown as SettlementRecord;
    await Promise.all(ids('b', 30).map((id) => sink.send(big(id))));
    const sizes = calls.map((call) => call.map((message) => message.length));
    expect(sizes.flat().reduce((a, b) => a + b, 0)).toBe(30);
    for (const call of calls) expect(call.length).toBeLessThanOrEqual(10);
    expect(sizes.flat().every((n) => n <= 6)).toBe(true);
    expect(calls.length).toBeGreaterThan(1); // 300 KiB cannot go in one call
    expect(calls.flat().flat()).toEqual(ids('b', 30)); // in order, each once
  });

  it('counts the size limits in bytes, not characters', async () => {
    const { client, calls } = fakeClient();
    const sink = new SqsSettlementSink(client, 'q', { lingerMs: 0 });
    // 20 Ki characters of 2 bytes each: 40 KiB a record, so two cannot share a 64 KiB message.
    const accented = (id: string) => ({ id, pad: 'é'.repeat(20 * 1024) }) as unknown as SettlementRecord;
    await Promise.all([sink.send(accented('e0')), sink.send(accented('e1'))]);
    expect(calls).toEqual([[['e0'], ['e1']]]);
  });

  it('lets records wait for each other up to the linger time', async () => {
    const { client, calls } = fakeClient();
    // A linger far longer than the 5 ms between the records: a busy machine's late timer cannot split them.
    const sink = new SqsSettlementSink(client, 'q', { lingerMs: 250 });
    const first = sink.send(record('a'));
    await new Promise((resolve) => setTimeout(resolve, 5));
    await Promise.all([first, sink.send(record('b'))]);
    expect(calls).toEqual([[['a', 'b']]]);
  });

  it('retries a message SQS failed for its own reasons, and resolves its records once accepted', async () => {
    const { client, calls } = fakeClient({ b: { SenderFault: false } });
    const sink = new SqsSettlementSink(client, 'q', { lingerMs: 0 });
    await Promise.all([sink.send(record('a')), sink.send(record('b'))]);
    expect(calls).toEqual([[['a', 'b']], [['a', 'b']]]);
  });

  it('rejects the records of a message refused as malformed (retrying cannot help), not the other messages', async () => {
    const { client } = fakeClient({ b0: { SenderFault: true } });
    const sink = new SqsSettlementSink(client, 'q', { lingerMs: 0 });
    const big = (id: string) => ({ id, pad: 'x'.repeat(40 * 1024) }) as unknown as SettlementRecord;
    // 40 KiB each: one per message, so b0's refusal is b0's alone.
    const [a, b] = await Promise.allSettled([sink.send(big('b0')), sink.send(big('b1'))]);
    expect(a).toMatchObject({
      status: 'rejected',
      reason: expect.objectContaining({ message: expect.stringContaining('b0') }),
    });
    expect(b.status).toBe('fulfilled');
  });

  it('rejects every record of a call that failed outright', async () => {
    const client = { send: async () => Promise.reject(new Error('network down')) } as unknown as SQSClient;
    const sink = new SqsSettlementSink(client, 'q', { lingerMs: 0 });
    await expect(sink.send(record('a'))).rejects.toThrow('network down');
  });
});
