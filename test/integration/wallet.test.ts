import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { DynamoAccounting, TopUpReferenceError } from '#adapters/dynamo-accounting.ts';
import { DynamoUsage } from '#adapters/dynamo-usage.ts';
import {
  BalanceCeilingError,
  MAX_BALANCE_NANO,
  type SettlementPlan,
  TopUpAmountError,
} from '#core/accounting.ts';
import { Admission, type Admitted } from '#core/admission.ts';
import type { Principal } from '#core/authenticator.ts';
import { CallRecorder } from '#core/call-recorder.ts';
import { InsufficientBalanceError, RateLimitError, ServiceUnavailableError } from '#core/errors.ts';
import { usdToNano } from '#core/pricing.ts';
import { RefreshingCache } from '#core/refreshing-cache.ts';
import { type AdmissionRef, planSettlement, tokenCorrectionOf } from '#core/settlement.ts';
import { loadConfig } from '#functions/config.ts';
import { createContainer } from '#functions/container.ts';
import { createHandler as createSweeper } from '#functions/hold-sweeper.ts';
import { tables as tableDefinitions } from '#lib/resources.ts';
import { localClientConfig } from '#local/emulators.ts';
import { invocationContext } from '#local/function-url.ts';
import { type AccountingHarness, accountingHarness, chatSettlement } from '#test/accounting.ts';
import { chatModel, deployment, testGateway } from '#test/fixtures.ts';

let h: AccountingHarness;
beforeAll(async () => {
  h = await accountingHarness();
});
afterAll(() => h?.close());

let counter = 0;
const newAccount = async (usd = 0) => {
  const account = await h.accounts.createAccount({ id: `acct_w${counter++}_${Date.now()}` });
  if (usd > 0)
    await h.accounting.topUp({
      accountId: account.id,
      amount: usdToNano(usd),
      reference: `seed-${account.id}`,
      at: h.clock.now(),
    });
  return account.id;
};
const principal = (accountId: string): Principal => ({ accountId, keyPrefix: 'svc_live_test0000' });

const settled = (
  accountId: string,
  requestId: string,
  options: Omit<Parameters<typeof chatSettlement>[2], 'at'>,
) => chatSettlement(accountId, requestId, { ...options, at: h.clock.now() });

/** Admission a millisecond after whatever came before, so the ledger's order follows the test's. */
const admit = (accountId: string, requestId: string, holdAmount: number, estimatedTokens = 10) => {
  h.clock.advance(1);
  return h.admission.admit(principal(accountId), { requestId, estimatedTokens, holdAmount });
};

/** What a call's settlement record says of its admission, as the gateway's recorder writes it. */
const admissionOf = (admitted: Admitted): AdmissionRef => ({
  hold: admitted.hold,
  estimatedTokens: admitted.estimatedTokens,
  tokenEmissionUs: admitted.tokenEmissionUs,
  tokenTatUs: admitted.tokenTatUs,
  limitsGen: admitted.limitsGen,
});

/**
 * Another gateway instance: its own admission (its own memory of the buckets) on `store`, caching account profiles
 * for `profileTtlMs` (ACCOUNT_CACHE_TTL_MS).
 */
const instanceOn = (store: typeof h.accounting, profileTtlMs = 0) =>
  new Admission({
    store,
    accounts: new RefreshingCache({
      load: (accountId: string) => h.accounts.findAccount(accountId),
      clock: h.clock,
      ttlMs: profileTtlMs,
    }),
    clock: h.clock,
    random: () => 0,
    sleep: async () => {},
    holdTtlMs: 30 * 60_000,
  });

