import middy from '@middy/core';
import type { SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import { faultyAsyncStream } from 'aws-lambda-stream/utils/faults';
import { toPromise } from 'aws-lambda-stream/utils/handler';
import _ from 'highland';
import { parseSettlementMessage } from '#adapters/settlement-codec.ts';
import { planSettlement } from '#core/settlement.ts';
import { type Container, containerFromEnv } from './container.ts';

interface Unit {
  readonly record: SQSRecord;
}

interface Fault extends Error {
  uow?: Unit;
}

/**
 * What a message's settlement must have left of the invocation to be started: a record's transaction may retry
 * for seconds against a slow or throttled store, and an invocation the timeout ends returns the whole batch —
 * messages it had settled too — to the queue, each a receive nearer the dead-letter queue.
 */
export const SETTLE_START_MARGIN_MS = 10_000;

/**
 * The settlement consumer (SQS, `ReportBatchItemFailures`). Each record is one transaction (see
 * DynamoAccounting.settle); a message carries one record or several (settlement-codec.ts). A message that
 * fails — poison, or a store fault on any of its records — is reported in `batchItemFailures`, stays on the
 * queue, is retried after the visibility timeout, and after five receives goes to the dead-letter queue. Its
 * other records are settled anyway: on a retry they are duplicates, which settle nothing twice. Everything
 * else in the batch is acknowledged.
 *
 * Built with aws-lambda-stream's fault tagging over a highland stream, without its default fault handler:
 * that one publishes faults to EventBridge and acknowledges the message, which would lose the settlement.
 */
export const createHandler = (container: () => Container) =>
  middy<SQSEvent, SQSBatchResponse>().handler(async (event, context) => {
    const c = container();
    const failures = new Set<string>();
    const settle = async (unit: Unit) => {
      // Not started this late: reported failed, the message comes back after its visibility timeout.
      if (context.getRemainingTimeInMillis() < SETTLE_START_MARGIN_MS)
        throw new Error(
          `settlement of message ${unit.record.messageId} not started: the invocation is ending`,
        );
      const { records, invalid } = parseSettlementMessage(unit.record.body);
      let failure: unknown =
        invalid > 0 ? new Error(`${invalid} entries of the message are not settlement records`) : null;
      for (const record of records) {
        try {
          const outcome = await c.accounting.settle(planSettlement(record, c.clock.now()));
          if (outcome === 'duplicate') c.log.info('settlement already applied', { settlementId: record.id });
        } catch (error) {
          failure ??= error;
        }
      }
      // A fresh error per message: fault tagging sets `uow` on the thrown object, and a store error shared by several
      // messages (one failed SDK promise that every waiting call rejects with) would carry only the last message
      // tagged — the others would be acknowledged unsettled.
      if (failure !== null)
        throw new Error(`settlement of message ${unit.record.messageId} failed`, { cause: failure });
    };
    await toPromise(
      _<Unit>(event.Records.map((record) => ({ record })))
        .map(faultyAsyncStream(settle))
        .parallel(c.config.settlementParallelism)
        .errors((error: Fault, push) => {
          const messageId = error.uow?.record.messageId;
          // Untagged errors are not about one message: fail the whole batch rather than guess.
          if (messageId === undefined) return push(error);
          failures.add(messageId);
          c.log.warn('settlement failed; the message will be retried', { messageId, error });
        }),
    );
    return { batchItemFailures: [...failures].map((itemIdentifier) => ({ itemIdentifier })) };
  });

export const handler = createHandler(containerFromEnv);
