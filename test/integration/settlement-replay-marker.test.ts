import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DeleteItemCommand, DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DynamoUsage } from '#adapters/dynamo-usage.ts';
import { utcDay } from '#core/usage-aggregates.ts';
import { localClientConfig } from '#local/emulators.ts';
import { adminCli, startTestStack, type TestStack, takeSettlements } from '#test/stack.ts';

/**
 * A settlement that moved no money is made idempotent by a marker item of its own, which expires. Replayed late —
 * `settlements replay` of a log weeks old, a DLQ redriven late — its marker must not be born expired: once DynamoDB's
 * TTL took it, a second replay would settle the call again and count it twice in the usage aggregates the public
 * report reads (they live 40 days). DynamoDB Local never expires items, so the test does what TTL would.
 */

const DAY_MS = 86_400_000;
/** How long the usage aggregates live (USAGE_TTL_SECONDS): the report's 30 days and a margin. */
const AGGREGATES_DAYS = 40;

let t: TestStack;
let dynamo: DynamoDBClient;
beforeAll(async () => {
  t = await startTestStack();
  dynamo = new DynamoDBClient(localClientConfig(t.stack.emulators.dynamodb));
});
afterAll(async () => {
  dynamo?.destroy();
  await t?.stop();
});

const admin = (...args: string[]) => adminCli(t)(...args);

/** What DynamoDB's TTL does to an item once its `ttl` (epoch seconds) has passed: deletes it. */
const expireIfDue = async (table: string, key: { pk: string; sk: string }): Promise<void> => {
  const Key = { pk: { S: key.pk }, sk: { S: key.sk } };
  const { Item } = await dynamo.send(new GetItemCommand({ TableName: table, Key }));
  if (Item && Number(Item.ttl?.N) * 1000 <= Date.now())
    await dynamo.send(new DeleteItemCommand({ TableName: table, Key }));
};

describe('settlements replay of an old record that moved no money', () => {
  it('keeps its marker past the usage aggregates, dated from the settling, so a second replay counts nothing', async () => {
    // A caller's 404 with a valid key: settled, charged nothing, counted in the error funnel.
    const res = await t.post('/chat/completions', {
      model: 'famZ-never-listed',
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(res.status).toBe(404);
    const [sent] = await takeSettlements(t.stack, 1);
    if (!sent) throw new Error('no settlement record');
    expect(sent.cost).toBe(0);
    // As an old log holds it: the call arrived 20 days ago, inside the report's window.
    const receivedAt = Date.now() - 20 * DAY_MS;
    const record = { ...sent, timings: { ...sent.timings, receivedAt } };
    const file = join(mkdtempSync(join(tmpdir(), 'replay-')), 'old.jsonl');
    writeFileSync(file, `${JSON.stringify({ message: 'settlement record not sent', record })}\n`);

    const settling = Date.now();
    expect(JSON.parse(await admin('settlements', 'replay', file))).toMatchObject({
      settled: 1,
      duplicates: 0,
    });
    const wallet = t.stack.resources.tables.wallet;
    const marker = { pk: `settled#${record.id}`, sk: 'settled' };
    const { Item } = await dynamo.send(
      new GetItemCommand({ TableName: wallet, Key: { pk: { S: marker.pk }, sk: { S: marker.sk } } }),
    );
    // Counted from the settling, not the call's arrival, and past the aggregates' 40 days.
    expect(Number(Item?.ttl?.N) * 1000).toBeGreaterThanOrEqual(settling - 1000 + AGGREGATES_DAYS * DAY_MS);

    const usage = new DynamoUsage(dynamo, t.stack.resources.tables.usage);
    const day = utcDay(receivedAt);
    const counted = await usage.rows([day]);
    expect(counted).toContainEqual({
      day,
      subject: 'status#agent-error#404',
      counters: { count: 1 },
    });

    // Time passes as far as DynamoDB's TTL is concerned; the aggregates, dated by the call, are still there.
    await expireIfDue(wallet, marker);
    expect(JSON.parse(await admin('settlements', 'replay', file))).toMatchObject({
      settled: 0,
      duplicates: 1,
    });
    expect(await usage.rows([day])).toEqual(counted);
  });
});
