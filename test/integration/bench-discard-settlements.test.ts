import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localClientConfig } from '#local/emulators.ts';
import { messagesLeft } from '#local/queue-drain.ts';
import type { StackFile } from '#local/stack-file.ts';
import { discardSettlements } from '../../bench/lib/accounting.ts';
import { drainSettlements, startTestStack, type TestStack } from '../support/stack.ts';

/**
 * The benchmark's unmetered stack runs no consumer; between rounds the bench deletes its settlement messages so
 * the SQS emulator's memory does not grow over the run (bench/lib/accounting.ts).
 */
describe('bench: discarding an unconsumed settlement queue', () => {
  let t: TestStack;
  let dir: string;
  let stackFile: string;
  let sqs: SQSClient;
  beforeAll(async () => {
    t = await startTestStack({ consumers: false });
    dir = mkdtempSync(join(tmpdir(), 'svc-bench-discard-'));
    stackFile = join(dir, 'stack.json');
    const file: StackFile = { url: t.stack.url, emulators: t.stack.emulators, resources: t.stack.resources };
    writeFileSync(stackFile, JSON.stringify(file));
    sqs = new SQSClient(localClientConfig(t.stack.emulators.sqs));
  });
  afterAll(async () => {
    sqs?.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
    await t?.stop();
  });

  it('deletes every message a round left, and only reports what it deleted', async () => {
    await drainSettlements(t.stack);
    for (let i = 0; i < 3; i++) {
      const res = await t.post('/chat/completions', {
        model: 'famA-v4.1-flash',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 8,
      });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    }
    const queueUrl = t.stack.resources.settlementQueueUrl;
    // Records leave once each response has ended: wait until the queue holds them.
    const deadline = Date.now() + 5_000;
    while ((await messagesLeft(sqs, queueUrl)) === 0 && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 50));
    const queued = await messagesLeft(sqs, queueUrl);
    expect(queued).toBeGreaterThan(0);

    expect(await discardSettlements(stackFile)).toBeGreaterThanOrEqual(queued);
    expect(await messagesLeft(sqs, queueUrl)).toBe(0);
    expect(await discardSettlements(stackFile)).toBe(0);
  });
});
