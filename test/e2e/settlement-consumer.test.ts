import { ReceiveMessageCommand, SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import type { Context, SQSEvent } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ledgerBalance } from '#adapters/dynamo-accounting.ts';
import type { Container } from '#functions/container.ts';
import { createHandler, SETTLE_START_MARGIN_MS } from '#functions/settlement.ts';
import { localClientConfig } from '#local/emulators.ts';
import { invocationContext } from '#local/function-url.ts';
import { messagesLeft } from '#local/queue-drain.ts';
import { startPoller } from '#local/settlement-poller.ts';
import { settledWallet } from '#test/billing.ts';
import { drainSettlements, startTestStack, type TestStack, takeSettlements } from '#test/stack.ts';

const until = async (check: () => Promise<boolean>, timeoutMs: number, what: string) => {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
};

/** An SQS event as Lambda's event source mapping delivers it, one record per `{ body, messageId }`. */
const sqsEvent = (queueArn: string, messages: readonly { body: string; messageId: string }[]): SQSEvent => ({
  Records: messages.map((m) => ({
    ...m,
    receiptHandle: m.messageId,
    attributes: {
      ApproximateReceiveCount: '1',
      SentTimestamp: '0',
      SenderId: 'x',
      ApproximateFirstReceiveTimestamp: '0',
    },
    messageAttributes: {},
    md5OfBody: '',
    eventSource: 'aws:sqs',
    eventSourceARN: queueArn,
    awsRegion: 'us-east-1',
  })),
});

const chat = (t: TestStack, extra: Record<string, unknown> = {}) =>
  t.post('/chat/completions', {
    model: 'famA-v4.1-flash',
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 8,
    ...extra,
  });

describe('the running settlement consumer', () => {
  let t: TestStack;
  beforeAll(async () => {
    t = await startTestStack({ consumers: true, settlementVisibilityTimeoutSeconds: 1 });
  });
  afterAll(() => t?.stop());

  it('settles every call: holds released, costs debited, ledger and balance in step', async () => {
    const before = await t.stack.container.accounting.report('acct_demo');
    for (let i = 0; i < 5; i++) expect((await chat(t)).status).toBe(200);
    await (await chat(t, { stream: true })).text();
    const after = await settledWallet(t, 'acct_demo');
    const debits = after.ledger.filter((e) => e.kind === 'debit');
    expect(debits.length - before.ledger.filter((e) => e.kind === 'debit').length).toBe(6);
    expect(after.balance).toBeLessThan(before.balance);
    expect(after.balance).toBe(ledgerBalance(after.ledger));
    expect(after.available).toBe(after.balance);
  });

  it('moves a poison message to the dead-letter queue (redrive policy: five receives), and still settles the record sent beside it', async () => {
    const sqs = new SQSClient(localClientConfig(t.stack.emulators.sqs));
    try {
      await sqs.send(
        new SendMessageCommand({
          QueueUrl: t.stack.resources.settlementQueueUrl,
          MessageBody: '{"not":"a settlement"',
        }),
      );
      expect((await chat(t)).status).toBe(200);
      let deadLettered: string | undefined;
      await until(
        async () => {
          const { Messages = [] } = await sqs.send(
            new ReceiveMessageCommand({
              QueueUrl: t.stack.resources.settlementDlqUrl,
              MessageSystemAttributeNames: ['All'],
            }),
          );
          deadLettered = Messages[0]?.Body;
          return Messages.length > 0;
        },
        20_000,
        'the poison message to reach the DLQ',
      );
      expect(deadLettered).toBe('{"not":"a settlement"');
      expect((await t.stack.container.accounting.report('acct_demo')).holds).toHaveLength(0);
    } finally {
      sqs.destroy();
    }
  });
});

