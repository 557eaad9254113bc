import type { AccountingStore, AccountProfile, DimensionUpdate, WalletState } from './accounting.ts';
import type { Principal } from './authenticator.ts';
import {
  AuthenticationError,
  InsufficientBalanceError,
  RateLimitError,
  retryAfterHeaders,
  ServiceUnavailableError,
} from './errors.ts';
import {
  type BucketState,
  type Charges,
  capacityUs,
  chargesFor,
  checkDimension,
  DIMENSIONS,
  type Dimension,
  type DimensionCheck,
  emissionUs,
  formatDuration,
  type Limits,
  limitsFor,
  rescaleBuckets,
  statusOf,
} from './limits.ts';
import type { Clock, Random, Sleep } from './ports.ts';
import { nanoToUsd } from './pricing.ts';
import { setMostRecent } from './recency.ts';
import type { RefreshingCache } from './refreshing-cache.ts';

/** What one call asks of its account before it may go upstream. */
export interface AdmissionRequest {
  readonly requestId: string;
  /** Estimated tokens: the prompt (real tokenizer) plus the completion cap. */
  readonly estimatedTokens: number;
  /** Worst-case cost (nano-USD) to hold; 0 for free models, which hold nothing. */
  readonly holdAmount: number;
  /** Chat only: the largest `max_tokens` an available amount (nano-USD) covers. */
  readonly affordableMaxTokens?: (availableNano: number) => number;
}

/** What settlement needs to undo or correct later, and what the response headers report. */
export interface Admitted {
  readonly hold: { readonly id: string; readonly amount: number } | null;
  readonly estimatedTokens: number;
  /** µs per token of the token buckets at admission, so settlement can correct them without a lookup. */
  readonly tokenEmissionUs: { readonly tpm: number; readonly tpd: number };
  /** The token buckets' TATs after this admission, as known here: the bound on what settlement may refund. */
  readonly tokenTatUs: { readonly tpm: number; readonly tpd: number };
  /** The generation of the limits admitted under: settlement corrects the buckets only under the same one. */
  readonly limitsGen: number;
  readonly headers: Record<string, string>;
}

/**
 * The store did not answer the admission — which may still have been written: a reply lost after the commit, a
 * timeout while it ran. The client gets a 503; the call's settlement releases the hold it may have taken (a release
 * is conditional on the hold existing, so one never taken is left alone). Without it a lost reply locked that much
 * of the wallet until the sweeper, half an hour on, and every call meanwhile got a 402.
 */
export class AdmissionUnknownError extends ServiceUnavailableError {
  /** The hold the admission asked for, if any: perhaps taken. */
  readonly possibleHold: { readonly id: string; readonly amount: number } | null;

  constructor(cause: unknown, possibleHold: { readonly id: string; readonly amount: number } | null) {
    super('The accounting store is unreachable; the request was not served.', cause, 'accounting');
    this.possibleHold = possibleHold;
  }
}

export interface AdmissionOptions {
  readonly store: AccountingStore;
  readonly accounts: RefreshingCache<AccountProfile | null>;
  readonly clock: Clock;
  readonly random: Random;
  readonly sleep: Sleep;
  /** After this long an unsettled hold may be released by the sweeper. */
  readonly holdTtlMs: number;
  /** Attempts when a guess about the bucket was wrong or a transaction conflicted. */
  readonly maxAttempts?: number;
  /** Accounts whose buckets the instance remembers (default 10,000); the least recently admitted are forgotten. */
  readonly maxAccounts?: number;
}

/** An account's buckets as this instance last saw them, and the limits they were kept under. */
interface Remembered {
  readonly state: BucketState;
  readonly limits: Limits;
  /** The generation of the limits the state is kept under (the store's `limitsGen`). */
  readonly gen: number;
}

/** How far ahead of now a contended admission's fresh form starts, from its third attempt (see #admit). */
const RETRY_MARGIN_US = 1_000_000;

