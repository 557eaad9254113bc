import { ReceiveMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { SettlementRecord } from '#core/settlement.ts';
import { localClientConfig } from '#local/emulators.ts';
import { type Provisioned, provision } from '#local/provision.ts';
import { ThreadedSettlementSink } from '#local/settlement-thread.ts';

const record = (id: string) => ({ id, requestId: id }) as unknown as SettlementRecord;

/** The local host's sender thread, against the SQS emulator: records handed over a turn at a time. */
describe('ThreadedSettlementSink', () => {
  const emulators = inject('emulators');
  let resources: Provisioned;
  let sqs: SQSClient;
  beforeAll(async () => {
    resources = await provision(emulators, `thread-${Date.now()}`);
    sqs = new SQSClient(localClientConfig(emulators.sqs));
  });
  afterAll(() => sqs?.destroy());

  it('resolves each send once SQS holds its record, the records of one turn sharing a message', async () => {
    const sink = await ThreadedSettlementSink.start({
      client: localClientConfig(emulators.sqs),
      queueUrl: resources.settlementQueueUrl,
      lingerMs: 20,
    });
    try {
      const ids = Array.from({ length: 25 }, (_, i) => `t${i}`);
      await Promise.all(ids.map((id) => sink.send(record(id))));
      const { Messages = [] } = await sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: resources.settlementQueueUrl,
          MaxNumberOfMessages: 10,
          WaitTimeSeconds: 0,
        }),
      );
      expect(Messages).toHaveLength(1);
      const sent = [JSON.parse(Messages[0]?.Body ?? '[]') as { id: string }[]].flat().map((r) => r.id);
      expect(sent).toEqual(ids);
    } finally {
      await sink.stop();
    }
  });

  it('rejects each send SQS refused, with its reason', async () => {
    const sink = await ThreadedSettlementSink.start({
      client: { ...localClientConfig(emulators.sqs), maxAttempts: 1 },
      queueUrl: `${resources.settlementQueueUrl}-missing`,
      lingerMs: 0,
    });
    try {
      const results = await Promise.allSettled([sink.send(record('a')), sink.send(record('b'))]);
      expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
      expect((results[0] as PromiseRejectedResult).reason.message).toMatch(/queue|exist/i);
    } finally {
      await sink.stop();
    }
  });
});