describe('top-ups', () => {
  it('credit once per payment reference and make the account trusted, permanently', async () => {
    const id = await newAccount();
    expect((await h.accounts.getAccount(id))?.tier).toBe('unverified');
    const topUp = () =>
      h.accounting.topUp({ accountId: id, amount: usdToNano(2), reference: `pay-${id}`, at: h.clock.now() });
    expect(await topUp()).toBe(true);
    expect(await topUp()).toBe(false);
    expect(await h.accounting.wallet(id)).toEqual({
      balance: usdToNano(2),
      available: usdToNano(2),
      owed: 0,
    });
    expect((await h.accounts.getAccount(id))?.tier).toBe('trusted');
    // Spending everything does not take the tier back.
    await admit(id, `spend-${id}`, usdToNano(2));
    await h.accounting.settle(
      planSettlement(settled(id, `spend-${id}`, { cost: usdToNano(2), hold: usdToNano(2) })),
    );
    expect((await h.accounting.wallet(id)).balance).toBe(0);
    expect((await h.accounts.getAccount(id))?.tier).toBe('trusted');
  });

  it('refuse a payment reference already credited to another account or with another amount', async () => {
    const first = await newAccount();
    const second = await newAccount();
    const reference = `pay-shared-${first}`;
    const topUp = (accountId: string, usd: number) =>
      h.accounting.topUp({ accountId, amount: usdToNano(usd), reference, at: h.clock.now() });
    expect(await topUp(first, 5)).toBe(true);
    expect(await topUp(first, 5)).toBe(false); // the same payment again
    await expect(topUp(second, 5)).rejects.toBeInstanceOf(TopUpReferenceError);
    await expect(topUp(first, 500)).rejects.toBeInstanceOf(TopUpReferenceError);
    expect((await h.accounting.wallet(second)).balance).toBe(0);
    expect((await h.accounting.wallet(first)).balance).toBe(usdToNano(5));
  });

  it('refuse a top-up under 1 USD (spec §1) whichever tool sends it, changing nothing', async () => {
    const id = await newAccount();
    const topUp = (amount: number) =>
      h.accounting.topUp({ accountId: id, amount, reference: `small-${id}-${amount}`, at: h.clock.now() });
    await expect(topUp(usdToNano(1) - 1)).rejects.toBeInstanceOf(TopUpAmountError);
    await expect(topUp(0)).rejects.toBeInstanceOf(TopUpAmountError);
    await expect(topUp(-usdToNano(5))).rejects.toBeInstanceOf(TopUpAmountError);
    await expect(topUp(usdToNano(1) + 0.5)).rejects.toBeInstanceOf(TopUpAmountError);
    expect(await h.accounting.wallet(id)).toEqual({ balance: 0, available: 0, owed: 0 });
    // Refused, so the account is not trusted either: only money makes it so.
    expect((await h.accounts.getAccount(id))?.tier).toBe('unverified');
    await expect(topUp(usdToNano(1))).resolves.toBe(true);
    expect((await h.accounting.wallet(id)).balance).toBe(usdToNano(1));
  });

  it('carry what an unverified account spent into its trusted limits as the same units, not the same time', async () => {
    const id = await newAccount();
    // A full unverified minute: 30 requests, 60 s of backlog at 2 s each.
    for (let i = 0; i < 30; i++) await admit(id, `u-${id}-${i}`, 0);
    await expect(admit(id, `u-${id}-30`, 0)).rejects.toMatchObject({ status: 429 });
    await h.accounting.topUp({
      accountId: id,
      amount: usdToNano(1),
      reference: `up-${id}`,
      at: h.clock.now(),
    });
    // Trusted: 1000 a minute, of which those 30 are spent (read as 60 s at 60 ms each, the minute was full).
    const next = await admit(id, `t-${id}`, 0);
    expect(next.headers['x-ratelimit-limit-requests']).toBe('1000');
    expect(next.headers['x-ratelimit-remaining-requests']).toBe('969');
    // 310 tokens spent, less what drained in the 31 ms the calls took (at the unverified 100,000 a minute).
    const tokensLeft = Number(next.headers['x-ratelimit-remaining-tokens']);
    expect(tokensLeft).toBeGreaterThanOrEqual(2_000_000 - 310);
    expect(tokensLeft).toBeLessThan(2_000_000 - 200);
  });

  it('carry what an account spent into a raised custom quota the same way', async () => {
    const id = await newAccount(1);
    await h.accounting.setQuota(id, { rpm: 10 }, h.clock.now());
    for (let i = 0; i < 10; i++) await admit(id, `q-${id}-${i}`, 0);
    await expect(admit(id, `q-${id}-10`, 0)).rejects.toMatchObject({ status: 429 });
    // The operator raises the minute to 1000: 10 are spent, not a full minute's worth of time.
    await h.accounting.setQuota(id, { rpm: 1000 }, h.clock.now());
    const next = await admit(id, `q-${id}-11`, 0);
    expect(next.headers['x-ratelimit-limit-requests']).toBe('1000');
    expect(next.headers['x-ratelimit-remaining-requests']).toBe('989');
    await h.accounting.setQuota(id, null, h.clock.now());
    expect((await h.accounts.findAccount(id))?.quota).toBeNull();
    await expect(h.accounting.setQuota('acct_nobody', { rpm: 5 }, h.clock.now())).rejects.toThrow(
      /No account/,
    );
  });

  it.each([
    [
      'the first top-up',
      async (id: string) => {
        await h.accounting.topUp({
          accountId: id,
          amount: usdToNano(1),
          reference: `c-${id}`,
          at: h.clock.now(),
        });
      },
    ],
    [
      'a raised quota',
      async (id: string) => {
        await h.accounting.setQuota(id, { rpm: 1000, rpd: 20_000 }, h.clock.now());
      },
    ],
  ])(
    'charge calls under the new limits after %s, though the instance admitting them still caches the old profile',
    async (_, change) => {
      const id = await newAccount();
      // An instance whose cache of the account outlives the change (up to ACCOUNT_CACHE_TTL_MS in production).
      const cached = new Admission({
        store: h.accounting,
        accounts: new RefreshingCache({
          load: (accountId: string) => h.accounts.findAccount(accountId),
          clock: h.clock,
          ttlMs: 60 * 60_000,
        }),
        clock: h.clock,
        random: () => 0,
        sleep: async () => {},
        holdTtlMs: 30 * 60_000,
      });
      const call = (n: number) =>
        cached.admit(principal(id), { requestId: `c-${id}-${n}`, estimatedTokens: 10, holdAmount: 0 });
      expect((await call(0)).headers['x-ratelimit-limit-requests']).toBe('30');
      await change(id);
      let last = await call(1);
      for (let n = 2; n <= 10; n++) last = await call(n);
      // 11 requests spent of the new 1000 a minute: each of the 10 after the change charged at 60 ms, not at the
      // old 2 s (which spent 20 s of the new minute, a third of it, on 10 calls).
      expect(last.headers['x-ratelimit-limit-requests']).toBe('1000');
      expect(last.headers['x-ratelimit-remaining-requests']).toBe('989');
      // And the store agrees: an instance that never saw the old profile finds the same.
      const fresh = await instanceOn(h.accounting).admit(principal(id), {
        requestId: `f-${id}`,
        estimatedTokens: 10,
        holdAmount: 0,
      });
      expect(fresh.headers['x-ratelimit-remaining-requests']).toBe('988');
    },
  );

  it('stop at the most a wallet holds, so money stays exact; racing top-ups cannot pass it together', async () => {
    const id = await newAccount();
    const topUp = (amount: number, reference: string) =>
      h.accounting.topUp({ accountId: id, amount, reference: `${reference}-${id}`, at: h.clock.now() });
    const half = MAX_BALANCE_NANO / 2;
    // Each fits alone; the wallet's condition lets only one of them in.
    const raced = await Promise.allSettled([topUp(half + 1, 'a'), topUp(half + 1, 'b')]);
    expect(raced.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    const refused = raced.find((r) => r.status === 'rejected') as PromiseRejectedResult;
    expect(refused.reason).toBeInstanceOf(BalanceCeilingError);
    expect((await h.accounting.wallet(id)).balance).toBe(half + 1);
    // Up to the ceiling exactly is fine; the smallest top-up more is refused and changes nothing.
    await expect(topUp(half - 1, 'c')).resolves.toBe(true);
    await expect(topUp(usdToNano(1), 'd')).rejects.toBeInstanceOf(BalanceCeilingError);
    expect(await h.accounting.wallet(id)).toEqual({
      balance: MAX_BALANCE_NANO,
      available: MAX_BALANCE_NANO,
      owed: 0,
    });
  });
});

describe('retries and races around the top-up and quota writes', () => {
  it('answer a retried top-up as already credited, even when the wallet it filled has no room for it again', async () => {
    const id = await newAccount();
    const topUp = (amount: number) =>
      h.accounting.topUp({ accountId: id, amount, reference: `full-${id}`, at: h.clock.now() });
    expect(await topUp(MAX_BALANCE_NANO)).toBe(true);
    expect(await topUp(MAX_BALANCE_NANO)).toBe(false);
    // The reference reused for another amount is named as such, not as the ceiling or the minimum it also misses.
    await expect(topUp(usdToNano(5))).rejects.toBeInstanceOf(TopUpReferenceError);
    await expect(topUp(1)).rejects.toBeInstanceOf(TopUpReferenceError);
    expect(await h.accounting.wallet(id)).toEqual({
      balance: MAX_BALANCE_NANO,
      available: MAX_BALANCE_NANO,
      owed: 0,
    });
  });

  it('merge a quota change into the custom quota as it is, and into one another operator made meanwhile', async () => {
    const id = await newAccount();
    expect(await h.accounting.setQuota(id, { rpm: 100 }, h.clock.now())).toEqual({ rpm: 100 });
    // The other change commits after this one read the profile, and before it read the buckets: both reads were
    // taken before any write, so only a condition on the profile as read can tell.
    const other = Promise.withResolvers<void>();
    let profileReads = 0;
    let bucketReads = 0;
    const client = new DynamoDBClient(localClientConfig(inject('emulators').dynamodb));
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName !== 'GetItemCommand') return next(args);
        const table = (args.input as { TableName?: string }).TableName;
        if (table === h.resources.tables.accounts && ++profileReads === 1) {
          const read = await next(args);
          await h.accounting
            .setQuota(id, { tpm: 10_000_000 }, h.clock.now())
            .then(() => other.resolve(), other.reject);
          return read;
        }
        if (table === h.resources.tables.buckets && ++bucketReads === 1) await other.promise;
        return next(args);
      },
      { step: 'initialize', name: 'racingQuota' },
    );
    try {
      const racing = new DynamoAccounting(client, h.resources.tables, async () => {});
      expect(await racing.setQuota(id, { rpd: 500_000 }, h.clock.now())).toEqual({
        rpm: 100,
        rpd: 500_000,
        tpm: 10_000_000,
      });
    } finally {
      client.destroy();
    }
    expect(profileReads).toBeGreaterThan(1);
    expect((await h.accounts.findAccount(id))?.quota).toEqual({ rpm: 100, rpd: 500_000, tpm: 10_000_000 });
  });
});

