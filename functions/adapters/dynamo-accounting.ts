import {
  type AttributeValue,
  type CancellationReason,
  type DynamoDBClient,
  GetItemCommand,
  paginateQuery,
  TransactionCanceledException,
  type TransactWriteItem,
  TransactWriteItemsCommand,
} from '@aws-sdk/client-dynamodb';
import {
  type AccountingStore,
  type AdmitPlan,
  type AdmitResult,
  applyTopUp,
  HOLD_NOT_RELEASED,
  MAX_BALANCE_NANO,
  type SettlementPlan,
  type SettleOutcome,
  splitCharge,
  type WalletState,
} from '#core/accounting.ts';
import {
  type BucketState,
  DIMENSIONS,
  type Limits,
  limitsFor,
  mergeQuota,
  type QuotaChange,
  quotaProblem,
  rescaleBuckets,
  sameQuota,
  type Tier,
} from '#core/limits.ts';
import { profileOf } from './dynamo-accounts.ts';
import { contended } from './transaction-contention.ts';

/**
 * Accounting in DynamoDB: every money and limit invariant is a condition on a transaction.
 *
 * Items (wallet table):
 * - `acct#<id>` / `wallet`: `balance`, `available` (= balance − open holds, never < 0), `owed` (nano-USD).
 * - `acct#<id>` / `hold#<requestId>`: an open hold; `gsi1pk = holds#<shard>`, `gsi1sk = <expiry>#…` let the
 *   sweeper find expired holds without a scan.
 * - `acct#<id>` / `ledger#<at>#<id>`: a money movement (`credit`, `debit`, `arrears`); their sum is the balance.
 * - `settled#<settlementId>` / `settled`: makes a settlement that moved no money idempotent (a paid one's
 *   ledger entry does that); expires MARKER_TTL_SECONDS after the settling.
 * - `topup#<reference>` / `topup`: makes a top-up idempotent by its payment reference; kept forever.
 * Buckets table: `acct#<id>` / `limits` with one TAT (µs) per dimension. Usage table: aggregate counters
 * (`agg#<day>` / `<subject>#<shard>`) and faults (`faults#<day>` / `<at>#<requestId>`), both expiring.
 */
export interface AccountingTables {
  readonly wallet: string;
  readonly buckets: string;
  readonly usage: string;
  readonly accounts: string;
}

const HOLD_SHARDS = 8;
const AGGREGATE_SHARDS = 8;
/** The usage report covers 30 days; a margin keeps the last day complete. */
export const USAGE_TTL_SECONDS = 40 * 86_400;
/**
 * Settlement markers must outlive any redelivery (the queue keeps messages 4 days) and any replay the usage aggregates
 * could still count (admin `settlements replay` of an old log, a late DLQ redrive). Counted from the settling, they
 * outlast the aggregates' 40 days from the call's arrival by two days: a call's minute row can be on the day after its
 * arrival, and an aggregate item's TTL is set by whichever call of its day created it.
 */
const MARKER_TTL_SECONDS = USAGE_TTL_SECONDS + 2 * 86_400;
/**
 * Attempts of one settlement's transaction. Each retry answers what the last one found — a conflict, the hold
 * already swept, the limits' generation changed, the wallet owing, up to three shortfalls — so a settlement meeting
 * all of them at once still commits here rather than waiting for the queue's redelivery.
 */
const SETTLE_ATTEMPTS = 8;
/** Attempts of a settlement's usage counters written apart from its money (#countApart). */
const COUNT_APART_ATTEMPTS = 5;
/** Attempts of one expired hold's release in a sweep: each answers a debt that moved, or a conflict. */
const SWEEP_ATTEMPTS = 4;

const S = (value: string): AttributeValue => ({ S: value });
const N = (value: number): AttributeValue => ({ N: String(value) });
const num = (value: AttributeValue | undefined): number => (value?.N === undefined ? 0 : Number(value.N));

const accountKey = (accountId: string) => `acct#${accountId}`;
const walletKey = (accountId: string) => ({ pk: S(accountKey(accountId)), sk: S('wallet') });
const holdKey = (accountId: string, requestId: string) => ({
  pk: S(accountKey(accountId)),
  sk: S(`hold#${requestId}`),
});
const bucketKey = (accountId: string) => ({ pk: S(accountKey(accountId)), sk: S('limits') });
/** Ledger entries sort by time; 13 digits hold epoch milliseconds until the year 2286. */
const ledgerSk = (at: number, id: string) => `ledger#${String(at).padStart(13, '0')}#${id}`;

/** FNV-1a: spreads hot items (aggregates, the holds index) over shards deterministically. */
const shardOf = (id: string, shards: number): number => {
  let hash = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) hash = Math.imul(hash ^ id.charCodeAt(i), 0x01000193);
  return (hash >>> 0) % shards;
};

const walletOf = (item: Record<string, AttributeValue> | undefined): WalletState => ({
  balance: num(item?.balance),
  available: num(item?.available),
  owed: num(item?.owed),
});

const bucketOf = (item: Record<string, AttributeValue> | undefined): BucketState => {
  const state: BucketState = {};
  for (const d of DIMENSIONS) if (item?.[d]?.N !== undefined) state[d] = Number(item[d].N);
  return state;
};

/** The attribute, on the buckets item and the account profile alike, naming the generation of the limits. */
const LIMITS_GEN = 'limitsGen';
const genOf = (item: Record<string, AttributeValue> | undefined): number =>
  Number(item?.[LIMITS_GEN]?.N ?? 0);

/**
 * The condition that the buckets item (its `#gen` name bound to LIMITS_GEN) is at generation `gen`, with the value
 * bound to `placeholder` in `values`. Generation 0 is an item written before any change: without the attribute.
 */
const sameGeneration = (gen: number, values: Record<string, AttributeValue>, placeholder: string): string => {
  if (gen === 0) return 'attribute_not_exists(#gen)';
  values[placeholder] = N(gen);
  return `#gen = ${placeholder}`;
};

