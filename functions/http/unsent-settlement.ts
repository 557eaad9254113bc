/**
 * The log lines of a settlement record that may not have reached the queue: the record is logged whole, and the
 * only trace of a charge until it is replayed (`npm run admin -- settlements replay`). Both begin with one prefix,
 * which the deployed stack's metric filter and alarm match (lib/gateway-function.ts): an operator is paged, not
 * left to find them when the sweeper has already released the holds.
 */
export const UNSENT_SETTLEMENT_PREFIX = 'settlement record not';

export const UNSENT_SETTLEMENT = {
  failed: `${UNSENT_SETTLEMENT_PREFIX} sent`,
  unacknowledged: `${UNSENT_SETTLEMENT_PREFIX} acknowledged before the invocation ends; replay it if missing`,
} as const;