describe('admission and settlement', () => {
  it('gives back at settlement a hold an admission took without answering (its reply lost), not half an hour on', async () => {
    const id = await newAccount(1);
    const gateway = testGateway({ admission: h.admission, clock: h.clock, maxAttempts: 1 });
    const call = new CallRecorder('chat.completions', `lost-${id}`, h.clock);
    call.principal = principal(id);
    // The store commits the admission, and its reply is lost: the client is told the store is unreachable.
    let faults = 0;
    h.injectFaults(() => (faults++ === 0 ? 'ambiguous' : null));
    const refused = await gateway
      .admitAndRoute({
        request: { requestId: call.requestId, estimatedTokens: 10, holdAmount: usdToNano(0.9) },
        resolved: { model: chatModel(), deployments: [deployment({ id: 'a' })] },
        call,
        cycleKeys: true,
        attempt: async () => 'served',
      })
      .catch((error: unknown) => error);
    h.injectFaults(() => null);
    expect(refused).toMatchObject({ status: 503 });
    call.failed(refused); // as the endpoint's handler records it
    expect((await h.accounting.wallet(id)).available).toBe(usdToNano(0.1)); // it was held after all
    // The call's settlement record releases it, charging nothing; again on redelivery, changing nothing.
    const record = call.settlement();
    expect(record).toMatchObject({ outcome: 'unavailable', cost: 0 });
    expect(await h.accounting.settle(planSettlement(record, h.clock.now()))).toBe('settled');
    expect(await h.accounting.settle(planSettlement(record, h.clock.now()))).toBe('duplicate');
    expect(await h.accounting.wallet(id)).toEqual({
      balance: usdToNano(1),
      available: usdToNano(1),
      owed: 0,
    });
    // The client's retry is admitted at once, not refused for want of funds for half an hour.
    await expect(admit(id, `retry-${id}`, usdToNano(0.9))).resolves.toMatchObject({
      hold: { amount: usdToNano(0.9) },
    });
    const { balanceMatchesLedger, availableMatchesHolds } = await h.invariants(id);
    expect([balanceMatchesLedger, availableMatchesHolds]).toEqual([true, true]);
  });

  it('settles a possibly-held call whose admission never landed without touching the wallet', async () => {
    const id = await newAccount(1);
    const call = new CallRecorder('chat.completions', `never-${id}`, h.clock);
    call.principal = principal(id);
    call.possiblyHeld({ id: call.requestId, amount: usdToNano(0.9) });
    call.failed(new ServiceUnavailableError('down', undefined, 'accounting'));
    expect(await h.accounting.settle(planSettlement(call.settlement(), h.clock.now()))).toBe('settled');
    expect(await h.accounting.wallet(id)).toEqual({
      balance: usdToNano(1),
      available: usdToNano(1),
      owed: 0,
    });
  });

  it('holds the worst case, then releases it and debits the actual cost with a ledger entry', async () => {
    const id = await newAccount(1);
    await admit(id, 'r1', 300_000);
    expect(await h.accounting.wallet(id)).toMatchObject({
      balance: usdToNano(1),
      available: usdToNano(1) - 300_000,
    });
    expect(
      await h.accounting.settle(planSettlement(settled(id, 'r1', { cost: 120_000, hold: 300_000 }))),
    ).toBe('settled');
    const { report, balanceMatchesLedger, availableMatchesHolds } = await h.invariants(id);
    expect(report).toMatchObject({
      balance: usdToNano(1) - 120_000,
      available: usdToNano(1) - 120_000,
      holds: [],
    });
    expect(report.ledger.at(-1)).toMatchObject({ kind: 'debit', amount: 120_000, owed: 0, reference: 'r1' });
    expect(balanceMatchesLedger && availableMatchesHolds).toBe(true);
  });

  it('refuses a hold the wallet cannot cover, saying how much is available', async () => {
    const id = await newAccount(1);
    const error = await admit(id, 'big', usdToNano(1) + 1).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InsufficientBalanceError);
    expect((error as InsufficientBalanceError).balance).toMatchObject({
      available: 1,
      required: 1.000000001,
    });
    expect((await h.accounting.wallet(id)).available).toBe(usdToNano(1));
  });

  it('holds nothing for free models', async () => {
    const id = await newAccount();
    await expect(admit(id, 'free', 0)).resolves.toMatchObject({ hold: null });
  });

  it('debits a duplicated settlement once, however many deliveries race', async () => {
    const id = await newAccount(1);
    await admit(id, 'dup', 50_000);
    const plan = planSettlement(settled(id, 'dup', { cost: 40_000, hold: 50_000 }));
    const outcomes = await Promise.all(Array.from({ length: 6 }, () => h.accounting.settle(plan)));
    expect(outcomes.filter((o) => o === 'settled')).toHaveLength(1);
    expect(outcomes.filter((o) => o === 'duplicate')).toHaveLength(5);
    expect((await h.accounting.wallet(id)).balance).toBe(usdToNano(1) - 40_000);
  });

  it('debits a cost above its hold from the available amount', async () => {
    const id = await newAccount(1);
    await admit(id, 'over', 10_000);
    await h.accounting.settle(planSettlement(settled(id, 'over', { cost: 25_000, hold: 10_000 })));
    const { report, balanceMatchesLedger, availableMatchesHolds } = await h.invariants(id);
    expect(report).toMatchObject({
      balance: usdToNano(1) - 25_000,
      available: usdToNano(1) - 25_000,
      owed: 0,
    });
    expect(balanceMatchesLedger && availableMatchesHolds).toBe(true);
  });

  it('records as owed what the wallet cannot pay, never dropping it, and collects it from the next top-up', async () => {
    const id = await newAccount(1);
    await admit(id, 'hold-all', usdToNano(1));
    // The upstream ignored the cap: the call cost 1.5 USD against a 1 USD hold on a 1 USD wallet.
    await h.accounting.settle(
      planSettlement(settled(id, 'hold-all', { cost: usdToNano(1.5), hold: usdToNano(1) })),
    );
    let check = await h.invariants(id);
    expect(check.report).toMatchObject({ balance: 0, available: 0, owed: usdToNano(0.5) });
    expect(check.report.ledger.at(-1)).toMatchObject({
      kind: 'debit',
      amount: usdToNano(1),
      owed: usdToNano(0.5),
    });
    expect(check.balanceMatchesLedger && check.nonNegative).toBe(true);
    h.clock.advance(1);
    await h.accounting.topUp({
      accountId: id,
      amount: usdToNano(2),
      reference: `pay2-${id}`,
      at: h.clock.now(),
    });
    check = await h.invariants(id);
    expect(check.report).toMatchObject({ balance: usdToNano(1.5), available: usdToNano(1.5), owed: 0 });
    expect(check.report.ledger.map((e) => e.kind)).toEqual(['credit', 'debit', 'credit', 'arrears']);
    expect(check.balanceMatchesLedger).toBe(true);
  });

  /** An account owing 1.5 USD with nothing available, and another call's 1 USD hold still open. */
  const owingWithOpenHold = async () => {
    const id = await newAccount(2);
    await admit(id, `other-${id}`, usdToNano(1));
    await admit(id, 'big', usdToNano(1));
    await h.accounting.settle(
      planSettlement(settled(id, 'big', { cost: usdToNano(2.5), hold: usdToNano(1) })),
    );
    expect(await h.accounting.wallet(id)).toEqual({
      balance: usdToNano(1),
      available: 0,
      owed: usdToNano(1.5),
    });
    return id;
  };

  it("pays a debt with what another call's settlement frees, not with new calls", async () => {
    const id = await owingWithOpenHold();
    // The other call cost 0.2 USD of its 1 USD hold: the 0.8 freed pays the debt.
    const other = planSettlement(settled(id, `other-${id}`, { cost: usdToNano(0.2), hold: usdToNano(1) }));
    await h.accounting.settle(other);
    const check = await h.invariants(id);
    expect(check.report).toMatchObject({ balance: 0, available: 0, owed: usdToNano(0.7), holds: [] });
    expect(check.report.ledger.at(-1)).toMatchObject({
      kind: 'arrears',
      amount: usdToNano(0.8),
      reference: `other-${id}`,
    });
    expect(check.balanceMatchesLedger && check.availableMatchesHolds && check.nonNegative).toBe(true);
    // So the account cannot spend it on a new call.
    await expect(admit(id, 'next', 1_000)).rejects.toBeInstanceOf(InsufficientBalanceError);
    // A redelivery of that settlement moves nothing.
    expect(await h.accounting.settle(other)).toBe('duplicate');
    expect(await h.accounting.wallet(id)).toEqual({ balance: 0, available: 0, owed: usdToNano(0.7) });
  });

  it('pays the debt in the settlement’s own transaction: nothing is read or left for a new call after it', async () => {
    const id = await owingWithOpenHold();
    // A store that answers no read: paying after the commit needed one, and lost the race to the next admission.
    const failing = new DynamoDBClient(localClientConfig(inject('emulators').dynamodb));
    failing.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'GetItemCommand') throw new Error('store unreachable');
        return next(args);
      },
      { step: 'initialize', name: 'noReads' },
    );
    const warnings: string[] = [];
    try {
      const settling = new DynamoAccounting(
        failing,
        h.resources.tables,
        async () => {},
        (message) => warnings.push(message),
      );
      await expect(
        settling.settle(
          planSettlement(settled(id, `other-${id}`, { cost: usdToNano(0.2), hold: usdToNano(1) })),
        ),
      ).resolves.toBe('settled');
    } finally {
      failing.destroy();
    }
    expect(warnings).toEqual([]);
    const check = await h.invariants(id);
    expect(check.report).toMatchObject({ balance: 0, available: 0, owed: usdToNano(0.7), holds: [] });
    expect(check.balanceMatchesLedger && check.availableMatchesHolds && check.nonNegative).toBe(true);
  });

  it('pays the debt as it stands when a top-up paid part of it between the settlement’s attempts', async () => {
    const id = await owingWithOpenHold();
    // Between the attempt that found the debt (1.5 USD) and the one paying it, a top-up of 1 USD pays 1 of it.
    const racing = new DynamoDBClient(localClientConfig(inject('emulators').dynamodb));
    let raced = false;
    racing.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { TransactItems?: { Update?: { ConditionExpression?: string } }[] };
        const paying = input.TransactItems?.some((i) => i.Update?.ConditionExpression === 'owed >= :repaid');
        if (context.commandName === 'TransactWriteItemsCommand' && paying && !raced) {
          raced = true;
          await h.accounting.topUp({
            accountId: id,
            amount: usdToNano(1),
            reference: `race-${id}`,
            at: h.clock.now(),
          });
        }
        return next(args);
      },
      { step: 'initialize', name: 'topUpMeanwhile' },
    );
    try {
      const settling = new DynamoAccounting(racing, h.resources.tables, async () => {});
      await expect(
        settling.settle(
          planSettlement(settled(id, `other-${id}`, { cost: usdToNano(0.2), hold: usdToNano(1) })),
        ),
      ).resolves.toBe('settled');
    } finally {
      racing.destroy();
    }
    expect(raced).toBe(true);
    // The 0.8 freed paid the 0.5 still owed; the rest is the account's to spend.
    const check = await h.invariants(id);
    expect(check.report).toMatchObject({
      balance: usdToNano(0.3),
      available: usdToNano(0.3),
      owed: 0,
      holds: [],
    });
    expect(check.report.ledger.filter((e) => e.reference === `other-${id}`)).toMatchObject([
      { kind: 'debit', amount: usdToNano(0.2) },
      { kind: 'arrears', amount: usdToNano(0.5) },
    ]);
    expect(check.balanceMatchesLedger && check.availableMatchesHolds && check.nonNegative).toBe(true);
  });

  /** The usage counters of the days `plan` counts in, by day and subject: what the report reads. */
  const countersOf = async (plan: SettlementPlan) => {
    const days = [...new Set(plan.aggregates.map((a) => a.day))];
    const rows = await new DynamoUsage(h.client, h.resources.tables.usage).rows(days);
    return new Map(rows.map((r) => [`${r.day} ${r.subject}`, r.counters]));
  };
  /** What settling `plan` added to the counters: `before` subtracted from now. */
  const addedBy = async (plan: SettlementPlan, before: Map<string, Readonly<Record<string, number>>>) => {
    const after = await countersOf(plan);
    return plan.aggregates.map((a) => {
      const key = `${a.day} ${a.subject}`;
      const was = before.get(key) ?? {};
      const now = after.get(key) ?? {};
      return Object.fromEntries(Object.keys(a.counters).map((c) => [c, (now[c] ?? 0) - (was[c] ?? 0)]));
    });
  };

  it('settles the money when only its usage counters are contended, and counts them once, apart', async () => {
    const id = await newAccount(2);
    await admit(id, `hot-${id}`, usdToNano(1));
    const plan = planSettlement(settled(id, `hot-${id}`, { cost: usdToNano(0.2), hold: usdToNano(1) }));
    const before = await countersOf(plan);
    // The counters' shards are contended on every attempt that carries them, twice: then the money goes alone.
    let contended = 0;
    h.injectFaults(() => (contended++ < 2 ? 'counters-conflict' : null));
    try {
      expect(await h.accounting.settle(plan)).toBe('settled');
    } finally {
      h.injectFaults(() => null);
    }
    // Two contended attempts, the money alone, the counters alone.
    expect(contended).toBe(4);
    const check = await h.invariants(id);
    expect(check.report).toMatchObject({ balance: usdToNano(1.8), available: usdToNano(1.8), holds: [] });
    expect(check.balanceMatchesLedger && check.availableMatchesHolds).toBe(true);
    expect(await addedBy(plan, before)).toEqual(plan.aggregates.map((a) => a.counters));
    // A redelivery moves no money and counts nothing again.
    expect(await h.accounting.settle(plan)).toBe('duplicate');
    expect(await addedBy(plan, before)).toEqual(plan.aggregates.map((a) => a.counters));
  });

  it('settles the money and tells when its usage counters cannot be written at all', async () => {
    const id = await newAccount(2);
    await admit(id, `hotter-${id}`, usdToNano(1));
    const plan = planSettlement(settled(id, `hotter-${id}`, { cost: usdToNano(0.2), hold: usdToNano(1) }));
    const warnings: string[] = [];
    const settling = new DynamoAccounting(
      h.client,
      h.resources.tables,
      async () => {},
      (message) => warnings.push(message),
    );
    h.injectFaults(() => 'counters-conflict');
    try {
      expect(await settling.settle(plan)).toBe('settled');
    } finally {
      h.injectFaults(() => null);
    }
    expect(warnings).toEqual(['usage not counted; the settlement stands']);
    expect(await h.accounting.wallet(id)).toEqual({
      balance: usdToNano(1.8),
      available: usdToNano(1.8),
      owed: 0,
    });
  });

  it('frees no more than admission held, whatever hold a settlement record names', async () => {
    const id = await newAccount(2);
    await admit(id, `forged-${id}`, usdToNano(1));
    // A record naming a 1.5 USD hold for the call admission held 1 USD for (forged, or a replay file edited).
    await h.accounting.settle(
      planSettlement(settled(id, `forged-${id}`, { cost: usdToNano(0.2), hold: usdToNano(1.5) })),
    );
    // Charged from what was available; the real hold stays for the sweeper, which frees exactly it.
    expect(await h.accounting.wallet(id)).toEqual({
      balance: usdToNano(1.8),
      available: usdToNano(0.8),
      owed: 0,
    });
    h.clock.advance(30 * 60_000 + 1);
    await h.accounting.releaseExpiredHolds(h.clock.now());
    const check = await h.invariants(id);
    expect(check.report).toMatchObject({ balance: usdToNano(1.8), available: usdToNano(1.8), holds: [] });
    expect(check.balanceMatchesLedger && check.availableMatchesHolds && check.nonNegative).toBe(true);
  });

  it('pays a debt with what the sweeper frees', async () => {
    const id = await owingWithOpenHold();
    h.clock.advance(30 * 60_000 + 1);
    expect(await h.accounting.releaseExpiredHolds(h.clock.now())).toBeGreaterThanOrEqual(1);
    const check = await h.invariants(id);
    expect(check.report).toMatchObject({ balance: 0, available: 0, owed: usdToNano(0.5), holds: [] });
    expect(check.report.ledger.at(-1)).toMatchObject({ kind: 'arrears', amount: usdToNano(1) });
    expect(check.balanceMatchesLedger && check.availableMatchesHolds && check.nonNegative).toBe(true);
  });

  it('settles a shortfall on a busy account, whose available amount drops before every attempt', async () => {
    const id = await newAccount(2);
    await admit(id, 'big', usdToNano(1));
    // Another call of the account takes a hold just before each of the settlement's transactions is sent.
    const busy = new DynamoDBClient(localClientConfig(inject('emulators').dynamodb));
    let others = 0;
    busy.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'TransactWriteItemsCommand')
          await admit(id, `busy-${id}-${others++}`, usdToNano(0.01));
        return next(args);
      },
      { step: 'initialize', name: 'busyAccount' },
    );
    const settling = new DynamoAccounting(busy, h.resources.tables, async () => {});
    try {
      // 2.5 USD against a 1 USD hold: 1.5 more than the hold, and never that much available.
      await expect(
        settling.settle(planSettlement(settled(id, 'big', { cost: usdToNano(2.5), hold: usdToNano(1) }))),
      ).resolves.toBe('settled');
    } finally {
      busy.destroy();
    }
    const check = await h.invariants(id);
    expect(check.balanceMatchesLedger && check.availableMatchesHolds && check.nonNegative).toBe(true);
    const debit = check.report.ledger.find((e) => e.kind === 'debit' && e.reference === 'big');
    // Nothing lost: what was not paid is owed (less what was collected from the wallet since).
    expect((debit?.amount ?? 0) + (debit?.owed ?? 0)).toBe(usdToNano(2.5));
    const collected = check.report.ledger
      .filter((e) => e.kind === 'arrears' && e.reference === 'big')
      .reduce((sum, e) => sum + e.amount, 0);
    expect(check.report.owed).toBe((debit?.owed ?? 0) - collected);
    expect(check.report.holds.some((hold) => hold.requestId === 'big')).toBe(false);
  });

  it.each([
    [
      'a top-up',
      (id: string) =>
        h.accounting.topUp({
          accountId: id,
          amount: usdToNano(5),
          reference: `mid-${id}`,
          at: h.clock.now(),
        }),
    ],
    [
      "another call's settlement releasing its hold",
      (id: string) =>
        h.accounting.settle(planSettlement(settled(id, `other-${id}`, { cost: 0, hold: usdToNano(0.8) }))),
    ],
  ])(
    'pays a shortfall in full when %s refills the wallet between its attempts: nothing owed',
    async (_, refill) => {
      const id = await newAccount(2);
      await admit(id, `other-${id}`, usdToNano(0.8));
      await admit(id, 'short', usdToNano(1));
      // 1.5 USD against a 1 USD hold and 0.2 available: short when first tried; refilled before the second try.
      let transactions = 0;
      const refilling = new DynamoDBClient(localClientConfig(inject('emulators').dynamodb));
      refilling.middlewareStack.add(
        (next, context) => async (args) => {
          if (context.commandName === 'TransactWriteItemsCommand' && transactions++ === 1) await refill(id);
          return next(args);
        },
        { step: 'initialize', name: 'refill' },
      );
      try {
        await new DynamoAccounting(refilling, h.resources.tables, async () => {}).settle(
          planSettlement(settled(id, 'short', { cost: usdToNano(1.5), hold: usdToNano(1) })),
        );
      } finally {
        refilling.destroy();
      }
      const check = await h.invariants(id);
      expect(check.balanceMatchesLedger && check.availableMatchesHolds && check.nonNegative).toBe(true);
      expect(check.report.owed).toBe(0);
      const debit = check.report.ledger.find((e) => e.kind === 'debit' && e.reference === 'short');
      expect(debit).toMatchObject({ amount: usdToNano(1.5), owed: 0 });
    },
  );

  it('corrects the token buckets by what the estimate got wrong', async () => {
    const id = await newAccount(1);
    const admitted = await admit(id, 'tokens', 1_000, 5_000);
    const before = await h.client.send(
      new (await import('@aws-sdk/client-dynamodb')).GetItemCommand({
        TableName: h.resources.tables.buckets,
        Key: { pk: { S: `acct#${id}` }, sk: { S: 'limits' } },
        ConsistentRead: true,
      }),
    );
    await h.accounting.settle(
      planSettlement({
        ...settled(id, 'tokens', { cost: 500, hold: 1_000, tokens: 1_000, estimatedTokens: 5_000 }),
        admission: admissionOf(admitted),
      }),
    );
    const after = await h.client.send(
      new (await import('@aws-sdk/client-dynamodb')).GetItemCommand({
        TableName: h.resources.tables.buckets,
        Key: { pk: { S: `acct#${id}` }, sk: { S: 'limits' } },
        ConsistentRead: true,
      }),
    );
    const refundedTokens = 4_000;
    expect(Number(after.Item?.tpm?.N) - Number(before.Item?.tpm?.N)).toBe(
      -refundedTokens * admitted.tokenEmissionUs.tpm,
    );
    expect(Number(after.Item?.rpm?.N)).toBe(Number(before.Item?.rpm?.N));
  });
});

