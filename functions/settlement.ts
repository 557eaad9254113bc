import middy from '@middy/core';
import type { SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import { faultyAsyncStream } from 'aws-lambda-stream/utils/faults';
import { toPromise } from 'aws-lambda-stream/utils/handler';
import _ from 'highland';
import { parseSettlementRecord } from '#adapters/settlement-codec.ts';
import { planSettlement } from '#core/settlement.ts';
import { type Container, containerFromEnv } from './container.ts';

interface Unit {
  readonly record: SQSRecord;
}

interface Fault extends Error {
  uow?: Unit;
}

/**
 * The settlement consumer (SQS, `ReportBatchItemFailures`). Each message is one transaction (see
 * DynamoAccounting.settle). A message that fails — poison or a store fault — is reported in
 * `batchItemFailures`, stays on the queue, is retried after the visibility timeout, and after five receives
 * goes to the dead-letter queue. Everything else in the batch is acknowledged.
 *
 * Built with aws-lambda-stream's fault tagging over a highland stream, without its default fault handler:
 * that one publishes faults to EventBridge and acknowledges the message, which would lose the settlement.
 */
export const createHandler = (container: () => Container) =>
  middy<SQSEvent, SQSBatchResponse>().handler(async (event) => {
    const c = container();
    const failures = new Set<string>();
    const settle = async (unit: Unit) => {
      const record = parseSettlementRecord(unit.record.body);
      const outcome = await c.accounting.settle(planSettlement(record));
      if (outcome === 'duplicate') c.log.info('settlement already applied', { settlementId: record.id });
      return outcome;
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