/**
 * How long an admission that did not pass keeps this instance from expecting the next ones to (`expects`): a
 * refused account (its wallet, a limit, a key whose account is gone) for its own calls, a store that could not be
 * reached for every call. Long enough that a client retrying a 402 or 429, or an outage, starts no upstream
 * call per request; short enough that the overlap comes back on its own.
 */
const DOUBT_MS = 60_000;

/** Why `expects` answers no for an account for a while (see #doubt). */
interface Doubt {
  /** Epoch ms. */
  readonly until: number;
  /**
   * After a refusal for want of funds: the hold the wallet could not cover. Only a paid admission at least this
   * large proves the money is there again; a free or cheaper call passing proves nothing about it.
   */
  readonly shortOf: number | null;
}

/**
 * Admissions of one account this instance lets run beside their upstream calls at once. A burst of concurrent
 * calls all pass `expects` on the same memory before the first is answered; if the store then refuses them (a
 * wallet that cannot cover them), this many at most went upstream for nothing.
 */
const MAX_AHEAD = 4;

/**
 * Admission: the per-account limits of the tier (GCRA, four dimensions) and a wallet hold of the worst-case
 * cost, taken in one conditional transaction — normally one store round trip. The instance remembers each
 * account's buckets; that guess picks the form of each bucket update, and when it is wrong the store's
 * refusal carries the actual state, so the second attempt is exact. Anything else from the store refuses the
 * call (503): the service never serves unmetered.
 */
export class Admission {
  readonly #options: AdmissionOptions;
  /** Per account, the buckets as this instance last saw them, and the limits they were kept under. */
  readonly #buckets = new Map<string, Remembered>();
  /** Per account, the admission currently in flight from this instance (they run one after another). */
  readonly #inFlight = new Map<string, Promise<unknown>>();
  /** Per account, what its last failed admission keeps `expects` from answering yes to. */
  readonly #doubted = new Map<string, Doubt>();
  /** When the store last could not be reached (epoch ms); for DOUBT_MS after it `expects` answers no. */
  #storeFailedAt = Number.NEGATIVE_INFINITY;
  /** Per account, the admissions asked of this instance and not yet answered, and the tokens they charge. */
  readonly #pending = new Map<string, { calls: number; tokens: number }>();

  /** How many accounts' buckets, and doubts, this instance keeps at most (AdmissionOptions.maxAccounts). */
  readonly #maxAccounts: number;

  constructor(options: AdmissionOptions) {
    this.#options = options;
    this.#maxAccounts = options.maxAccounts ?? 10_000;
  }

  /**
   * Remembers an account's buckets, as the most recently used. A long-lived instance serves ever more accounts,
   * and a guess only saves a round trip: past `maxAccounts` the least recently admitted account is forgotten (its
   * next admission here starts from the store's answer, one retry at most).
   */
  #remember(accountId: string, remembered: Remembered): void {
    setMostRecent(this.#buckets, accountId, remembered, this.#maxAccounts);
  }

