import { describe, expect, it } from 'vitest';
import type { AccountingStore, AdmitPlan } from '#core/accounting.ts';
import { Admission } from '#core/admission.ts';
import { trustedAccounts } from '#test/fixtures.ts';

/**
 * What admission remembers of each account's buckets is a guess that saves a round trip: a long-lived instance
 * must not keep one for every account it ever served. A store that admits everything shows which admissions
 * started from a remembered state (an `increment` form) and which from none (`fresh`).
 */
const setup = (maxAccounts: number) => {
  const plans: AdmitPlan[] = [];
  const store: AccountingStore = {
    admit: async (plan) => {
      plans.push(plan);
      return { ok: true };
    },
    settle: async () => 'settled',
    releaseExpiredHolds: async () => 0,
  };
  let now = 1_000_000;
  const clock = { now: () => now };
  const admission = new Admission({
    store,
    accounts: trustedAccounts(clock),
    clock,
    random: () => 0.5,
    sleep: async () => {},
    holdTtlMs: 60_000,
    maxAccounts,
  });
  const admit = async (accountId: string) => {
    now += 1; // 1 ms later: the buckets charged a moment ago are still ahead of now
    await admission.admit(
      { accountId, keyPrefix: 'svc_live_x' },
      { requestId: `req_${plans.length}`, estimatedTokens: 100, holdAmount: 0 },
    );
    return (plans.at(-1) as AdmitPlan).dimensions.map((d) => d.form);
  };
  return { admit };
};

describe('what admission remembers of accounts', () => {
  it('starts from what it remembers of an account it admitted a moment ago', async () => {
    const { admit } = setup(2);
    expect(await admit('a')).toEqual(['fresh', 'fresh', 'fresh', 'fresh']);
    expect(await admit('a')).toEqual(['increment', 'increment', 'increment', 'increment']);
  });

  it('forgets the least recently admitted account past maxAccounts, and keeps the recently used', async () => {
    const { admit } = setup(2);
    await admit('a');
    await admit('b');
    await admit('a'); // a is now the more recently used of the two
    await admit('c'); // one too many: b goes, not a
    expect(await admit('a')).toEqual(['increment', 'increment', 'increment', 'increment']);
    expect(await admit('b')).toEqual(['fresh', 'fresh', 'fresh', 'fresh']);
  });
});
