import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
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

/** `settlements replay FILE`, whatever its exit status: the status, the summary (stdout) and what went to stderr. */
const replay = async (file: string) => {
  try {
    return { code: 0, summary: JSON.parse(await admin('settlements', 'replay', file)), stderr: '' };
  } catch (error) {
    const { code, stdout, stderr } = error as { code: number; stdout: string; stderr: string };
    return { code, summary: JSON.parse(stdout), stderr: stderr.trim() };
  }
};

const replayFile = (lines: readonly string[]) => {
  const file = join(mkdtempSync(join(tmpdir(), 'replay-')), 'lost.jsonl');
  writeFileSync(file, lines.join('\n'));
  return file;
};

/** A paid call made through the gateway whose settlement record never reached the queue. */
const lostCall = async () => {
  const res = await t.post('/chat/completions', {
    model: 'famA-v4.1-flash',
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 8,
  });
  expect(res.status).toBe(200);
  const [record] = await takeSettlements(t.stack, 1);
  if (!record) throw new Error('no settlement record');
  return record;
};

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
    // The line it cannot read makes the run fail, though the records it could read are settled.
    expect(await replay(file)).toEqual({
      code: 1,
      summary: { settled: 2, duplicates: 0, invalid: 1, invalidLines: [3], failed: [] },
      stderr: expect.stringContaining('1 line unreadable (line 3)'),
    });
    const after = await t.stack.container.accounting.report('acct_demo');
    expect(after.holds.length).toBe(before.holds.length);
    const charged = (first?.cost ?? 0) + (second?.cost ?? 0);
    expect(charged).toBeGreaterThan(0);
    expect(after.balance).toBe(before.balance - charged);
    expect(after.balance).toBe(ledgerBalance(after.ledger));

    expect(await replay(file)).toMatchObject({ code: 1, summary: { settled: 0, duplicates: 2 } });
    writeFileSync(file, readFileSync(file, 'utf8').replace('not json\n', ''));
    expect(await replay(file)).toEqual({
      code: 0,
      summary: { settled: 0, duplicates: 2, invalid: 0, invalidLines: [], failed: [] },
      stderr: '',
    });
    expect((await t.stack.container.accounting.report('acct_demo')).balance).toBe(after.balance);
  });

  it('fails, naming the first lines it could not read, when lines carry a prefix (a text log export)', async () => {
    const record = await lostCall();
    const logged = JSON.stringify({ level: 'error', message: 'settlement record not sent', record });
    // Each line as a text export of the log group shows it: time and request id before the JSON.
    const file = replayFile(
      Array.from({ length: 7 }, (_, i) => `2026-11-22T12:00:0${i}.000Z\t${record.requestId}\t${logged}`),
    );
    const before = await t.stack.container.accounting.report('acct_demo');
    const run = await replay(file);
    expect(run).toMatchObject({
      code: 1,
      summary: { settled: 0, duplicates: 0, invalid: 7, invalidLines: [1, 2, 3, 4, 5], failed: [] },
    });
    expect(run.stderr).toContain('7 lines unreadable (lines 1, 2, 3, 4, 5, …)');
    expect((await t.stack.container.accounting.report('acct_demo')).balance).toBe(before.balance);
    // The same lines without their prefix settle.
    writeFileSync(file, logged);
    expect(await replay(file)).toMatchObject({ code: 0, summary: { settled: 1 } });
  });

  it('settles no record of an account that does not exist: counted as failed, no wallet made for it', async () => {
    const record = await lostCall();
    const ghost = {
      ...record,
      id: `ghost-${record.id}`,
      requestId: `ghost-${record.requestId}`,
      accountId: 'acct_ghost',
    };
    const file = replayFile([JSON.stringify(ghost), JSON.stringify(record)]);
    const run = await replay(file);
    expect(run).toMatchObject({
      code: 1,
      summary: {
        settled: 1,
        duplicates: 0,
        invalid: 0,
        failed: [`${ghost.id}: no account acct_ghost (line 1)`],
      },
    });
    expect(run.stderr).toContain('1 record not settled');
    expect(await t.stack.container.accounting.report('acct_ghost')).toEqual({
      balance: 0,
      available: 0,
      owed: 0,
      holds: [],
      ledger: [],
    });
  });
});