describe('limits around a settlement that refunds its estimate', () => {
  /** An admission on its own memory, counting its store calls. */
  const countingInstance = () => {
    const calls = { admit: 0 };
    const admission = instanceOn({
      ...h.accounting,
      admit: (plan: Parameters<typeof h.accounting.admit>[0]) => {
        calls.admit++;
        return h.accounting.admit(plan);
      },
    } as typeof h.accounting);
    return { admission, calls };
  };
  /** Admits a 5,000-token estimate, then settles it as 1,000 tokens: TPD moves back by 4,000 tokens' worth. */
  const refunded = async (admission: Admission, id: string) => {
    const admitted = await admission.admit(principal(id), {
      requestId: `big-${id}`,
      estimatedTokens: 5_000,
      holdAmount: 1_000,
    });
    const record = {
      ...settled(id, `big-${id}`, { cost: 500, hold: 1_000, tokens: 1_000, estimatedTokens: 5_000 }),
      admission: admissionOf(admitted),
    };
    await h.accounting.settle(planSettlement(record));
    return record;
  };

  it('charges the next call exactly, though its instance did not see the refund', async () => {
    const id = await newAccount(1); // trusted: 1000 RPM, 2M TPM, 50M TPD
    const { admission, calls } = countingInstance();
    await refunded(admission, id);
    // The minute buckets have drained; the day's (1.728 ms a token) has not, in this instance's memory only.
    h.clock.advance(3_000);
    const next = await admission.admit(principal(id), {
      requestId: `next-${id}`,
      estimatedTokens: 10,
      holdAmount: 0,
    });
    // The refunded call, then the next: its stale guess missed once, and the store's state made the retry exact.
    expect(calls.admit).toBe(3);
    expect(next.headers['x-ratelimit-remaining-requests']).toBe('999');
    expect(next.headers['x-ratelimit-remaining-tokens']).toBe(String(2_000_000 - 10));
  });

  it('needs one round trip when the instance was told of the refund its call’s settlement makes', async () => {
    const id = await newAccount(1);
    const { admission, calls } = countingInstance();
    const record = await refunded(admission, id);
    const correction = tokenCorrectionOf(record, h.clock.now());
    if (!correction) throw new Error('expected a correction');
    admission.expectCorrection(id, correction);
    h.clock.advance(3_000);
    const next = await admission.admit(principal(id), {
      requestId: `next-${id}`,
      estimatedTokens: 10,
      holdAmount: 0,
    });
    expect(calls.admit).toBe(2); // the refunded call, then the next at its first attempt
    expect(next.headers['x-ratelimit-remaining-requests']).toBe('999');
  });

  /**
   * The limit headers of a trusted account's second call (10 tokens), on an instance told to expect a correction of
   * two minutes of tokens the store never charges, after a first call of 5,000.
   */
  const headersAfterExpecting = async (limitsGen: number | null) => {
    const id = await newAccount(1); // trusted: its limits' first generation
    const { admission } = countingInstance();
    await admission.admit(principal(id), { requestId: `a-${id}`, estimatedTokens: 5_000, holdAmount: 0 });
    admission.expectCorrection(id, { tpmUs: 120_000_000, tpdUs: 0, limitsGen });
    h.clock.advance(1);
    const next = await admission.admit(principal(id), {
      requestId: `b-${id}`,
      estimatedTokens: 10,
      holdAmount: 0,
    });
    return next.headers;
  };

  it('takes no correction for limits other than those its memory keeps (the store applies none)', async () => {
    const headers = await headersAfterExpecting(7);
    // What the two calls spent (less what drained since): not the minute the correction would have taken.
    expect(Number(headers['x-ratelimit-remaining-tokens'])).toBeGreaterThanOrEqual(2_000_000 - 5_000 - 10);
  });

  it('never reports a bucket past its limit when its memory ran ahead of the store', async () => {
    // A wrong expectation (under no generation, so taken): the store still admits.
    const headers = await headersAfterExpecting(null);
    expect(headers['x-ratelimit-remaining-tokens']).toBe('0');
    expect(headers['x-ratelimit-reset-tokens']).toBe('1m0s');
  });
});