describe('exactly-once settlement over SQS', () => {
  let t: TestStack;
  beforeAll(async () => {
    t = await startTestStack({ consumers: false, settlementVisibilityTimeoutSeconds: 1 });
  });
  afterAll(() => t?.stop());

  it('debits once when a record is resent and redelivered after a visibility timeout', async () => {
    await drainSettlements(t.stack);
    const res = await chat(t);
    const [record] = await takeSettlements(t.stack, 1);
    expect(record?.requestId).toBe(res.headers.get('x-request-id'));
    const body = JSON.stringify(record);
    const sqs = new SQSClient(localClientConfig(t.stack.emulators.sqs));
    // The same record three times, as a sender retrying after a lost acknowledgement would.
    for (let i = 0; i < 3; i++)
      await sqs.send(
        new SendMessageCommand({ QueueUrl: t.stack.resources.settlementQueueUrl, MessageBody: body }),
      );

    // The consumer's first transaction commits, then the invocation dies before the message is deleted: SQS
    // hands the message out again once its visibility timeout has passed.
    let crashed = false;
    const outcomes: string[] = [];
    const base = t.stack.container;
    const crashing: Container = {
      ...base,
      accounting: Object.assign(Object.create(Object.getPrototypeOf(base.accounting)), base.accounting, {
        settle: async (plan: Parameters<typeof base.accounting.settle>[0]) => {
          const outcome = await base.accounting.settle(plan);
          outcomes.push(outcome);
          if (!crashed) {
            crashed = true;
            throw new Error('invocation timed out after committing (injected)');
          }
          return outcome;
        },
      }) as typeof base.accounting,
    };
    const balanceBefore = (await base.accounting.report('acct_demo')).balance;
    const stop = startPoller({
      sqs,
      queueUrl: t.stack.resources.settlementQueueUrl,
      queueArn: t.stack.resources.settlementQueueArn,
      handler: createHandler(() => crashing),
    });
    try {
      // Three sends and one redelivery of the crashed receive; in-flight messages count until deleted.
      await until(
        async () =>
          outcomes.length >= 4 && (await messagesLeft(sqs, t.stack.resources.settlementQueueUrl)) === 0,
        15_000,
        'every delivery, the redelivery included, to be consumed',
      );
    } finally {
      await stop();
      sqs.destroy();
    }
    expect(outcomes.filter((o) => o === 'settled')).toHaveLength(1);
    expect(outcomes.filter((o) => o === 'duplicate')).toHaveLength(3);
    const after = await base.accounting.report('acct_demo');
    const debits = after.ledger.filter((e) => e.kind === 'debit' && e.reference === record?.requestId);
    expect(debits).toHaveLength(1);
    expect(after.balance).toBe(balanceBefore - (record?.cost ?? Number.NaN));
    expect(after.holds).toHaveLength(0);
    expect(after.balance).toBe(ledgerBalance(after.ledger));
  });

  it('settles every record of a message that carries several, each once, however often it is delivered', async () => {
    await drainSettlements(t.stack);
    for (let i = 0; i < 3; i++) expect((await chat(t)).status).toBe(200);
    const records = await takeSettlements(t.stack, 3);
    expect(records).toHaveLength(3);
    const sqs = new SQSClient(localClientConfig(t.stack.emulators.sqs));
    const accounting = t.stack.container.accounting;
    const before = await accounting.report('acct_demo');
    for (const record of records)
      expect(before.holds.some((h) => h.requestId === record.requestId)).toBe(true);
    // The way a busy sender packs them (settlement-codec.ts), sent twice as a retrying sender would.
    const body = `[${records.map((r) => JSON.stringify(r)).join(',')}]`;
    for (let i = 0; i < 2; i++)
      await sqs.send(
        new SendMessageCommand({ QueueUrl: t.stack.resources.settlementQueueUrl, MessageBody: body }),
      );
    const stop = startPoller({
      sqs,
      queueUrl: t.stack.resources.settlementQueueUrl,
      queueArn: t.stack.resources.settlementQueueArn,
      handler: createHandler(() => t.stack.container),
    });
    try {
      await until(
        async () => (await messagesLeft(sqs, t.stack.resources.settlementQueueUrl)) === 0,
        15_000,
        'both deliveries to be consumed',
      );
    } finally {
      await stop();
      sqs.destroy();
    }
    const after = await accounting.report('acct_demo');
    for (const record of records) {
      expect(after.ledger.filter((e) => e.kind === 'debit' && e.reference === record.requestId)).toHaveLength(
        1,
      );
      expect(after.holds.some((h) => h.requestId === record.requestId)).toBe(false);
    }
    const charged = records.reduce((sum, r) => sum + r.cost, 0);
    expect(after.balance).toBe(before.balance - charged);
    expect(after.balance).toBe(ledgerBalance(after.ledger));
  });

  it('reports only the failed messages of a batch (ReportBatchItemFailures)', async () => {
    await drainSettlements(t.stack);
    await chat(t);
    await chat(t);
    const [first, second] = await takeSettlements(t.stack, 2);
    const event = sqsEvent(t.stack.resources.settlementQueueArn, [
      { body: JSON.stringify(first), messageId: 'm-1' },
      { body: 'poison', messageId: 'm-2' },
      { body: JSON.stringify(second), messageId: 'm-3' },
    ]);
    const result = await createHandler(() => t.stack.container)(
      event,
      invocationContext('settlement', 30_000) as Context,
    );
    expect(result).toEqual({ batchItemFailures: [{ itemIdentifier: 'm-2' }] });
    const ledger = (await t.stack.container.accounting.report('acct_demo')).ledger;
    expect(
      ledger.filter((e) => e.reference === first?.requestId || e.reference === second?.requestId),
    ).toHaveLength(2);
  });

  it('reports every failed message when their settlements fail with one and the same error, in parallel', async () => {
    await drainSettlements(t.stack);
    for (let i = 0; i < 4; i++) await chat(t);
    const records = await takeSettlements(t.stack, 4);
    const failing = new Set(records.slice(0, 3).map((r) => r.id));
    // One rejected SDK promise (credentials, an endpoint lookup) rejects every call waiting on it with one object.
    const shared = new Error('store unreachable');
    const real = t.stack.container;
    const container = {
      ...real,
      config: { ...real.config, settlementParallelism: 4 },
      accounting: {
        ...real.accounting,
        settle: async (plan: Parameters<typeof real.accounting.settle>[0]) => {
          await new Promise((resolve) => setTimeout(resolve, 5));
          if (failing.has(plan.settlementId)) throw shared;
          return real.accounting.settle(plan);
        },
      },
    } as Container;
    const event = sqsEvent(
      t.stack.resources.settlementQueueArn,
      records.map((r, i) => ({ body: JSON.stringify(r), messageId: `m-${i}` })),
    );
    const result = await createHandler(() => container)(
      event,
      invocationContext('settlement', 30_000) as Context,
    );
    // Acknowledging one of them would delete it unsettled: its call would never be charged.
    expect(result.batchItemFailures.map((f) => f.itemIdentifier).sort()).toEqual(['m-0', 'm-1', 'm-2']);
  });

  it('starts no settlement the invocation may not finish, and reports those messages failed, not the batch', async () => {
    await drainSettlements(t.stack);
    await chat(t);
    await chat(t);
    const [first, second] = await takeSettlements(t.stack, 2);
    const real = t.stack.container;
    // The first settlement runs long (a throttled store): the invocation's end is then within the margin.
    let remainingMs = 30_000;
    const container = {
      ...real,
      config: { ...real.config, settlementParallelism: 1 },
      accounting: {
        ...real.accounting,
        settle: async (plan: Parameters<typeof real.accounting.settle>[0]) => {
          const outcome = await real.accounting.settle(plan);
          remainingMs = SETTLE_START_MARGIN_MS - 1;
          return outcome;
        },
      },
    } as Container;
    const context = {
      ...invocationContext('settlement', 30_000),
      getRemainingTimeInMillis: () => remainingMs,
    } as Context;
    const event = sqsEvent(t.stack.resources.settlementQueueArn, [
      { body: JSON.stringify(first), messageId: 'm-1' },
      { body: JSON.stringify(second), messageId: 'm-2' },
    ]);
    expect(await createHandler(() => container)(event, context)).toEqual({
      batchItemFailures: [{ itemIdentifier: 'm-2' }],
    });
    const ledger = (await real.accounting.report('acct_demo')).ledger;
    expect(ledger.filter((e) => e.reference === first?.requestId)).toHaveLength(1);
    expect(ledger.filter((e) => e.reference === second?.requestId)).toHaveLength(0);
  });

  it('fails a shared message with a bad entry, after settling the good records beside it', async () => {
    await drainSettlements(t.stack);
    await chat(t);
    const [good] = await takeSettlements(t.stack, 1);
    const event = sqsEvent(t.stack.resources.settlementQueueArn, [
      { body: `[${JSON.stringify(good)},{"not":"a settlement"}]`, messageId: 'm-shared' },
    ]);
    const handler = createHandler(() => t.stack.container);
    const context = invocationContext('settlement', 30_000) as Context;
    // Retried (and in the end dead-lettered) for its bad entry; the good record is not held hostage …
    expect(await handler(event, context)).toEqual({ batchItemFailures: [{ itemIdentifier: 'm-shared' }] });
    const debitsOf = async () =>
      (await t.stack.container.accounting.report('acct_demo')).ledger.filter(
        (e) => e.kind === 'debit' && e.reference === good?.requestId,
      );
    expect(await debitsOf()).toHaveLength(1);
    // … and each retry finds it already settled.
    expect(await handler(event, context)).toEqual({ batchItemFailures: [{ itemIdentifier: 'm-shared' }] });
    expect(await debitsOf()).toHaveLength(1);
  });
});
