import { describe, expect, it } from 'vitest';
import { isTransient } from '#adapters/transient-errors.ts';

const aws = (name: string, extra: Record<string, unknown> = {}) =>
  Object.assign(new Error(name), { name, ...extra });

describe('isTransient (exit status 75: run it again)', () => {
  it('takes throttling, conflicts, the store’s own failures and unreachable stores for temporary', () => {
    for (const error of [
      aws('ThrottlingException'),
      aws('ProvisionedThroughputExceededException'),
      aws('TransactionConflictException'),
      aws('InternalServerError'),
      aws('SomethingNew', { $retryable: { throttling: true } }),
      aws('SomethingElse', { $metadata: { httpStatusCode: 503 } }),
      aws('TooMany', { $metadata: { httpStatusCode: 429 } }),
      Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9'), { code: 'ECONNREFUSED' }),
      new Error('fetch failed', { cause: Object.assign(new Error('x'), { code: 'ETIMEDOUT' }) }),
      new AggregateError([Object.assign(new Error(''), { code: 'ECONNREFUSED' })], ''),
      // A transaction cancelled because another write got in the way, not because a condition failed.
      aws('TransactionCanceledException', {
        $metadata: { httpStatusCode: 400 },
        CancellationReasons: [{ Code: 'None' }, { Code: 'TransactionConflict' }],
      }),
      // …or because an item was throttled.
      aws('TransactionCanceledException', {
        $metadata: { httpStatusCode: 400 },
        CancellationReasons: [{ Code: 'ThrottlingError' }, { Code: 'None' }],
      }),
    ])
      expect(isTransient(error), `${error.name}: ${error.message}`).toBe(true);
  });

  it('takes what will fail again for permanent', () => {
    for (const error of [
      aws('ResourceNotFoundException', { $metadata: { httpStatusCode: 400 } }),
      aws('ConditionalCheckFailedException', { $metadata: { httpStatusCode: 400 } }),
      aws('TransactionCanceledException', {
        $metadata: { httpStatusCode: 400 },
        CancellationReasons: [{ Code: 'ConditionalCheckFailed' }, { Code: 'None' }],
      }),
      aws('ValidationException', { $metadata: { httpStatusCode: 400 } }),
      aws('AccessDeniedException', { $metadata: { httpStatusCode: 403 } }),
      new Error('account acct_x not found'),
      Object.assign(new Error('ENOENT: no such file'), { code: 'ENOENT' }),
      'a string',
      null,
    ])
      expect(isTransient(error), String(error)).toBe(false);
  });
});