describe('token refunds and changes of limits', () => {
  /** The account's first top-up, 1 USD: it becomes trusted, its limits' next generation. */
  const firstTopUp = (id: string) =>
    h.accounting.topUp({ accountId: id, amount: usdToNano(1), reference: `up-${id}`, at: h.clock.now() });
  /** Settles `admitted` as having used `used` tokens, now. */
  const settleUsed = (id: string, requestId: string, admitted: Admitted, used: number) =>
    h.accounting.settle(
      planSettlement(
        {
          ...settled(id, requestId, { cost: 0, hold: null, tokens: used }),
          admission: admissionOf(admitted),
        },
        h.clock.now(),
      ),
    );
  const outcomeOf = (admitting: Promise<Admitted>) =>
    admitting.then(
      (a) => `admitted, ${a.headers['x-ratelimit-remaining-tokens']} tokens left`,
      (e: unknown) => (e instanceof RateLimitError ? 'refused' : `failed: ${String(e)}`),
    );

  it('refunds no more of an estimate than is still ahead in the bucket: never the later calls’ charges', async () => {
    const id = await newAccount(); // unverified: 100,000 tokens a minute
    const long = await admit(id, `long-${id}`, 0, 60_000); // 36 s of the minute's bucket
    // A long call: its charge drains while it runs, and the minute's budget is spent afresh.
    h.clock.advance(40_000);
    await admit(id, `spent-${id}`, 0, 60_000);
    // The long call ends having used 1,000 tokens: its 59,000 over-estimate had drained with it.
    await settleUsed(id, `long-${id}`, long, 1_000);
    h.clock.advance(1);
    // 60,000 of the minute are still spent: 40,000 left, not room for another 60,000.
    expect(await outcomeOf(admit(id, `more-${id}`, 0, 60_000))).toBe('refused');
  });

  it('admits a call that takes no tokens (audio) while the token buckets run past their limits', async () => {
    const id = await newAccount(); // unverified: 100,000 tokens a minute, 1,000,000 a day
    const big = await admit(id, `big-${id}`, 0, 100_000);
    // It used far more than its estimate: the settlement charges the excess to the buckets, past their limits.
    await settleUsed(id, `big-${id}`, big, 3_000_000);
    h.clock.advance(1);
    expect(await outcomeOf(admit(id, `tokens-${id}`, 0, 10))).toBe('refused');
    // Nothing of the token buckets to wait for: only its requests are counted.
    expect(await outcomeOf(admit(id, `audio-${id}`, 0, 0))).toBe('admitted, 0 tokens left');
  });

  it('still refunds what is ahead: a call settled before its charge drained gives back its unused tokens', async () => {
    const id = await newAccount();
    const call = await admit(id, `call-${id}`, 0, 60_000);
    h.clock.advance(10_000); // 26 s of its 36 s still ahead
    await settleUsed(id, `call-${id}`, call, 10_000);
    h.clock.advance(1);
    // It used 10,000 of the 100,000 minute, which has drained 10 s' worth (about 16,667 tokens): all 90,000 fit.
    expect(await outcomeOf(admit(id, `next-${id}`, 0, 90_000))).toMatch(/^admitted/);
  });

  it('applies no correction computed under limits the account has since left (a first top-up)', async () => {
    const id = await newAccount();
    const unverified = await admit(id, `old-${id}`, 0, 100_000); // a whole unverified minute
    await firstTopUp(id);
    h.clock.advance(1);
    // Trusted: 2,000,000 a minute; the unverified call's 100,000 were carried over as 100,000.
    await admit(id, `big-${id}`, 0, 1_900_000);
    // The unverified call used nothing; a refund at its 600 µs a token would free 20 times that of a trusted minute.
    await settleUsed(id, `old-${id}`, unverified, 0);
    h.clock.advance(1);
    expect(await outcomeOf(admit(id, `again-${id}`, 0, 1_900_000))).toBe('refused');
  });

  it('carries into the new limits a call admitted between a first top-up’s read and its write', async () => {
    const id = await newAccount(); // never used: no bucket ahead of now, nothing the top-up would rescale
    let raced = false;
    h.client.middlewareStack.add(
      (next, context) => async (args) => {
        const result = await next(args);
        const input = args.input as { TableName?: string; Key?: { pk?: { S?: string } } };
        if (
          !raced &&
          context.commandName === 'GetItemCommand' &&
          input.TableName === h.resources.tables.buckets &&
          input.Key?.pk?.S === `acct#${id}`
        ) {
          raced = true;
          await admit(id, `race-${id}`, 0, 50_000);
        }
        return result;
      },
      { step: 'initialize', name: 'raceTopUp' },
    );
    try {
      await firstTopUp(id);
    } finally {
      h.client.middlewareStack.remove('raceTopUp');
    }
    expect(raced).toBe(true);
    h.clock.advance(1);
    // Another instance reads the store's buckets: two calls and 50,010 tokens of a trusted minute spent.
    const next = await instanceOn(h.accounting).admit(principal(id), {
      requestId: `next-${id}`,
      estimatedTokens: 10,
      holdAmount: 0,
    });
    // Both calls in the trusted minute, the raced one not lost to the top-up's write (which would leave 999 requests and
    // 1,999,990 tokens): what 1 ms refills is less than one request and about 33 tokens.
    const requests = Number(next.headers['x-ratelimit-remaining-requests']);
    const tokens = Number(next.headers['x-ratelimit-remaining-tokens']);
    expect(requests).toBeGreaterThanOrEqual(997);
    expect(requests).toBeLessThanOrEqual(998);
    expect(tokens).toBeGreaterThanOrEqual(2_000_000 - 50_010);
    expect(tokens).toBeLessThanOrEqual(2_000_000 - 50_010 + 100);
  });

  it('checks a call too large for a cached profile against the stored limits before refusing it', async () => {
    const id = await newAccount();
    const cached = instanceOn(h.accounting, 5_000);
    await cached.admit(principal(id), { requestId: `first-${id}`, estimatedTokens: 10, holdAmount: 0 });
    await firstTopUp(id);
    h.clock.advance(1_000);
    // 150,000 tokens: too large for the unverified minute it cached, within the trusted one it now has.
    await expect(
      cached.admit(principal(id), { requestId: `large-${id}`, estimatedTokens: 150_000, holdAmount: 1 }),
    ).resolves.toMatchObject({ estimatedTokens: 150_000 });
  });
});