  /**
   * Admissions of one account from one instance run one after another, so each starts from the exact bucket
   * state the previous one left and needs one round trip. (A Lambda instance serves one request at a time
   * anyway; the local host and multi-concurrency runtimes serve many.) Other instances' writes can still make
   * a guess wrong; the store's refusal then carries the actual state and the retry is exact.
   */
  admit(principal: Principal, request: AdmissionRequest): Promise<Admitted> {
    const account = principal.accountId;
    const askedAt = this.#options.clock.now();
    const pending = this.#pending.get(account) ?? { calls: 0, tokens: 0 };
    pending.calls++;
    pending.tokens += request.estimatedTokens;
    this.#pending.set(account, pending);
    const previous = this.#inFlight.get(account);
    const run = (previous ? previous.catch(() => {}) : Promise.resolve()).then(() =>
      this.#admit(principal, request),
    );
    this.#inFlight.set(account, run);
    const answered = () => {
      pending.calls--;
      pending.tokens -= request.estimatedTokens;
      if (pending.calls === 0) this.#pending.delete(account);
      if (this.#inFlight.get(account) === run) this.#inFlight.delete(account);
    };
    run.then(
      () => {
        answered();
        // Admitted after all: a doubt this admission answers has served its purpose — a refused wallet's only when
        // the hold was as large as the one it could not cover, the store's only when this call was asked of it
        // after the failure (one that was under way before says nothing of the store since).
        const doubt = this.#doubted.get(account);
        if (doubt && (doubt.shortOf === null || request.holdAmount >= doubt.shortOf))
          this.#doubted.delete(account);
        if (askedAt > this.#storeFailedAt) this.#storeFailedAt = Number.NEGATIVE_INFINITY;
      },
      (error: unknown) => {
        answered();
        this.#doubt(account, error, request.holdAmount);
      },
    );
    return run;
  }

  /**
   * Whether this instance expects the store to admit `request`, before asking it: the account's buckets are
   * remembered; under the limits they were kept under they have room for this call and the account's admissions
   * still unanswered here, twice over (another instance's admissions may have spent some of it meanwhile); fewer than
   * MAX_AHEAD of those are under way; and no admission of the account — nor any call to the store — has failed here
   * lately. Only a guess, and never the decision: a yes lets the upstream call start beside the
   * store's round trip (Gateway.admitAndRoute), and a wrong yes costs one upstream call that is cancelled and
   * served to no one. What the wallet holds is not known here (a hold reads nothing back); a refusal for want of
   * funds turns the answer to no for DOUBT_MS, or until a hold as large as the refused one is taken (#doubt).
   */
  expects(principal: Principal, request: AdmissionRequest): boolean {
    const account = principal.accountId;
    const nowMs = this.#options.clock.now();
    if (nowMs < this.#storeFailedAt + DOUBT_MS || nowMs < (this.#doubted.get(account)?.until ?? 0))
      return false;
    const memory = this.#buckets.get(account);
    if (!memory) return false;
    const pending = this.#pending.get(account) ?? { calls: 0, tokens: 0 };
    if (pending.calls >= MAX_AHEAD) return false;
    const nowUs = Math.floor(nowMs * 1000);
    const charges = chargesFor(request.estimatedTokens + pending.tokens);
    const units = (d: Dimension) => 2 * (d === 'rpm' || d === 'rpd' ? pending.calls + 1 : charges[d]);
    return DIMENSIONS.every(
      (d) => checkDimension(d, memory.limits[d], memory.state[d], units(d), nowUs).allowed,
    );
  }

  /**
   * Remembers that an admission of the account did not pass, for `expects`. A refusal for want of funds is
   * remembered with the hold refused: the free or cheap calls a client can still afford must not clear it, or the
   * client could alternate them with calls it cannot pay for, each going upstream before its refusal. (The store's
   * own failures are remembered where they happen, in #admit: not every 503 is one — "too contended" is about one
   * account.)
   */
  #doubt(accountId: string, error: unknown, holdAmount: number): void {
    const until = this.#options.clock.now() + DOUBT_MS;
    const previous = this.#doubted.get(accountId);
    const shortOf =
      error instanceof InsufficientBalanceError
        ? Math.min(holdAmount, previous?.shortOf ?? Number.POSITIVE_INFINITY)
        : (previous?.shortOf ?? null);
    // Bounded as the buckets are: past maxAccounts the oldest doubt goes (a forgotten one costs one upstream call).
    setMostRecent(this.#doubted, accountId, { until, shortOf }, this.#maxAccounts);
  }

  /**
   * What settlement will do to an account's token buckets once it runs (refund what the estimate charged too
   * much, or charge what it missed), applied to this instance's memory now: the next admission's guess and
   * headers then match the store as settlement leaves it. Without it, the remembered TATs stay ahead of the
   * store's after every refund — the limit headers under-report what remains, and the next admission's first
   * attempt misses.
   */
  expectCorrection(
    accountId: string,
    correction: { readonly tpmUs: number; readonly tpdUs: number; readonly limitsGen: number | null },
  ): void {
    const memory = this.#buckets.get(accountId);
    if (!memory) return;
    // The store applies it under the generation of limits the call was admitted under alone.
    if (correction.limitsGen !== null && correction.limitsGen !== memory.gen) return;
    const known = memory.state;
    this.#remember(accountId, {
      gen: memory.gen,
      limits: memory.limits,
      state: {
        ...known,
        ...(known.tpm === undefined ? {} : { tpm: known.tpm + correction.tpmUs }),
        ...(known.tpd === undefined ? {} : { tpd: known.tpd + correction.tpdUs }),
      },
    });
  }

  async #admit(principal: Principal, request: AdmissionRequest): Promise<Admitted> {
    let profile = await this.#profile(principal.accountId);
    let limits = limitsFor(profile.tier, profile.quota);
    const charges = chargesFor(request.estimatedTokens);
    // Too large for the limits cached here, a call may still fit the account's own (a first top-up or a new quota
    // since): read them once before refusing it for good — its 429 tells the client's SDK not to retry.
    if (DIMENSIONS.some((d) => charges[d] > limits[d])) {
      profile = await this.#profile(principal.accountId, true);
      limits = limitsFor(profile.tier, profile.quota);
    }
    const maxAttempts = this.#options.maxAttempts ?? 4;
    for (let attempt = 1; attempt <= maxAttempts; attempt++) {
      // Integers: the store keeps TATs in whole µs and expiries in whole ms.
      const now = this.#options.clock.now();
      const nowMs = Math.floor(now);
      const nowUs = Math.floor(now * 1000);
      const known = this.#known(principal.accountId, limits, nowUs);
      const checks = DIMENSIONS.map((d) => checkDimension(d, limits[d], known[d], charges[d], nowUs));
      const tooLarge = checks.find((c) => c.exceedsLimit);
      if (tooLarge) throw this.#rateLimited(tooLarge, limits, known, nowUs, charges);

      // The guess only chooses the form; the store's condition decides. A TAT known to be ahead of now takes the
      // increment form, which cannot go stale: TATs only ever move forward. A drained one takes the fresh form,
      // which another instance's admission in between makes wrong. Near the drained boundary (TAT ≈ now, an
      // account well under its limits) instances keep flipping it for each other, so a retry's fresh form
      // starts a margin ahead: it then holds whatever they did within the margin, at the price of charging up to
      // the margin's worth of emission extra (never less than the exact charge).
      // Not on the first retry: that one starts from the exact state the store just reported, and one instance
      // alone then succeeds (its guess was only stale — a settlement's refund moves a TAT back). Charging the
      // margin there charged a second's worth of every drained limit after each refunded estimate.
      const marginUs = attempt > 2 ? RETRY_MARGIN_US : 0;
      // A dimension this call takes nothing of is neither charged nor conditioned on (checkDimension).
      const charged = checks.filter((c) => charges[c.dimension] > 0);
      const dimensions: DimensionUpdate[] = charged.map((c) => {
        const tat = known[c.dimension];
        if (tat !== undefined && tat > nowUs)
          return {
            dimension: c.dimension,
            form: 'increment',
            nowUs,
            incrementUs: c.incrementUs,
            maxPriorTatUs: c.maxPriorTatUs,
          };
        // The margin only where the charge plus the margin still fits the bucket.
        const startUs = nowUs + (c.maxPriorTatUs - nowUs >= marginUs ? marginUs : 0);
        return {
          dimension: c.dimension,
          form: 'fresh',
          nowUs: startUs,
          incrementUs: c.incrementUs,
          maxPriorTatUs: c.maxPriorTatUs,
        };
      });
      const hold =
        request.holdAmount > 0
          ? { amount: request.holdAmount, expiresAt: nowMs + this.#options.holdTtlMs }
          : null;

      let result: Awaited<ReturnType<AccountingStore['admit']>>;
      try {
        result = await this.#options.store.admit({
          accountId: principal.accountId,
          requestId: request.requestId,
          dimensions,
          hold,
          limitsGen: profile.limitsGen,
        });
      } catch (error) {
        this.#storeFailedAt = this.#options.clock.now();
        throw new AdmissionUnknownError(error, hold ? { id: request.requestId, amount: hold.amount } : null);
      }

      if (result.ok) {
        // A dimension the call took nothing of is as it was (known).
        const after: BucketState = { ...known };
        charged.forEach((c, i) => {
          const update = dimensions[i] as DimensionUpdate;
          const guessed = update.form === 'fresh' ? update.nowUs + update.incrementUs : c.newTatUs;
          // The store's condition kept the new TAT within the bucket; a guess above that was stale (a refund this
          // instance had not heard of), and the store's value is at most the bound.
          after[c.dimension] = Math.min(guessed, nowUs + capacityUs(c.dimension, limits[c.dimension]));
        });
        this.#remember(principal.accountId, { state: after, limits, gen: profile.limitsGen });
        return {
          hold: hold ? { id: request.requestId, amount: hold.amount } : null,
          estimatedTokens: request.estimatedTokens,
          tokenEmissionUs: { tpm: emissionUs('tpm', limits.tpm), tpd: emissionUs('tpd', limits.tpd) },
          tokenTatUs: { tpm: after.tpm ?? nowUs, tpd: after.tpd ?? nowUs },
          limitsGen: profile.limitsGen,
          headers: rateLimitHeaders(limits, after, nowUs),
        };
      }
      if (result.conflict) {
        // Jittered, growing pause so colliding transactions spread out.
        await this.#options.sleep(this.#options.random() * 5 * 2 ** attempt);
        continue;
      }
      if (result.bucket && result.bucketGen !== profile.limitsGen) {
        // The account's limits changed since this instance cached its profile (a first top-up, a new quota): the
        // buckets were rescaled to the new limits. Admit under those, from the state the store reported.
        profile = await this.#profile(principal.accountId, true);
        limits = limitsFor(profile.tier, profile.quota);
        this.#remember(principal.accountId, { state: result.bucket, limits, gen: result.bucketGen });
        continue;
      }
      const actual = result.bucket ?? known;
      if (result.bucket) {
        this.#remember(principal.accountId, { state: result.bucket, limits, gen: result.bucketGen });
        const exact = DIMENSIONS.map((d) => checkDimension(d, limits[d], actual[d], charges[d], nowUs));
        const refused = exact.filter((c) => !c.allowed);
        if (refused.length > 0) {
          const worst = refused.reduce((a, b) => (b.retryAfterUs > a.retryAfterUs ? b : a));
          throw this.#rateLimited(worst, limits, actual, nowUs, charges);
        }
      }
      // The bucket was only a wrong guess (retry with the state the store reported), or the wallet is short.
      if (result.wallet && !result.bucket) {
        throw insufficient(result.wallet, request, rateLimitHeaders(limits, actual, nowUs));
      }
    }
    throw new ServiceUnavailableError(
      'The accounting store is too contended to admit the request right now.',
      undefined,
      'accounting',
    );
  }

  /**
   * The account's buckets as this instance remembers them, under `limits`: when the limits changed since (a
   * tier upgrade, a new quota), the store carried what was spent into the new limits (rescaleBuckets) and so
   * does the memory.
   */
  #known(accountId: string, limits: Limits, nowUs: number): BucketState {
    const memory = this.#buckets.get(accountId);
    if (!memory) return {};
    if (DIMENSIONS.every((d) => memory.limits[d] === limits[d])) return memory.state;
    return { ...memory.state, ...rescaleBuckets(memory.state, memory.limits, limits, nowUs) };
  }

  async #profile(accountId: string, reload = false): Promise<AccountProfile> {
    let profile: AccountProfile | null;
    try {
      const { accounts } = this.#options;
      profile = await (reload ? accounts.reload(accountId) : accounts.get(accountId));
    } catch (error) {
      this.#storeFailedAt = this.#options.clock.now();
      throw new ServiceUnavailableError(
        'The account store is unreachable; the request was not served.',
        error,
        'accounting',
      );
    }
    // A key whose account is gone is a revoked key in all but name: 401, the caller's problem, not an outage.
    if (!profile) throw new AuthenticationError('The account behind this API key no longer exists.');
    return profile;
  }

  #rateLimited(
    check: DimensionCheck,
    limits: Limits,
    state: BucketState,
    nowUs: number,
    charges: Charges,
  ): RateLimitError {
    const kind = check.dimension === 'rpm' || check.dimension === 'rpd' ? 'requests' : 'tokens';
    const label = DIMENSION_LABELS[check.dimension];
    const limit = limits[check.dimension];
    const status = statusOf(check.dimension, limit, state[check.dimension], nowUs);
    const message = check.exceedsLimit
      ? `Request too large for ${label}: Limit ${limit}, Requested ${charges[check.dimension]}. Reduce the prompt or max_tokens.`
      : `Rate limit reached for ${label}: Limit ${limit}, Used ${limit - status.remaining}, Requested ${charges[check.dimension]}. Please try again in ${formatDuration(check.retryAfterUs)}.`;
    return new RateLimitError(kind, message, {
      ...rateLimitHeaders(limits, state, nowUs),
      // A request larger than the limit itself never fits: no retry time, which clients (the openai SDKs honour
      // retry-after-ms) would take as an invitation to retry in vain; and the header OpenAI's SDKs read before
      // the status, since they retry any 429 that does not forbid it.
      ...(check.exceedsLimit ? { 'x-should-retry': 'false' } : retryAfterHeaders(check.retryAfterUs / 1000)),
    });
  }
}

