import { randomBytes } from 'node:crypto';
import {
  DynamoDBClient,
  ThrottlingException,
  TransactionCanceledException,
  type TransactWriteItemsCommandInput,
} from '@aws-sdk/client-dynamodb';
import { inject } from 'vitest';
import { DynamoAccounting, ledgerBalance } from '#adapters/dynamo-accounting.ts';
import { DynamoAccounts } from '#adapters/dynamo-accounts.ts';
import type { AccountProfile } from '#core/accounting.ts';
import { Admission } from '#core/admission.ts';
import { emissionUs } from '#core/limits.ts';
import { RefreshingCache } from '#core/refreshing-cache.ts';
import type { SettlementRecord } from '#core/settlement.ts';
import { localClientConfig } from '#local/emulators.ts';
import { type Provisioned, provision } from '#local/provision.ts';
import { manualClock } from './fixtures.ts';

/** Which injected fault, if any, the next TransactWriteItems call gets. */
export type InjectedFault = 'conflict' | 'counters-conflict' | 'throttle' | 'ambiguous' | null;

/**
 * Core admission and the DynamoDB accounting adapter on a fresh set of tables in the shared DynamoDB Local,
 * with a hand-driven clock and a fault injector on the SDK client. DynamoDB Local never raises transaction
 * conflicts or throttling, so the injector does, through SDK middleware: `conflict` and `throttle` fail a
 * transaction before it is sent (`counters-conflict` names only its writes to the usage table as contended, and
 * passes a transaction without any); `ambiguous` lets it commit and then fails the call, as a lost response would.
 */
export const accountingHarness = async (options: { holdTtlMs?: number; prefix?: string } = {}) => {
  const emulators = inject('emulators');
  const resources: Provisioned = await provision(
    emulators,
    options.prefix ?? `a${randomBytes(4).toString('hex')}`,
  );
  const client = new DynamoDBClient(localClientConfig(emulators.dynamodb));
  let nextFault: () => InjectedFault = () => null;
  client.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName !== 'TransactWriteItemsCommand') return next(args);
      const fault = nextFault();
      const items = (args.input as TransactWriteItemsCommandInput).TransactItems ?? [];
      const onUsage = (item: (typeof items)[number]) =>
        (item.Update ?? item.Put ?? item.Delete ?? item.ConditionCheck)?.TableName === resources.tables.usage;
      if (fault === 'conflict' || (fault === 'counters-conflict' && items.some(onUsage))) {
        throw new TransactionCanceledException({
          message: 'Transaction cancelled [TransactionConflict] (injected)',
          $metadata: {},
          CancellationReasons: items.map((item) => ({
            Code: fault === 'conflict' || onUsage(item) ? 'TransactionConflict' : 'None',
          })),
        });
      }
      if (fault === 'throttle')
        throw new ThrottlingException({ message: 'Rate exceeded (injected)', $metadata: {} });
      const result = await next(args);
      if (fault === 'ambiguous') throw new Error('socket hang up after commit (injected)');
      return result;
    },
    { step: 'initialize', name: 'injectFaults' },
  );
  const sleep = async () => {};
  const tables = resources.tables;
  const accounting = new DynamoAccounting(client, tables, sleep);
  const accounts = new DynamoAccounts(client, tables.accounts);
  const clock = manualClock(Date.UTC(2026, 10, 22, 12));
  const admission = new Admission({
    store: accounting,
    accounts: new RefreshingCache<AccountProfile | null>({
      load: (id) => accounts.findAccount(id),
      clock,
      ttlMs: 0,
    }),
    clock,
    random: Math.random,
    sleep,
    holdTtlMs: options.holdTtlMs ?? 30 * 60_000,
  });
  return {
    client,
    resources,
    accounting,
    accounts,
    admission,
    clock,
    /** Sets what the following transactions get (called once per transaction). */
    injectFaults: (decide: () => InjectedFault) => {
      nextFault = decide;
    },
    /** Balance = Σ ledger, available = balance − Σ holds, and neither below zero. */
    invariants: async (accountId: string) => {
      const report = await accounting.report(accountId);
      const held = report.holds.reduce((sum, h) => sum + h.amount, 0);
      return {
        report,
        balanceMatchesLedger: report.balance === ledgerBalance(report.ledger),
        availableMatchesHolds: report.available === report.balance - held,
        nonNegative: report.available >= 0 && report.balance >= 0,
      };
    },
    close: () => client.destroy(),
  };
};

export type AccountingHarness = Awaited<ReturnType<typeof accountingHarness>>;

/** A settlement record for a successful chat call of `accountId` that admission held `hold` for. */
export const chatSettlement = (
  accountId: string,
  requestId: string,
  options: {
    cost: number;
    hold: number | null;
    at: number;
    tokens?: number;
    estimatedTokens?: number;
    outcome?: SettlementRecord['outcome'];
  },
): SettlementRecord => ({
  v: 1,
  id: requestId,
  requestId,
  endpoint: 'chat.completions',
  accountId,
  keyPrefix: 'svc_live_test0000',
  model: 'famA-v4.1-flash',
  deployment: 'famA-v4.1-flash@sim-a',
  provider: 'sim-a',
  stream: false,
  status: 200,
  outcome: options.outcome ?? 'success',
  usage: {
    promptTokens: options.tokens ?? 10,
    completionTokens: 0,
    cachedPromptTokens: 0,
    reasoningTokens: 0,
    source: 'upstream',
  },
  cost: options.cost,
  admission: {
    hold: options.hold === null ? null : { id: requestId, amount: options.hold },
    estimatedTokens: options.estimatedTokens ?? options.tokens ?? 10,
    tokenEmissionUs: { tpm: emissionUs('tpm', 2_000_000), tpd: emissionUs('tpd', 50_000_000) },
  },
  fault: null,
  attempts: [],
  timings: { receivedAt: options.at, firstByteMs: 1, totalMs: 2 },
});