describe('the hold sweeper', () => {
  it('releases a hold whose settlement never came, only once it has expired', async () => {
    const id = await newAccount(1);
    await admit(id, 'crashed', 70_000);
    const config = loadConfig({
      ...Object.fromEntries(
        Object.entries(tableDefinitions).map(([key, t]) => [
          t.envVar,
          h.resources.tables[key as keyof typeof tableDefinitions],
        ]),
      ),
      SETTLEMENT_QUEUE_URL: h.resources.settlementQueueUrl,
      LOG_LEVEL: 'silent',
    });
    const container = createContainer(config, {
      aws: { dynamodb: localClientConfig(inject('emulators').dynamodb) },
      clock: h.clock,
    });
    const sweep = () =>
      createSweeper(() => container)({} as never, invocationContext('hold-sweeper', 60_000));
    try {
      expect(await sweep()).toEqual({ released: 0 });
      expect((await h.accounting.wallet(id)).available).toBe(usdToNano(1) - 70_000);
      h.clock.advance(30 * 60_000 + 1);
      expect((await sweep())?.released).toBeGreaterThanOrEqual(1);
      const { report } = await h.invariants(id);
      expect(report).toMatchObject({ balance: usdToNano(1), available: usdToNano(1), holds: [] });
      expect(report.ledger.filter((e) => e.kind === 'debit')).toHaveLength(0);
    } finally {
      await container.close();
    }
  });

  it('tells of a hold it cannot release and goes on with the others, leaving it for the next sweep', async () => {
    const stuck = await newAccount(1);
    const other = await newAccount(1);
    await admit(stuck, `stuck-${stuck}`, 50_000);
    await admit(other, `other-${other}`, 60_000);
    h.clock.advance(30 * 60_000 + 1);
    // The store refuses every write touching the stuck account (its item broken, say), whatever order the sweep
    // meets the holds in.
    const refusing = new DynamoDBClient(localClientConfig(inject('emulators').dynamodb));
    refusing.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'TransactWriteItemsCommand' && JSON.stringify(args.input).includes(stuck))
          throw new Error('ValidationException: item broken');
        return next(args);
      },
      { step: 'initialize', name: 'refuseOne' },
    );
    const warnings: string[] = [];
    try {
      const sweeping = new DynamoAccounting(
        refusing,
        h.resources.tables,
        async () => {},
        (message) => warnings.push(message),
      );
      await sweeping.releaseExpiredHolds(h.clock.now());
    } finally {
      refusing.destroy();
    }
    expect(warnings).toEqual(['hold not released; the next sweep retries it']);
    expect((await h.invariants(other)).report).toMatchObject({ available: usdToNano(1), holds: [] });
    expect((await h.accounting.wallet(stuck)).available).toBe(usdToNano(1) - 50_000);
    await h.accounting.releaseExpiredHolds(h.clock.now());
    expect((await h.invariants(stuck)).report).toMatchObject({ available: usdToNano(1), holds: [] });
  });

  it('releases a hold once and debits once when the sweeper, its settlement and a redelivery race', async () => {
    const id = await newAccount(1);
    await admit(id, 'raced', 80_000);
    h.clock.advance(30 * 60_000 + 1);
    const plan = planSettlement(settled(id, 'raced', { cost: 30_000, hold: 80_000 }));
    const first = await Promise.allSettled([
      h.accounting.releaseExpiredHolds(h.clock.now()),
      h.accounting.settle(plan),
      h.accounting.settle(plan),
    ]);
    // A delivery that lost a conflict is redelivered by SQS; the sweeper runs again on its schedule.
    if (first[1]?.status === 'rejected' || first[2]?.status === 'rejected') await h.accounting.settle(plan);
    await h.accounting.releaseExpiredHolds(h.clock.now());
    const { report, balanceMatchesLedger, availableMatchesHolds } = await h.invariants(id);
    expect(report).toMatchObject({
      balance: usdToNano(1) - 30_000,
      available: usdToNano(1) - 30_000,
      holds: [],
    });
    expect(report.ledger.filter((e) => e.kind === 'debit')).toHaveLength(1);
    expect(balanceMatchesLedger && availableMatchesHolds).toBe(true);
  });

  it('never lets a late settlement release an already released hold twice', async () => {
    const id = await newAccount(1);
    await admit(id, 'late', 80_000);
    h.clock.advance(30 * 60_000 + 1);
    await h.accounting.releaseExpiredHolds(h.clock.now());
    // The sweep released it: the settlement that comes later finds no hold to release.
    expect((await h.invariants(id)).report).toMatchObject({ available: usdToNano(1), holds: [] });
    await h.accounting.settle(planSettlement(settled(id, 'late', { cost: 30_000, hold: 80_000 })));
    const { report, balanceMatchesLedger, availableMatchesHolds } = await h.invariants(id);
    expect(report).toMatchObject({ balance: usdToNano(1) - 30_000, available: usdToNano(1) - 30_000 });
    expect(balanceMatchesLedger && availableMatchesHolds).toBe(true);
  });
});

