import type { SendMessageBatchCommand, SendMessageBatchCommandOutput, SQSClient } from '@aws-sdk/client-sqs';
import { describe, expect, it } from 'vitest';
import { SqsSettlementSink } from '#adapters/sqs-settlement-sink.ts';
import type { SettlementRecord } from '#core/settlement.ts';

const record = (id: string) => ({ id }) as unknown as SettlementRecord;

/** An SQS client that records batches and fails the entries `failures` names (by settlement id, once each). */
const fakeClient = (failures: Record<string, { SenderFault: boolean }> = {}) => {
  const batches: string[][] = [];
  const client = {
    send: async (command: SendMessageBatchCommand): Promise<SendMessageBatchCommandOutput> => {
      const entries = command.input.Entries ?? [];
      const ids = entries.map((e) => (JSON.parse(e.MessageBody ?? '{}') as { id: string }).id);
      batches.push(ids);
      const Failed = entries.flatMap((e, i) => {
        const failure = failures[ids[i] as string];
        if (!failure) return [];
        delete failures[ids[i] as string];
        return [{ Id: e.Id as string, SenderFault: failure.SenderFault, Code: 'X' }];
      });
      return { Successful: [], Failed, $metadata: {} };
    },
  } as unknown as SQSClient;
  return { client, batches };
};

describe('SqsSettlementSink', () => {
  it('sends the records of one turn together, in batches of at most 10', async () => {
    const { client, batches } = fakeClient();
    const sink = new SqsSettlementSink(client, 'q', { lingerMs: 0 });
    await Promise.all(Array.from({ length: 13 }, (_, i) => sink.send(record(`r${i}`))));
    expect(batches.map((b) => b.length)).toEqual([10, 3]);
  });

  it('lets records wait for each other up to the linger time', async () => {
    const { client, batches } = fakeClient();
    const sink = new SqsSettlementSink(client, 'q', { lingerMs: 30 });
    const first = sink.send(record('a'));
    await new Promise((resolve) => setTimeout(resolve, 5));
    await Promise.all([first, sink.send(record('b'))]);
    expect(batches).toEqual([['a', 'b']]);
  });

  it('retries an entry SQS failed for its own reasons, and resolves it once accepted', async () => {
    const { client, batches } = fakeClient({ b: { SenderFault: false } });
    const sink = new SqsSettlementSink(client, 'q', { lingerMs: 0 });
    await Promise.all([sink.send(record('a')), sink.send(record('b'))]);
    expect(batches).toEqual([['a', 'b'], ['b']]);
  });

  it('rejects an entry refused as malformed (retrying cannot help), without failing the others', async () => {
    const { client } = fakeClient({ b: { SenderFault: true } });
    const sink = new SqsSettlementSink(client, 'q', { lingerMs: 0 });
    const [a, b] = await Promise.allSettled([sink.send(record('a')), sink.send(record('b'))]);
    expect(a.status).toBe('fulfilled');
    expect(b).toMatchObject({
      status: 'rejected',
      reason: expect.objectContaining({ message: expect.stringContaining('b') }),
    });
  });

  it('rejects every record of a batch whose call failed outright', async () => {
    const client = { send: async () => Promise.reject(new Error('network down')) } as unknown as SQSClient;
    const sink = new SqsSettlementSink(client, 'q', { lingerMs: 0 });
    await expect(sink.send(record('a'))).rejects.toThrow('network down');
  });
});