const DIMENSION_LABELS = {
  rpm: 'requests per minute (RPM)',
  rpd: 'requests per day (RPD)',
  tpm: 'tokens per minute (TPM)',
  tpd: 'tokens per day (TPD)',
} as const;

/**
 * The OpenAI-style limit headers. Each pair of buckets (per minute, per day) is reported by the tighter one:
 * the one with fewer units left, which is what the next call can count on; on a tie, the one that takes longer to
 * reset (with both empty, the later one is when a call is admitted again).
 */
export const rateLimitHeaders = (
  limits: Limits,
  state: BucketState,
  nowUs: number,
): Record<string, string> => {
  const tighter = (minute: Dimension, day: Dimension) => {
    const perMinute = statusOf(minute, limits[minute], state[minute], nowUs);
    const perDay = statusOf(day, limits[day], state[day], nowUs);
    return perDay.remaining < perMinute.remaining ||
      (perDay.remaining === perMinute.remaining && perDay.resetUs > perMinute.resetUs)
      ? perDay
      : perMinute;
  };
  const requests = tighter('rpm', 'rpd');
  const tokens = tighter('tpm', 'tpd');
  return {
    'x-ratelimit-limit-requests': String(requests.limit),
    'x-ratelimit-remaining-requests': String(requests.remaining),
    'x-ratelimit-reset-requests': formatDuration(requests.resetUs),
    'x-ratelimit-limit-tokens': String(tokens.limit),
    'x-ratelimit-remaining-tokens': String(tokens.remaining),
    'x-ratelimit-reset-tokens': formatDuration(tokens.resetUs),
  };
};

const insufficient = (
  wallet: WalletState,
  request: AdmissionRequest,
  headers: Record<string, string>,
): InsufficientBalanceError =>
  new InsufficientBalanceError(
    {
      balance: nanoToUsd(wallet.balance),
      available: nanoToUsd(wallet.available),
      required: nanoToUsd(request.holdAmount),
      maxAffordableMaxTokens: request.affordableMaxTokens
        ? request.affordableMaxTokens(wallet.available)
        : null,
    },
    headers,
  );
