import type { BucketState, Dimension, Limits, Tier } from './limits.ts';
import { NANO_PER_USD, nanoToUsd } from './pricing.ts';
import type { AggregateIncrement, FaultEntry } from './usage-aggregates.ts';

/** What admission needs to know about an account (cached per instance). */
export interface AccountProfile {
  readonly id: string;
  readonly tier: Tier;
  /** A volume account's custom quota, dimension by dimension. */
  readonly quota: Partial<Limits> | null;
  /**
   * How many times the account's limits have changed (a tier upgrade, a new quota); 0: never. Admission names the
   * generation whose limits it charges by, and the buckets refuse any other: an instance still holding the old
   * profile in its cache must not add the old limits' increments to buckets rescaled to the new ones.
   */
  readonly limitsGen: number;
}

export interface AccountDirectory {
  findAccount(id: string): Promise<AccountProfile | null>;
}

/** A wallet's figures, nano-USD. `available = balance − Σ open holds`, never below zero. */
export interface WalletState {
  readonly balance: number;
  readonly available: number;
  /** Cost that could not be covered when it was settled; collected from the next top-up. */
  readonly owed: number;
}

/**
 * How one dimension's bucket is updated at admission. `fresh` assumes the bucket has drained (TAT ≤ now) and
 * sets the TAT; `increment` assumes it has not and adds to it, provided the result stays within the limit.
 * Each form is guarded by a condition, so a wrong assumption fails the transaction instead of miscounting.
 */
export interface DimensionUpdate {
  readonly dimension: Dimension;
  readonly form: 'fresh' | 'increment';
  readonly nowUs: number;
  readonly incrementUs: number;
  /** `increment`: the largest prior TAT that admits the charge. */
  readonly maxPriorTatUs: number;
}

export interface HoldPlan {
  /** Nano-USD. */
  readonly amount: number;
  /** Epoch ms after which the sweeper may release it. */
  readonly expiresAt: number;
}

export interface AdmitPlan {
  readonly accountId: string;
  readonly requestId: string;
  readonly dimensions: readonly DimensionUpdate[];
  /** Null for free models: nothing is held. */
  readonly hold: HoldPlan | null;
  /** The limits generation the increments were computed under (AccountProfile.limitsGen). */
  readonly limitsGen: number;
}

/**
 * The store's answer to one admission transaction. On refusal it reports which conditions failed together
 * with the state it saw, so the caller can tell a wrong guess (retry) from a real limit (refuse).
 */
export type AdmitResult =
  | { readonly ok: true }
  | {
      readonly ok: false;
      /** The bucket's actual state when its condition failed, else null. */
      readonly bucket: BucketState | null;
      /** The limits generation the buckets are kept under, read with `bucket` (0: never changed, or no bucket). */
      readonly bucketGen: number;
      /** The wallet's actual state when its condition failed (zeros when it has none), else null. */
      readonly wallet: WalletState | null;
      /** Another transaction touched the same items at the same moment: retry. */
      readonly conflict: boolean;
    };

/** Everything one settlement writes, in one transaction. */
export interface SettlementPlan {
  readonly settlementId: string;
  readonly accountId: string | null;
  readonly requestId: string;
  /** Epoch ms the call arrived; orders the ledger. */
  readonly receivedAt: number;
  /** Hold to release (nano-USD), when admission took one. */
  readonly hold: { readonly id: string; readonly amount: number } | null;
  /** Published cost of the call (nano-USD). */
  readonly cost: number;
  /**
   * Correction of the token buckets (µs of TAT; negative refunds an over-estimate), in the intervals of the limits'
   * generation `limitsGen`: under another (a first top-up, a new quota since) it is not applied. Null `limitsGen`:
   * a record from before generations were recorded, applied as it is.
   */
  readonly tokenCorrection: {
    readonly tpmUs: number;
    readonly tpdUs: number;
    readonly limitsGen: number | null;
  } | null;
  /** Ledger details of the debit. */
  readonly ledger: { readonly model: string | null; readonly endpoint: string; readonly usage: unknown };
  readonly aggregates: readonly AggregateIncrement[];
  readonly fault: FaultEntry | null;
}

export type SettleOutcome = 'settled' | 'duplicate';

export interface AccountingStore {
  admit(plan: AdmitPlan): Promise<AdmitResult>;
  settle(plan: SettlementPlan): Promise<SettleOutcome>;
  /** Releases holds that expired before `nowMs`; returns how many. */
  releaseExpiredHolds(nowMs: number): Promise<number>;
}

/**
 * How a settlement's cost is split when it exceeds its hold and what the wallet has available: the wallet
 * pays what it can (available never goes below zero) and the rest is recorded as owed, collected from the
 * next top-up. Nothing is ever dropped.
 */
export const splitCharge = (
  cost: number,
  released: number,
  available: number,
): { charge: number; owed: number } => {
  const payable = available + released;
  return cost <= payable ? { charge: cost, owed: 0 } : { charge: payable, owed: cost - payable };
};

/**
 * The most a wallet may hold: 5 million USD. Money is a plain number of nano-dollars on the hot path, exact only
 * up to 2⁵³ (about 9 million USD; ADR 0002); refusing top-ups past this keeps every balance, hold and sum of them
 * exact, with room to spare.
 */
export const MAX_BALANCE_NANO = 5_000_000 * NANO_PER_USD;

/**
 * How the sweeper's log line begins when an expired hold could not be released: the operator's alarm counts these
 * lines (lib/functions.ts), since the sweep itself goes on and succeeds — while a customer's money stays held.
 */
export const HOLD_NOT_RELEASED = 'hold not released';

/** A top-up that would take a wallet past MAX_BALANCE_NANO. */
export class BalanceCeilingError extends Error {
  readonly balance: number;

  constructor(balance: number) {
    super(
      `this top-up would take the balance past ${nanoToUsd(MAX_BALANCE_NANO)} USD, the most a wallet holds (balance now ${nanoToUsd(balance)} USD)`,
    );
    this.name = 'BalanceCeilingError';
    this.balance = balance;
  }
}

/** Spec §1: the smallest wallet top-up, 1 USD. */
export const MIN_TOP_UP_NANO = NANO_PER_USD;

/** A top-up below MIN_TOP_UP_NANO, or not a whole number of nano-dollars. */
export class TopUpAmountError extends Error {
  constructor(amount: number) {
    super(
      Number.isSafeInteger(amount)
        ? `top-ups are at least ${nanoToUsd(MIN_TOP_UP_NANO)} USD, got ${nanoToUsd(amount)} USD`
        : `a top-up is a whole number of nano-dollars, got ${amount}`,
    );
    this.name = 'TopUpAmountError';
  }
}

/**
 * How much of a top-up goes to what the account owes, and how much to its balance. Throws TopUpAmountError for an
 * amount under the spec's minimum — whichever tool credits it, the wallet enforces the rule, not only the CLI —
 * and BalanceCeilingError when the credit would take the balance past MAX_BALANCE_NANO.
 */
export const applyTopUp = (
  amount: number,
  owed: number,
  balance: number,
): { collected: number; credited: number } => {
  if (!Number.isSafeInteger(amount) || amount < MIN_TOP_UP_NANO) throw new TopUpAmountError(amount);
  const collected = Math.min(owed, amount);
  const credited = amount - collected;
  if (balance + credited > MAX_BALANCE_NANO) throw new BalanceCeilingError(balance);
  return { collected, credited };
};