describe('no overdraft', () => {
  it('admits at most N of many concurrent calls on a wallet covering exactly N, and available stays ≥ 0', async () => {
    const hold = 125_000_000; // 0.125 USD: 8 of them are exactly 1 USD
    const id = await newAccount(1);
    const results = await Promise.allSettled(
      Array.from({ length: 40 }, (_, i) => admit(id, `race-${i}`, hold)),
    );
    const admitted = results.filter((r) => r.status === 'fulfilled').length;
    expect(admitted).toBe(8);
    expect(
      results.filter((r) => r.status === 'rejected' && r.reason instanceof InsufficientBalanceError),
    ).toHaveLength(32);
    const { report, availableMatchesHolds, nonNegative } = await h.invariants(id);
    expect(report.available).toBe(0);
    expect(report.holds).toHaveLength(8);
    expect(availableMatchesHolds && nonNegative).toBe(true);
  });
});

describe('admission from several instances', () => {
  it('admits no more than a minute’s requests of many concurrent calls from three instances', async () => {
    const id = await newAccount(1);
    await h.accounting.setQuota(id, { rpm: 30 }, h.clock.now());
    const instances = [instanceOn(h.accounting), instanceOn(h.accounting), instanceOn(h.accounting)];
    const results = await Promise.allSettled(
      Array.from({ length: 50 }, (_, i) =>
        instances[i % 3]?.admit(principal(id), { requestId: `rpm-${i}`, estimatedTokens: 10, holdAmount: 0 }),
      ),
    );
    const statuses = results.map((r) =>
      r.status === 'fulfilled' ? 200 : (r.reason as { status?: number }).status,
    );
    // The clock stands still: exactly the minute's 30, the rest refused as over the limit.
    expect(statuses.filter((s) => s === 200)).toHaveLength(30);
    expect(statuses.filter((s) => s === 429)).toHaveLength(20);
    await expect(
      instanceOn(h.accounting).admit(principal(id), {
        requestId: 'rpm-next',
        estimatedTokens: 10,
        holdAmount: 0,
      }),
    ).rejects.toMatchObject({ status: 429 });
  });

  it('admits an account other instances keep admitting near its drained boundary, instead of giving up (503)', async () => {
    const id = await newAccount(5);
    const other = instanceOn(h.accounting);
    let otherCalls = 0;
    const otherAdmits = () =>
      other.admit(principal(id), { requestId: `other-${otherCalls++}`, estimatedTokens: 10, holdAmount: 0 });
    // Between this instance's attempts, time passes beyond what it last saw and another instance admits:
    // each retry would find the buckets just past its guess again, however exactly it read them.
    const racing = instanceOn({
      ...h.accounting,
      admit: async (plan: Parameters<typeof h.accounting.admit>[0]) => {
        const result = await h.accounting.admit(plan);
        if (!result.ok) {
          h.clock.advance(100);
          await otherAdmits();
        }
        return result;
      },
    } as typeof h.accounting);
    await otherAdmits();
    const admitted = await racing.admit(principal(id), {
      requestId: 'racing',
      estimatedTokens: 10,
      holdAmount: 1000,
    });
    expect(admitted.hold).toEqual({ id: 'racing', amount: 1000 });
    expect(otherCalls).toBeGreaterThan(1); // it did have to retry against the other instance
    // Charged, not skipped: the requests bucket counts every admission of both instances.
    const remaining = Number(admitted.headers['x-ratelimit-remaining-requests']);
    const limit = Number(admitted.headers['x-ratelimit-limit-requests']);
    expect(remaining).toBeLessThanOrEqual(limit - 1 - otherCalls);
  });
});