/** A wallet condition that fails when the account owes (`:zero` bound), so the caller knows to collect. */
const NO_DEBT = '(attribute_not_exists(owed) OR owed <= :zero)';

/** Where an arrears ledger entry comes from: its time, a key unique to its cause, and the request it names. */
interface CollectionEntry {
  readonly at: number;
  readonly id: string;
  readonly reference: string;
}

/** What money freed on a wallet seen owing pays of that debt: all of it, up to the debt. */
const debtRepaid = (freed: number, owedSeen: number): number => Math.max(0, Math.min(freed, owedSeen));

/**
 * The ledger entry of a debt paid: `amount` left the balance for calls already served. Written in the transaction
 * that pays it, on condition it is new — its id is unique to its cause.
 */
const arrearsEntry = (
  table: string,
  accountId: string,
  entry: CollectionEntry,
  amount: number,
): TransactWriteItem => ({
  Put: {
    TableName: table,
    Item: {
      pk: S(accountKey(accountId)),
      sk: S(ledgerSk(entry.at, entry.id)),
      kind: S('arrears'),
      amount: N(amount),
      owed: N(0),
      reference: S(entry.reference),
      at: N(entry.at),
    },
    ConditionExpression: 'attribute_not_exists(pk)',
  },
});
const ledgerOf = (plan: SettlementPlan): CollectionEntry => ({
  at: plan.receivedAt,
  id: plan.settlementId,
  reference: plan.requestId,
});

const failed = (reason: CancellationReason | undefined) => reason?.Code === 'ConditionalCheckFailed';
/** Whether every item a cancelled transaction names as contended (a conflict, throttling) has `role`. */
const contendedOnly = <R extends string>(
  reasons: readonly CancellationReason[],
  roles: readonly R[],
  role: R,
) => reasons.every((r, i) => r.Code === undefined || r.Code === 'None' || roles[i] === role);

export interface WalletReport extends WalletState {
  readonly holds: { readonly requestId: string; readonly amount: number; readonly expiresAt: number }[];
  readonly ledger: {
    readonly at: number;
    readonly kind: 'credit' | 'debit' | 'arrears';
    readonly amount: number;
    readonly owed: number;
    readonly reference: string;
  }[];
}

/** A payment reference already credited to another account, or with another amount. */
export class TopUpReferenceError extends Error {
  constructor(reference: string) {
    super(`payment reference ${reference} was already credited to another account or with another amount`);
    this.name = 'TopUpReferenceError';
  }
}

/** A custom quota the buckets cannot enforce as written (quotaProblem). */
export class QuotaError extends Error {
  constructor(problem: string) {
    super(problem);
    this.name = 'QuotaError';
  }
}

export class DynamoAccounting implements AccountingStore {
  readonly #client: DynamoDBClient;
  readonly #tables: AccountingTables;
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #warn: (message: string, fields: Record<string, unknown>) => void;

  /** `warn`: where a best-effort step that failed is told (a debt left to the next release or top-up). */
  constructor(
    client: DynamoDBClient,
    tables: AccountingTables,
    sleep: (ms: number) => Promise<void>,
    warn: (message: string, fields: Record<string, unknown>) => void = () => {},
  ) {
    this.#client = client;
    this.#tables = tables;
    this.#sleep = sleep;
    this.#warn = warn;
  }

  /**
   * One transaction: the bucket update (every dimension's condition at once), and for paid models the wallet
   * debit of `available` and the hold item. `available >= :hold` is the no-overdraft condition: two calls
   * racing for the last dollar cannot both pass it.
   */
  async admit(plan: AdmitPlan): Promise<AdmitResult> {
    const names: Record<string, string> = {};
    const values: Record<string, AttributeValue> = {};
    const sets: string[] = [];
    const conditions: string[] = [];
    plan.dimensions.forEach((u, i) => {
      names[`#d${i}`] = u.dimension;
      values[`:now${i}`] = N(u.nowUs);
      if (u.form === 'fresh') {
        // The bucket has drained: its new TAT is now + this charge.
        values[`:set${i}`] = N(u.nowUs + u.incrementUs);
        sets.push(`#d${i} = :set${i}`);
        conditions.push(`(attribute_not_exists(#d${i}) OR #d${i} <= :now${i})`);
      } else {
        // Still draining: add to the TAT, provided the result stays within the limit.
        values[`:inc${i}`] = N(u.incrementUs);
        values[`:max${i}`] = N(u.maxPriorTatUs);
        sets.push(`#d${i} = #d${i} + :inc${i}`);
        conditions.push(`(#d${i} > :now${i} AND #d${i} <= :max${i})`);
      }
    });
    // The buckets are kept under one generation of the account's limits; increments computed under another (a
    // profile cached from before a change) would be charged at the wrong rate.
    names['#gen'] = LIMITS_GEN;
    conditions.push(sameGeneration(plan.limitsGen, values, ':gen'));
    const items: TransactWriteItem[] = [
      {
        Update: {
          TableName: this.#tables.buckets,
          Key: bucketKey(plan.accountId),
          UpdateExpression: `SET ${sets.join(', ')}`,
          ConditionExpression: conditions.join(' AND '),
          ExpressionAttributeNames: names,
          ExpressionAttributeValues: values,
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        },
      },
    ];
    if (plan.hold) {
      const shard = shardOf(plan.requestId, HOLD_SHARDS);
      items.push(
        {
          Update: {
            TableName: this.#tables.wallet,
            Key: walletKey(plan.accountId),
            UpdateExpression: 'SET available = available - :hold',
            ConditionExpression: 'available >= :hold',
            ExpressionAttributeValues: { ':hold': N(plan.hold.amount) },
            ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          },
        },
        {
          Put: {
            TableName: this.#tables.wallet,
            Item: {
              ...holdKey(plan.accountId, plan.requestId),
              amount: N(plan.hold.amount),
              holdExpiresAt: N(plan.hold.expiresAt),
              gsi1pk: S(`holds#${shard}`),
              gsi1sk: S(
                `${String(plan.hold.expiresAt).padStart(13, '0')}#${plan.accountId}#${plan.requestId}`,
              ),
            },
            // A request id holds at most once, even if an admission is retried after an ambiguous failure.
            ConditionExpression: 'attribute_not_exists(pk)',
          },
        },
      );
    }
    try {
      await this.#client.send(new TransactWriteItemsCommand({ TransactItems: items }));
      return { ok: true };
    } catch (error) {
      if (!(error instanceof TransactionCanceledException)) throw error;
      const reasons = error.CancellationReasons ?? [];
      return {
        ok: false,
        bucket: failed(reasons[0]) ? bucketOf(reasons[0]?.Item) : null,
        bucketGen: failed(reasons[0]) ? genOf(reasons[0]?.Item) : 0,
        wallet: plan.hold && failed(reasons[1]) ? walletOf(reasons[1]?.Item) : null,
        conflict: contended(reasons),
      };
    }
  }

