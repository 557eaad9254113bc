import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { DynamoDBClient, TransactWriteItemsCommand } from '@aws-sdk/client-dynamodb';
import { SQSClient } from '@aws-sdk/client-sqs';
import { localClientConfig } from '#local/emulators.ts';
import { discardMessages, waitForEmptyQueue } from '#local/queue-drain.ts';
import type { StackFile } from '#local/stack-file.ts';
import { type Distribution, distribution } from './stats.ts';

/**
 * The bench's account is a volume account, as a heavy real user would be: a custom quota far above the load
 * and a large balance, set with the operator CLI against the stack under test (found through its stack file).
 */
export const provisionBenchAccount = async (
  repoRoot: string,
  stackFile: string,
  accountId: string,
): Promise<void> => {
  const admin = (...args: string[]) =>
    promisify(execFile)(process.execPath, ['bin/admin.ts', ...args], {
      cwd: repoRoot,
      env: { ...process.env, LOCAL_STACK_FILE: stackFile },
    });
  // The most the buckets enforce as written: one unit per µs (60 M a minute, 86.4 G a day), far above the load.
  const minute = String(60_000_000);
  const day = String(86_400_000_000);
  await admin('accounts', 'quota', accountId, '--rpm', minute, '--rpd', day, '--tpm', minute, '--tpd', day);
  await admin('wallet', 'topup', accountId, '1000000', '--reference', `bench-${Date.now()}`);
};

/**
 * The unit "one accounting round trip" is measured in: a transaction shaped like admission's — the account's
 * bucket item and wallet item updated, one item put — against the same DynamoDB Local, on the same account
 * (it only stamps a `probedAt` attribute, which nothing reads), sequentially from the bench process while the
 * gateways are idle.
 */
export const measureStoreRoundTrip = async (
  stackFile: string,
  accountId: string,
): Promise<Distribution | null> => {
  const stack = JSON.parse(readFileSync(stackFile, 'utf8')) as StackFile;
  const client = new DynamoDBClient({ ...localClientConfig(stack.emulators.dynamodb), maxAttempts: 1 });
  const tables = stack.resources.tables;
  const samples = 400;
  const warmup = 100;
  const latencies: number[] = [];
  const stamp = (table: string, sk: string, at: string) => ({
    Update: {
      TableName: table,
      Key: { pk: { S: `acct#${accountId}` }, sk: { S: sk } },
      UpdateExpression: 'SET probedAt = :at',
      ExpressionAttributeValues: { ':at': { N: at } },
    },
  });
  try {
    for (let i = 0; i < samples + warmup; i++) {
      const started = performance.now();
      const at = String(Date.now());
      await client.send(
        new TransactWriteItemsCommand({
          TransactItems: [
            stamp(tables.buckets, 'limits', at),
            stamp(tables.wallet, 'wallet', at),
            { Put: { TableName: tables.wallet, Item: { pk: { S: 'bench#probe' }, sk: { S: `p#${i}` } } } },
          ],
        }),
      );
      if (i >= warmup) latencies.push(performance.now() - started);
    }
  } finally {
    client.destroy();
  }
  return distribution(Float64Array.from(latencies));
};

/**
 * Resolves once a stack's settlement queue is empty (nothing waiting, nothing in flight), or after `maxMs`.
 * The consumer's work on a round's settlements belongs to that round; waiting for it keeps it out of the next.
 */
export const settlementsDone = async (stackFile: string, maxMs = 30_000): Promise<void> => {
  const stack = JSON.parse(readFileSync(stackFile, 'utf8')) as StackFile;
  const sqs = new SQSClient(localClientConfig(stack.emulators.sqs));
  // Records may still sit in the local host's sender for its batching linger (20 ms) before they are queued.
  await new Promise((resolve) => setTimeout(resolve, 50));
  try {
    await waitForEmptyQueue(sqs, stack.resources.settlementQueueUrl, maxMs);
  } finally {
    sqs.destroy();
  }
};

/**
 * Deletes, unread, every settlement message on a stack that runs no consumer (the unmetered one), between rounds.
 * The SQS emulator keeps its messages in the gateway's own process — the real queue lives elsewhere — and without
 * a consumer they pile up over a run (about 3 MB a second at 16 clients): the emulator's heap then grows without
 * end, and each of its young collections copies every message that arrived since the last (35–130 ms, on the CPUs
 * the measured request path needs). Emptied after each round, the queue holds one round's records at most. Resolves
 * to the messages deleted.
 */
export const discardSettlements = async (stackFile: string): Promise<number> => {
  const stack = JSON.parse(readFileSync(stackFile, 'utf8')) as StackFile;
  const sqs = new SQSClient(localClientConfig(stack.emulators.sqs));
  // As in settlementsDone: the sender's batching linger may still hold the round's last records.
  await new Promise((resolve) => setTimeout(resolve, 50));
  try {
    return await discardMessages(sqs, stack.resources.settlementQueueUrl);
  } finally {
    sqs.destroy();
  }
};
