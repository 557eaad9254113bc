import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ledgerBalance } from '#adapters/dynamo-accounting.ts';
import { adminCli, startTestStack, type TestStack, takeSettlements } from '#test/stack.ts';

/**
 * A settlement record the gateway could not send (SQS unreachable past the SDK's retries) is logged whole, as
 * "settlement record not sent": that line is the charge's only trace. The operator replays such lines with the
 * admin CLI; a record settles once, however often it is replayed.
 */
let t: TestStack;
beforeAll(async () => {
  t = await startTestStack();
});
afterAll(() => t?.stop());

const admin = (...args: string[]) => adminCli(t)(...args);

describe('settlements replay', () => {
  it('settles logged records once, holds released and costs debited, however often it runs', async () => {
    const before = await t.stack.container.accounting.report('acct_demo');
    for (let i = 0; i < 2; i++) {
      const res = await t.post('/chat/completions', {
        model: 'famA-v4.1-flash',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 8,
      });
      expect(res.status).toBe(200);
    }
    // Taken off the queue: as far as settlement knows, these records were never sent.
    const [first, second] = await takeSettlements(t.stack, 2);
    const held = await t.stack.container.accounting.report('acct_demo');
    expect(held.holds.length).toBe(before.holds.length + 2);

    const file = join(mkdtempSync(join(tmpdir(), 'replay-')), 'lost.jsonl');
    writeFileSync(
      file,
      [
        // The gateway's log line, as CloudWatch keeps it …
        JSON.stringify({ level: 'error', message: 'settlement record not sent', record: first, error: {} }),
        // … a bare record, and something that is neither.
        JSON.stringify(second),
        'not json',
        '',
      ].join('\n'),
    );
    expect(JSON.parse(await admin('settlements', 'replay', file))).toEqual({
      settled: 2,
      duplicates: 0,
      invalid: 1,
      failed: [],
    });
    const after = await t.stack.container.accounting.report('acct_demo');
    expect(after.holds.length).toBe(before.holds.length);
    const charged = (first?.cost ?? 0) + (second?.cost ?? 0);
    expect(charged).toBeGreaterThan(0);
    expect(after.balance).toBe(before.balance - charged);
    expect(after.balance).toBe(ledgerBalance(after.ledger));

    expect(JSON.parse(await admin('settlements', 'replay', file))).toMatchObject({
      settled: 0,
      duplicates: 2,
    });
    expect((await t.stack.container.accounting.report('acct_demo')).balance).toBe(after.balance);
  });
});