  /**
   * One transaction per settlement: the idempotency marker (a redelivered record is a no-op), the hold's
   * release, the debit and its ledger entry, the token-bucket correction, the usage aggregates and the fault.
   * If the hold is already gone (the sweeper released it) the debit comes from `available` alone; if the cost
   * exceeds what the wallet can pay, the rest is recorded as owed. Both are decided from what the failed
   * attempt saw, and retried; a lost race simply repeats.
   */
  async settle(plan: SettlementPlan): Promise<SettleOutcome> {
    let holdPresent = plan.hold !== null;
    let seenAvailable: number | null = null;
    let shortfalls = 0;
    // Whether to correct the token buckets: not once they are seen kept under other limits than the call's.
    let correct = true;
    // What the account was seen owing when this settlement frees money (its hold less its cost): what it frees
    // then pays that debt in the same transaction, before any new call could spend it.
    let owedSeen = 0;
    // Whether this attempt carries the usage counters, and how often they alone were contended.
    let counted = true;
    let countersContended = 0;
    for (let attempt = 1; attempt <= SETTLE_ATTEMPTS; attempt++) {
      const released = holdPresent && plan.hold ? plan.hold.amount : 0;
      const { charge, owed } =
        seenAvailable === null
          ? { charge: plan.cost, owed: 0 }
          : splitCharge(plan.cost, released, seenAvailable);
      const roles: ('marker' | 'hold' | 'wallet' | 'tokens' | 'counters' | 'other')[] = [];
      const items: TransactWriteItem[] = [];
      const add = (role: (typeof roles)[number], item: TransactWriteItem) => {
        roles.push(role);
        items.push(item);
      };
      // Idempotency: a paid call's ledger entry (its key derives from the record) is the marker; a call that
      // moved no money gets a marker of its own, which outlives the queue's retention and the usage aggregates.
      const paid = plan.accountId !== null && plan.cost > 0;
      if (!paid) {
        add('marker', {
          Put: {
            TableName: this.#tables.wallet,
            Item: {
              pk: S(`settled#${plan.settlementId}`),
              sk: S('settled'),
              // From the wall clock at settling, not the call's arrival: a late replay's marker is not born expired.
              ttl: N(Math.floor(Date.now() / 1000) + MARKER_TTL_SECONDS),
            },
            ConditionExpression: 'attribute_not_exists(pk)',
          },
        });
      }
      if (plan.accountId) {
        const account = plan.accountId;
        if (holdPresent && plan.hold) {
          add('hold', {
            Delete: {
              TableName: this.#tables.wallet,
              Key: holdKey(account, plan.hold.id),
              // The hold as admission wrote it: a record naming a larger one (forged, or a replay file edited by
              // hand) must not free more than was held. A mismatch settles as if the hold were gone: the charge
              // comes from `available`, and the sweeper releases what was really held.
              ConditionExpression: 'attribute_exists(pk) AND amount = :held',
              ExpressionAttributeValues: { ':held': N(plan.hold.amount) },
            },
          });
        }
        if (released > 0 || charge > 0 || owed > 0)
          add(
            'wallet',
            this.#walletSettlement(account, released, charge, owed, {
              seen: seenAvailable,
              need: plan.cost - released,
              forced: shortfalls >= 3,
              owedSeen,
            }),
          );
        const repaid = owed === 0 ? debtRepaid(released - charge, owedSeen) : 0;
        if (repaid > 0)
          add(
            'other',
            arrearsEntry(
              this.#tables.wallet,
              account,
              { ...ledgerOf(plan), id: `${plan.settlementId}#repaid` },
              repaid,
            ),
          );
        if (paid) {
          add('marker', {
            Put: {
              TableName: this.#tables.wallet,
              Item: {
                pk: S(accountKey(account)),
                sk: S(ledgerSk(plan.receivedAt, plan.settlementId)),
                kind: S('debit'),
                amount: N(charge),
                owed: N(owed),
                cost: N(plan.cost),
                reference: S(plan.requestId),
                at: N(plan.receivedAt),
                model: S(plan.ledger.model ?? ''),
                endpoint: S(plan.ledger.endpoint),
                usage: S(JSON.stringify(plan.ledger.usage ?? null)),
              },
              ConditionExpression: 'attribute_not_exists(pk)',
            },
          });
        }
        const correction = plan.tokenCorrection;
        if (correction && correct) {
          // Refunds what the estimate over-charged (or charges what it missed) in the token buckets — in the
          // intervals of the limits the call was admitted under, so only while the buckets are kept under those.
          const values: Record<string, AttributeValue> = {
            ':zero': N(0),
            ':tpm': N(correction.tpmUs),
            ':tpd': N(correction.tpdUs),
          };
          add('tokens', {
            Update: {
              TableName: this.#tables.buckets,
              Key: bucketKey(account),
              UpdateExpression:
                'SET tpm = if_not_exists(tpm, :zero) + :tpm, tpd = if_not_exists(tpd, :zero) + :tpd',
              ...(correction.limitsGen === null
                ? {}
                : {
                    ConditionExpression: sameGeneration(correction.limitsGen, values, ':gen'),
                    ExpressionAttributeNames: { '#gen': LIMITS_GEN },
                  }),
              ExpressionAttributeValues: values,
            },
          });
        }
      }
      // The usage counters and the fault ride in the money's transaction — one write, counted exactly once — unless
      // they are what keeps it from committing (below).
      if (counted) for (const item of this.#usageWrites(plan)) add('counters', item);

      try {
        await this.#client.send(new TransactWriteItemsCommand({ TransactItems: items }));
        // Best effort, after the fact: the settlement stands whatever happens here (the next release or top-up
        // collects).
        // (A debt the freed money paid was paid inside the transaction: collecting it after the commit lost the race
        // to the very admissions it was meant to beat.)
        if (owed > 0 && plan.accountId) await this.#collectOwedOrWarn(plan.accountId, ledgerOf(plan));
        if (!counted) await this.#countApart(plan);
        return 'settled';
      } catch (error) {
        if (!(error instanceof TransactionCanceledException)) throw error;
        const reasons = error.CancellationReasons ?? [];
        const reasonOf = (role: (typeof roles)[number]) => reasons[roles.indexOf(role)];
        if (failed(reasonOf('marker'))) return 'duplicate';
        if (contended(reasons)) {
          // The counters are the hottest items there are (every settlement of a minute shares its shards; an outage
          // puts every fault in one day's partition): contention on them alone must not keep money from settling,
          // nor send the record to the dead-letter queue. From the second such miss the money settles alone.
          if (counted && contendedOnly(reasons, roles, 'counters') && ++countersContended >= 2)
            counted = false;
          await this.#sleep(Math.random() * 10 * 2 ** attempt);
          continue;
        }
        if (roles.includes('tokens') && failed(reasonOf('tokens'))) {
          // The account's limits changed since the call was admitted (a first top-up, a new quota): the buckets
          // were rescaled, and a correction in the old intervals would be worth another number of tokens (a refund
          // at the unverified rate freed 20 times as much of a trusted minute). Left out: one call's estimate.
          correct = false;
          continue;
        }
        if (roles.includes('hold') && failed(reasonOf('hold'))) {
          holdPresent = false;
          continue;
        }
        if (roles.includes('wallet') && failed(reasonOf('wallet'))) {
          if (owed === 0 && released > charge) {
            // Freeing money fails only on the debt: the account owes (or less than seen). What it frees pays what the
            // failed attempt saw owed, conditional on at least that much still being owed.
            owedSeen = walletOf(reasonOf('wallet')?.Item).owed;
            continue;
          }
          // A busy account's available amount can move between any read and the next write, every time: from the
          // third miss the settlement takes nothing from it — the hold pays what it can, the rest is owed — which
          // needs no condition, so it commits instead of failing its way to the dead-letter queue (and what is
          // owed is then collected from what is available, #collectOwed).
          shortfalls++;
          seenAvailable = shortfalls >= 3 ? 0 : walletOf(reasonOf('wallet')?.Item).available;
          continue;
        }
        throw error;
      }
    }
    throw new Error(`settlement ${plan.settlementId} did not commit after ${SETTLE_ATTEMPTS} attempts`);
  }

  /** The usage counters' increments and the fault's record of one settlement, as writes to the usage table. */
  #usageWrites(plan: SettlementPlan): TransactWriteItem[] {
    const writes: TransactWriteItem[] = [];
    const expires = N(Math.floor(plan.receivedAt / 1000) + USAGE_TTL_SECONDS);
    for (const increment of plan.aggregates) {
      const names: Record<string, string> = { '#ttl': 'ttl' };
      const values: Record<string, AttributeValue> = { ':ttl': expires };
      const adds = Object.entries(increment.counters).map(([counter, value], i) => {
        names[`#c${i}`] = counter;
        values[`:c${i}`] = N(value);
        return `#c${i} :c${i}`;
      });
      writes.push({
        Update: {
          TableName: this.#tables.usage,
          // Sharded so a popular model's counters are not one hot item contended by every settlement.
          Key: {
            pk: S(`agg#${increment.day}`),
            sk: S(`${increment.subject}#${shardOf(plan.settlementId, AGGREGATE_SHARDS)}`),
          },
          UpdateExpression: `ADD ${adds.join(', ')} SET #ttl = if_not_exists(#ttl, :ttl)`,
          ExpressionAttributeNames: names,
          ExpressionAttributeValues: values,
        },
      });
    }
    if (plan.fault) {
      writes.push({
        Put: {
          TableName: this.#tables.usage,
          Item: {
            pk: S(`faults#${plan.fault.day}`),
            sk: S(`${String(plan.fault.at).padStart(13, '0')}#${plan.fault.requestId}`),
            at: N(plan.fault.at),
            group: S(plan.fault.group),
            status: N(plan.fault.status),
            detail: S(plan.fault.detail.slice(0, 500)),
            ttl: expires,
          },
        },
      });
    }

    return writes;
  }

  /**
   * The usage counters of a settlement whose money settled without them (they were contended), in a transaction
   * of their own with a marker of their own, so a retry counts them once. Best effort: the money stands whatever
   * happens here, and what cannot be counted is told — the report then undercounts that one call.
   */
  async #countApart(plan: SettlementPlan): Promise<void> {
    const writes = this.#usageWrites(plan);
    if (writes.length === 0) return;
    const marker: TransactWriteItem = {
      Put: {
        TableName: this.#tables.wallet,
        Item: {
          pk: S(`counted#${plan.settlementId}`),
          sk: S('counted'),
          ttl: N(Math.floor(Date.now() / 1000) + MARKER_TTL_SECONDS),
        },
        ConditionExpression: 'attribute_not_exists(pk)',
      },
    };
    for (let attempt = 1; attempt <= COUNT_APART_ATTEMPTS; attempt++) {
      try {
        await this.#client.send(new TransactWriteItemsCommand({ TransactItems: [marker, ...writes] }));
        return;
      } catch (error) {
        const reasons =
          error instanceof TransactionCanceledException ? (error.CancellationReasons ?? []) : [];
        if (failed(reasons[0])) return;
        if (!contended(reasons) || attempt === COUNT_APART_ATTEMPTS) {
          this.#warn('usage not counted; the settlement stands', { settlementId: plan.settlementId, error });
          return;
        }
        await this.#sleep(Math.random() * 10 * 2 ** (attempt + 2));
      }
    }
  }

  /**
   * The wallet side of a settlement. With a shortfall seen (`seen`: what was available when the whole cost was
   * not), it pays what was seen and adds the rest to `owed`, on condition that at least that much is still
   * available — and still not the whole need: money that arrived since means the next attempt pays in full.
   * A `forced` shortfall pays nothing from `available`, which then does not move: no condition at all.
   */
  #walletSettlement(
    account: string,
    released: number,
    charge: number,
    owed: number,
    shortfall: {
      readonly seen: number | null;
      readonly need: number;
      readonly forced: boolean;
      /** The debt the wallet was seen to owe (0: none), paid from what this settlement frees. */
      readonly owedSeen: number;
    },
  ): TransactWriteItem {
    const values: Record<string, AttributeValue> = {
      ':zero': N(0),
      ':charge': N(charge),
      ':delta': N(released - charge),
    };
    let update =
      'SET balance = if_not_exists(balance, :zero) - :charge, available = if_not_exists(available, :zero) + :delta';
    let condition: string | undefined;
    if (owed === 0) {
      // Paying more than the hold draws on `available`, which must cover the difference.
      if (charge > released) {
        values[':need'] = N(charge - released);
        condition = 'available >= :need';
      } else if (charge < released) {
        const repaid = debtRepaid(released - charge, shortfall.owedSeen);
        if (repaid > 0) {
          // The debt seen is paid first from what is freed, on condition at least that much is still owed (a top-up
          // or another release may have paid some meanwhile; a debt grown since is paid by the next money): the
          // balance pays it, so `:charge` becomes the debit. Not the exact debt: settlements ending together on
          // an owing account would each change it under the others, spending their attempts.
          values[':charge'] = N(charge + repaid);
          values[':delta'] = N(released - charge - repaid);
          values[':repaid'] = N(repaid);
          update += ', owed = owed - :repaid';
          condition = 'owed >= :repaid';
        } else {
          // Money freed goes to a debt first: a wallet that owes fails this, and the retry pays it (settle).
          condition = NO_DEBT;
        }
      }
    } else {
      values[':owed'] = N(owed);
      update += ', owed = if_not_exists(owed, :zero) + :owed';
      if (!shortfall.forced) {
        values[':need'] = N(shortfall.need);
        if (shortfall.seen !== null && shortfall.seen > 0) {
          values[':seen'] = N(shortfall.seen);
          condition = 'available >= :seen AND available < :need';
        } else condition = '(attribute_not_exists(available) OR available < :need)';
      }
    }
    return {
      Update: {
        TableName: this.#tables.wallet,
        Key: walletKey(account),
        UpdateExpression: update,
        ...(condition ? { ConditionExpression: condition } : {}),
        ExpressionAttributeValues: values,
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      },
    };
  }

  /** #collectOwed, whose failure stands (the next release or top-up collects) but is told, not swallowed. */
  async #collectOwedOrWarn(accountId: string, entry: CollectionEntry): Promise<void> {
    try {
      await this.#collectOwed(accountId, entry);
    } catch (error) {
      this.#warn('debt not collected; the next release or top-up will', { accountId, error });
    }
  }

  /**
   * After a settlement left part of its cost owed (the wallet could not pay it then), or money was freed on a
   * wallet that owes (a settlement or the sweeper releasing a hold), takes what is owed from what is available
   * now, as far as it goes: that money pays the debt at once rather than being spent on new calls until the next
   * top-up. Best effort: what it cannot take now, the next release or top-up collects.
   */
  async #collectOwed(accountId: string, entry: CollectionEntry): Promise<void> {
    for (let attempt = 1; attempt <= 3; attempt++) {
      const wallet = await this.wallet(accountId);
      const amount = Math.min(wallet.owed, wallet.available);
      if (amount <= 0) return;
      try {
        await this.#client.send(
          new TransactWriteItemsCommand({
            TransactItems: [
              {
                Update: {
                  TableName: this.#tables.wallet,
                  Key: walletKey(accountId),
                  UpdateExpression:
                    'SET balance = balance - :amount, available = available - :amount, owed = owed - :amount',
                  ConditionExpression: 'available >= :amount AND owed >= :amount',
                  ExpressionAttributeValues: { ':amount': N(amount) },
                },
              },
              arrearsEntry(
                this.#tables.wallet,
                accountId,
                { ...entry, id: `${entry.id}#collected#${attempt}` },
                amount,
              ),
            ],
          }),
        );
        return;
      } catch (error) {
        if (!(error instanceof TransactionCanceledException)) throw error;
      }
    }
  }

  /**
   * Releases holds whose settlement never came (a crash between admission and settlement), one by one
   * (#releaseHold); on a wallet that owes, what a release frees pays the debt. A hold that cannot be released now
   * is told and left for the next run, never in the way of the holds after it.
   */
  async releaseExpiredHolds(nowMs: number): Promise<number> {
    let released = 0;
    for (let shard = 0; shard < HOLD_SHARDS; shard++) {
      const pages = paginateQuery(
        { client: this.#client },
        {
          TableName: this.#tables.wallet,
          IndexName: 'gsi1',
          KeyConditionExpression: 'gsi1pk = :shard AND gsi1sk < :now',
          ExpressionAttributeValues: {
            ':shard': S(`holds#${shard}`),
            ':now': S(String(nowMs).padStart(13, '0')),
          },
        },
      );
      for await (const page of pages) {
        for (const hold of page.Items ?? []) {
          const pk = hold.pk?.S;
          const sk = hold.sk?.S;
          if (!pk || !sk) continue;
          try {
            if ((await this.#sweepHold(pk, sk, num(hold.amount), nowMs)) === 'released') released++;
          } catch (error) {
            this.#warn(`${HOLD_NOT_RELEASED}; the next sweep retries it`, { hold: sk, error });
          }
        }
      }
    }
    return released;
  }

  /** One expired hold released, retried while the debt it would pay moves under it. */
  async #sweepHold(
    pk: string,
    sk: string,
    amount: number,
    nowMs: number,
  ): Promise<'released' | 'gone' | 'busy'> {
    const requestId = sk.slice('hold#'.length);
    // Whole milliseconds, as every ledger entry's time (its sort key pads them to 13 digits).
    const entry = { at: Math.floor(nowMs), id: `swept#${requestId}`, reference: requestId };
    let owedSeen = 0;
    for (let attempt = 1; attempt <= SWEEP_ATTEMPTS; attempt++) {
      if (attempt > 1) await this.#sleep(Math.random() * 10 * 2 ** attempt);
      const outcome = await this.#releaseHold(pk, sk, amount, owedSeen, entry);
      if (typeof outcome !== 'number') return outcome;
      owedSeen = outcome;
    }
    this.#warn(`${HOLD_NOT_RELEASED}; the next sweep retries it`, { hold: sk, attempts: SWEEP_ATTEMPTS });
    return 'busy';
  }

  /**
   * One expired hold released in its own transaction, conditional on the hold still existing, so it cannot race a
   * late settlement into releasing twice: `gone` when it was settled (or released) meanwhile. On a wallet seen
   * owing (`owedSeen`), what the release frees pays that debt in the same transaction, on condition at least that
   * much is still owed; otherwise the release is conditional on the wallet owing nothing. Either condition failing
   * answers the debt now owed, for the next attempt.
   */
  async #releaseHold(
    pk: string,
    sk: string,
    amount: number,
    owedSeen: number,
    entry: CollectionEntry,
  ): Promise<'released' | 'gone' | number> {
    const repaid = debtRepaid(amount, owedSeen);
    const items: TransactWriteItem[] = [
      {
        Delete: {
          TableName: this.#tables.wallet,
          Key: { pk: S(pk), sk: S(sk) },
          ConditionExpression: 'attribute_exists(pk)',
        },
      },
      {
        Update: {
          TableName: this.#tables.wallet,
          Key: { pk: S(pk), sk: S('wallet') },
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          ...(repaid > 0
            ? {
                UpdateExpression:
                  'SET available = available + :freed, balance = balance - :repaid, owed = owed - :repaid',
                // At least that much still owed (see #walletSettlement).
                ConditionExpression: 'owed >= :repaid',
                ExpressionAttributeValues: {
                  ':freed': N(amount - repaid),
                  ':repaid': N(repaid),
                },
              }
            : {
                UpdateExpression: 'SET available = available + :freed',
                ConditionExpression: NO_DEBT,
                ExpressionAttributeValues: { ':freed': N(amount), ':zero': N(0) },
              }),
        },
      },
    ];
    if (repaid > 0)
      items.push(arrearsEntry(this.#tables.wallet, pk.slice(accountKey('').length), entry, repaid));
    try {
      await this.#client.send(new TransactWriteItemsCommand({ TransactItems: items }));
      return 'released';
    } catch (error) {
      if (!(error instanceof TransactionCanceledException)) throw error;
      const [hold, wallet] = error.CancellationReasons ?? [];
      if (failed(hold)) return 'gone';
      if (failed(wallet)) return num(wallet?.Item?.owed);
      if (contended(error.CancellationReasons)) return owedSeen;
      throw error;
    }
  }

  /**
   * A change of an account's limits (the top-up that makes it trusted, a new custom quota) carries what it spent
   * as the same units under the new limits (rescaleBuckets): the profile's change, and its buckets rescaled by an
   * update conditional on the TATs read — an admission in between makes the caller read them again. `next` gives
   * the profile's new tier and quota from the current ones, or null for no change.
   */
  async #limitsChange(
    accountId: string,
    nowUs: number,
    next: (current: { tier: Tier; quota: Partial<Limits> | null; limitsGen: number }) => {
      tier: Tier;
      quota: Partial<Limits> | null;
    } | null,
  ): Promise<{ buckets: TransactWriteItem | null; exists: boolean; gen: number }> {
    const [{ Item: profile }, { Item: buckets }] = await Promise.all([
      this.#client.send(
        new GetItemCommand({
          TableName: this.#tables.accounts,
          Key: { pk: S(accountKey(accountId)), sk: S('profile') },
          ProjectionExpression: `tier, quota, ${LIMITS_GEN}`,
          ConsistentRead: true,
        }),
      ),
      this.#client.send(
        new GetItemCommand({
          TableName: this.#tables.buckets,
          Key: bucketKey(accountId),
          ConsistentRead: true,
        }),
      ),
    ]);
    if (!profile) return { buckets: null, exists: false, gen: 0 };
    const current = profileOf(accountId, profile);
    const target = next(current);
    if (!target) return { buckets: null, exists: true, gen: current.limitsGen };
    const state = bucketOf(buckets);
    const rescaled = rescaleBuckets(
      state,
      limitsFor(current.tier, current.quota),
      limitsFor(target.tier, target.quota),
      nowUs,
    );
    // A new generation of the limits, on the buckets and (by the caller) on the profile in the same transaction:
    // admissions computed under the old profile are refused from here on, and retried under the new one.
    const seenGen = genOf(buckets);
    const gen = Math.max(seenGen, current.limitsGen) + 1;
    const names: Record<string, string> = { '#gen': LIMITS_GEN };
    const values: Record<string, AttributeValue> = { ':gen': N(gen) };
    // Every dimension as read, not only those rescaled: an admission under the old limits that commits between
    // this read and this write — on an idle account, whose TATs were drained or absent and so not rescaled — would
    // otherwise keep its old-interval charges under the new limits. It makes this write fail and read again.
    const conditions: string[] = [];
    DIMENSIONS.forEach((d, i) => {
      names[`#d${i}`] = d;
      const seen = state[d];
      if (seen === undefined) conditions.push(`attribute_not_exists(#d${i})`);
      else {
        values[`:old${i}`] = N(seen);
        conditions.push(`#d${i} = :old${i}`);
      }
      if (rescaled[d] !== undefined) values[`:new${i}`] = N(rescaled[d]);
    });
    conditions.push(sameGeneration(seenGen, values, ':seenGen'));
    const sets = DIMENSIONS.flatMap((d, i) => (rescaled[d] === undefined ? [] : [`#d${i} = :new${i}`]));
    return {
      exists: true,
      gen,
      buckets: {
        Update: {
          TableName: this.#tables.buckets,
          Key: bucketKey(accountId),
          UpdateExpression: `SET ${['#gen = :gen', ...sets].join(', ')}`,
          ConditionExpression: conditions.join(' AND '),
          ExpressionAttributeNames: names,
          ExpressionAttributeValues: values,
        },
      },
    };
  }

  /**
   * Changes a volume account's custom quota, which replaces its tier's limits dimension by dimension: the
   * dimensions `change` names take its values (null: the tier's again), the others keep theirs (mergeQuota); a null
   * `change` clears the whole quota. What the account spent carries into the new limits. Returns the quota now set.
   *
   * The merge reads, then writes on condition that the profile's generation is still the one read: a change that
   * commits in between (another operator's, the first top-up's) is read and merged into, never overwritten.
   */
  async setQuota(
    accountId: string,
    change: QuotaChange | null,
    atMs: number,
  ): Promise<Partial<Limits> | null> {
    for (let attempt = 1; attempt <= SETTLE_ATTEMPTS; attempt++) {
      // What the callback planned from the profile it read (an object: TypeScript does not see a closure assign).
      const planned: { gen: number; quota: Partial<Limits> | null } = { gen: 0, quota: null };
      const limits = await this.#limitsChange(accountId, atMs * 1000, (current) => {
        const quota = change === null ? null : mergeQuota(current.quota, change);
        // The merged quota, not only the values given, is what the buckets must enforce as written.
        for (const d of DIMENSIONS) {
          const value = quota?.[d];
          const problem = value === undefined ? null : quotaProblem(d, value);
          if (problem) throw new QuotaError(problem);
        }
        planned.gen = current.limitsGen;
        planned.quota = quota;
        return sameQuota(current.quota, quota) ? null : { tier: current.tier, quota };
      });
      if (!limits.exists) throw new Error(`No account ${accountId}`);
      // No change: no new generation either, which would send every instance's admissions back to the profile.
      if (!limits.buckets) return planned.quota;
      const { quota } = planned;
      const values: Record<string, AttributeValue> = { ':gen': N(limits.gen) };
      if (quota) {
        values[':quota'] = {
          M: Object.fromEntries(
            DIMENSIONS.flatMap((d) => (quota[d] === undefined ? [] : [[d, N(quota[d])]])),
          ),
        };
      }
      const items: TransactWriteItem[] = [
        {
          Update: {
            TableName: this.#tables.accounts,
            Key: { pk: S(accountKey(accountId)), sk: S('profile') },
            UpdateExpression: quota ? 'SET quota = :quota, #gen = :gen' : 'SET #gen = :gen REMOVE quota',
            ConditionExpression: `attribute_exists(pk) AND ${sameGeneration(planned.gen, values, ':seenGen')}`,
            ExpressionAttributeNames: { '#gen': LIMITS_GEN },
            ExpressionAttributeValues: values,
            ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          },
        },
        limits.buckets,
      ];
      try {
        await this.#client.send(new TransactWriteItemsCommand({ TransactItems: items }));
        return quota;
      } catch (error) {
        if (!(error instanceof TransactionCanceledException)) throw error;
        const [profile] = error.CancellationReasons ?? [];
        if (failed(profile) && !profile?.Item) throw new Error(`No account ${accountId}`);
        // The profile or the buckets changed since they were read: read them again and merge into what is there.
        await this.#sleep(Math.random() * 10 * 2 ** attempt);
      }
    }
    throw new Error(`quota of ${accountId} did not change after ${SETTLE_ATTEMPTS} attempts`);
  }

  /**
   * Credits a top-up (nano-USD) once per payment reference, collects what the account owes, and makes the
   * account trusted — permanently (spec §3). Returns false when the reference was already credited.
   */
  async topUp(input: { accountId: string; amount: number; reference: string; at: number }): Promise<boolean> {
    for (let attempt = 1; attempt <= SETTLE_ATTEMPTS; attempt++) {
      const [{ Item: marker }, before] = await Promise.all([
        this.#client.send(
          new GetItemCommand({
            TableName: this.#tables.wallet,
            Key: { pk: S(`topup#${input.reference}`), sk: S('topup') },
            ConsistentRead: true,
          }),
        ),
        this.wallet(input.accountId),
      ]);
      // A payment already credited is answered as such before its amount is checked against the wallet: the retry
      // of a top-up that filled the wallet to its ceiling must read "already credited", not "no room".
      if (marker && this.#creditedBefore(marker, input)) return false;
      const { collected, credited } = applyTopUp(input.amount, before.owed, before.balance);
      const account = accountKey(input.accountId);
      // The first top-up makes the account trusted: what it spent carries into the trusted limits.
      const change = await this.#limitsChange(input.accountId, input.at * 1000, (current) =>
        current.tier === 'trusted' ? null : { tier: 'trusted', quota: current.quota },
      );
      const upgrade = change.buckets;
      const items: TransactWriteItem[] = [
        {
          Put: {
            TableName: this.#tables.wallet,
            Item: {
              pk: S(`topup#${input.reference}`),
              sk: S('topup'),
              accountId: S(input.accountId),
              amount: N(input.amount),
              at: N(input.at),
            },
            ConditionExpression: 'attribute_not_exists(pk)',
            ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          },
        },
        {
          Update: {
            TableName: this.#tables.wallet,
            Key: walletKey(input.accountId),
            UpdateExpression:
              'SET balance = if_not_exists(balance, :zero) + :credited, available = if_not_exists(available, :zero) + :credited, owed = :owed',
            // What is owed must be what we read, or the collection above would be wrong; and the balance must
            // still leave room for the credit (a concurrent top-up may have used it: re-read and re-check).
            ConditionExpression: `(${
              before.owed === 0 ? 'attribute_not_exists(owed) OR owed = :zero' : 'owed = :seen'
            }) AND (attribute_not_exists(balance) OR balance <= :room)`,
            ExpressionAttributeValues: {
              ':zero': N(0),
              ':credited': N(credited),
              ':room': N(MAX_BALANCE_NANO - credited),
              ':owed': N(before.owed - collected),
              ...(before.owed === 0 ? {} : { ':seen': N(before.owed) }),
            },
          },
        },
        {
          Put: {
            TableName: this.#tables.wallet,
            Item: {
              pk: S(account),
              sk: S(ledgerSk(input.at, `topup#${input.reference}`)),
              kind: S('credit'),
              amount: N(input.amount),
              owed: N(0),
              reference: S(input.reference),
              at: N(input.at),
            },
          },
        },
        {
          Update: {
            TableName: this.#tables.accounts,
            Key: { pk: S(account), sk: S('profile') },
            UpdateExpression: `SET tier = :trusted, trustedAt = if_not_exists(trustedAt, :now)${
              upgrade ? `, ${LIMITS_GEN} = :gen` : ''
            }`,
            ConditionExpression: 'attribute_exists(pk)',
            ExpressionAttributeValues: {
              ':trusted': S('trusted'),
              ':now': S(new Date(input.at).toISOString()),
              ...(upgrade ? { ':gen': N(change.gen) } : {}),
            },
          },
        },
      ];
      const upgradeAt = upgrade ? items.push(upgrade) - 1 : -1;
      if (collected > 0) {
        items.push({
          Put: {
            TableName: this.#tables.wallet,
            Item: {
              pk: S(account),
              sk: S(ledgerSk(input.at, `topup#${input.reference}#arrears`)),
              kind: S('arrears'),
              amount: N(collected),
              owed: N(0),
              reference: S(input.reference),
              at: N(input.at),
            },
          },
        });
      }
      try {
        await this.#client.send(new TransactWriteItemsCommand({ TransactItems: items }));
        return true;
      } catch (error) {
        if (!(error instanceof TransactionCanceledException)) throw error;
        const reasons = error.CancellationReasons ?? [];
        // Credited since the marker was read (a concurrent retry of the same payment), or the reference reused.
        if (failed(reasons[0]) && this.#creditedBefore(reasons[0]?.Item ?? {}, input)) return false;
        if (failed(reasons[3])) throw new Error(`No account ${input.accountId}`);
        // An admission moved the buckets since they were read for the upgrade: read them again.
        if (contended(reasons) || failed(reasons[1]) || (upgradeAt >= 0 && failed(reasons[upgradeAt]))) {
          await this.#sleep(Math.random() * 10 * 2 ** attempt);
          continue;
        }
        throw error;
      }
    }
    throw new Error(`top-up ${input.reference} did not commit after ${SETTLE_ATTEMPTS} attempts`);
  }

  /**
   * Whether a top-up's payment reference marker (`topup#<reference>`) records this very payment: then it was
   * credited already and there is nothing to do. The same reference for another account or amount is another
   * payment under a reused reference, which must not pass silently as "already credited": TopUpReferenceError.
   */
  #creditedBefore(
    marker: Record<string, AttributeValue>,
    input: { accountId: string; amount: number; reference: string },
  ): true {
    if (marker.accountId?.S !== input.accountId || Number(marker.amount?.N) !== input.amount)
      throw new TopUpReferenceError(input.reference);
    return true;
  }

  async wallet(accountId: string): Promise<WalletState> {
    const { Item } = await this.#client.send(
      new GetItemCommand({ TableName: this.#tables.wallet, Key: walletKey(accountId), ConsistentRead: true }),
    );
    return walletOf(Item);
  }

  /** The wallet with its open holds and its whole ledger (operators and tests). */
  async report(accountId: string): Promise<WalletReport> {
    const holds: WalletReport['holds'] = [];
    const ledger: WalletReport['ledger'] = [];
    const pages = paginateQuery(
      { client: this.#client },
      {
        TableName: this.#tables.wallet,
        KeyConditionExpression: 'pk = :pk',
        ExpressionAttributeValues: { ':pk': S(accountKey(accountId)) },
        ConsistentRead: true,
      },
    );
    let wallet: WalletState = { balance: 0, available: 0, owed: 0 };
    for await (const page of pages) {
      for (const item of page.Items ?? []) {
        const sk = item.sk?.S ?? '';
        if (sk === 'wallet') wallet = walletOf(item);
        else if (sk.startsWith('hold#')) {
          holds.push({
            requestId: sk.slice(5),
            amount: num(item.amount),
            expiresAt: num(item.holdExpiresAt),
          });
        } else if (sk.startsWith('ledger#')) {
          ledger.push({
            at: num(item.at),
            kind: (item.kind?.S ?? 'debit') as 'credit' | 'debit' | 'arrears',
            amount: num(item.amount),
            owed: num(item.owed),
            reference: item.reference?.S ?? '',
          });
        }
      }
    }
    return { ...wallet, holds, ledger };
  }
}

/** Σ credits − Σ debits of a ledger: must equal the balance, always. */
export const ledgerBalance = (ledger: WalletReport['ledger']): number =>
  ledger.reduce((sum, entry) => sum + (entry.kind === 'credit' ? entry.amount : -entry.amount), 0);
