import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SettlementPlan } from '#core/accounting.ts';
import { AdmissionUnknownError } from '#core/admission.ts';
import { usdToNano } from '#core/pricing.ts';
import { planSettlement } from '#core/settlement.ts';
import {
  type AccountingHarness,
  accountingHarness,
  chatSettlement,
  type InjectedFault,
} from '#test/accounting.ts';

/** mulberry32: a small seeded PRNG, so a failing workload can be replayed from its seed. */
const prng = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
};

const SEED = Number(process.env.CONSERVATION_SEED ?? Math.floor(Math.random() * 2 ** 31));
const STEPS = 300;
const ACCOUNTS = 4;
const HOLD_TTL_MS = 30 * 60_000;

let h: AccountingHarness;
beforeAll(async () => {
  h = await accountingHarness({ holdTtlMs: HOLD_TTL_MS });
});
afterAll(() => h?.close());

describe(`money is conserved under a random workload (seed ${SEED}; replay with CONSERVATION_SEED=${SEED})`, () => {
  it('keeps balance = Σ ledger, available ≥ 0, debits each call exactly once, and leaves no hold after the sweep', async () => {
    const random = prng(SEED);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
    const context = `seed ${SEED}`;

    const accounts: string[] = [];
    for (let i = 0; i < ACCOUNTS; i++) {
      accounts.push((await h.accounts.createAccount({ id: `acct_cons_${SEED}_${i}` })).id);
    }
    /** What each account should have been debited in total (charged + owed), counting every call once. */
    const expectedCost = new Map<string, number>(accounts.map((a) => [a, 0]));
    /** Top-ups by reference: each must be credited exactly once. */
    const topUps = new Map<string, { accountId: string; amount: number }>();
    const settledPlans: SettlementPlan[] = [];
    /** Deliveries that failed and must be retried, as SQS (or a payment webhook) would. */
    let pendingSettlements: SettlementPlan[] = [];
    let pendingTopUps: string[] = [];
    let calls = 0;

    h.injectFaults((): InjectedFault => {
      const roll = random();
      if (roll < 0.1) return 'conflict';
      if (roll < 0.15) return 'throttle';
      if (roll < 0.2) return 'ambiguous';
      return null;
    });

    const trySettle = async (plan: SettlementPlan) => {
      try {
        await h.accounting.settle(plan);
      } catch {
        pendingSettlements.push(plan);
      }
    };
    const tryTopUp = async (reference: string) => {
      const topUp = topUps.get(reference);
      if (!topUp) return;
      try {
        await h.accounting.topUp({ ...topUp, reference, at: h.clock.now() });
      } catch {
        pendingTopUps.push(reference);
      }
    };

    for (let step = 0; step < STEPS; step++) {
      h.clock.advance(1 + Math.floor(random() * 1_000));
      const roll = random();
      const accountId = pick(accounts);
      if (roll < 0.12) {
        // A top-up; a third of the time a payment provider repeats an earlier reference.
        const repeat = topUps.size > 0 && random() < 0.33;
        const reference = repeat ? pick([...topUps.keys()]) : `pay_${SEED}_${step}`;
        if (!repeat) topUps.set(reference, { accountId, amount: usdToNano(1 + Math.floor(random() * 3)) });
        await tryTopUp(reference);
      } else if (roll < 0.72) {
        // A call: admission, then (unless the gateway "crashes") settlement of a cost up to 130 % of the hold.
        const requestId = `req_${SEED}_${step}`;
        const hold = random() < 0.1 ? 0 : Math.floor(random() * usdToNano(0.2));
        try {
          await h.admission.admit(
            { accountId, keyPrefix: 'k' },
            { requestId, estimatedTokens: 200, holdAmount: hold },
          );
        } catch (error) {
          // Refused (402, or 503 from an injected fault). A 503 whose admission may have been written (its reply
          // lost) settles its possible hold, charging nothing, as the gateway's record of it does.
          if (error instanceof AdmissionUnknownError && error.possibleHold) {
            const plan = planSettlement({
              ...chatSettlement(accountId, requestId, {
                cost: 0,
                hold: error.possibleHold.amount,
                estimatedTokens: 0,
                outcome: 'unavailable',
                at: h.clock.now(),
              }),
              usage: null,
            });
            settledPlans.push(plan);
            await trySettle(plan);
          }
          continue;
        }
        calls++;
        if (random() < 0.1) continue; // crashed between admission and settlement: the sweeper's job
        const cost = Math.floor(random() * hold * 1.3);
        const plan = planSettlement(
          chatSettlement(accountId, requestId, {
            cost,
            hold: hold > 0 ? hold : null,
            tokens: 150,
            estimatedTokens: 200,
            at: h.clock.now(),
          }),
        );
        expectedCost.set(accountId, (expectedCost.get(accountId) ?? 0) + cost);
        settledPlans.push(plan);
        await trySettle(plan);
      } else if (roll < 0.87 && settledPlans.length > 0) {
        // SQS delivers a settlement again.
        await trySettle(pick(settledPlans));
      } else if (roll < 0.92) {
        await h.accounting.releaseExpiredHolds(h.clock.now()).catch(() => {});
      } else {
        // Retry what failed, as SQS redelivery and webhook retries would.
        const settlements = pendingSettlements;
        const references = pendingTopUps;
        pendingSettlements = [];
        pendingTopUps = [];
        for (const plan of settlements) await trySettle(plan);
        for (const reference of references) await tryTopUp(reference);
      }
      if (step % 25 === 0) {
        for (const id of accounts)
          expect((await h.invariants(id)).nonNegative, `${context}, step ${step}`).toBe(true);
      }
    }

    // Drain: faults stop, every pending delivery succeeds, the holds of crashed calls expire and are swept.
    h.injectFaults(() => null);
    for (const plan of pendingSettlements) await h.accounting.settle(plan);
    for (const reference of pendingTopUps) await tryTopUp(reference);
    h.clock.advance(HOLD_TTL_MS + 1);
    await h.accounting.releaseExpiredHolds(h.clock.now());

    expect(calls, context).toBeGreaterThan(20);
    for (const id of accounts) {
      const { report, balanceMatchesLedger, availableMatchesHolds, nonNegative } = await h.invariants(id);
      expect(balanceMatchesLedger, `${context}: balance = Σ ledger for ${id}`).toBe(true);
      expect(report.holds, `${context}: no hold left open for ${id}`).toEqual([]);
      expect(availableMatchesHolds && nonNegative, `${context}: available = balance ≥ 0 for ${id}`).toBe(
        true,
      );
      const credited = report.ledger.filter((e) => e.kind === 'credit').reduce((sum, e) => sum + e.amount, 0);
      const intended = [...topUps.values()]
        .filter((t) => t.accountId === id)
        .reduce((sum, t) => sum + t.amount, 0);
      expect(credited, `${context}: every top-up credited exactly once for ${id}`).toBe(intended);
      const debited = report.ledger
        .filter((e) => e.kind === 'debit')
        .reduce((sum, e) => sum + e.amount + e.owed, 0);
      expect(debited, `${context}: every settled call debited exactly once for ${id}`).toBe(
        expectedCost.get(id),
      );
      // What could not be paid is still owed, less what later top-ups and released holds paid of it: none lost.
      const owedAtSettlement = report.ledger
        .filter((e) => e.kind === 'debit')
        .reduce((sum, e) => sum + e.owed, 0);
      const repaid = report.ledger.filter((e) => e.kind === 'arrears').reduce((sum, e) => sum + e.amount, 0);
      expect(report.owed, `${context}: owed = Σ owed at settlement − Σ arrears paid for ${id}`).toBe(
        owedAtSettlement - repaid,
      );
    }
  });
});
