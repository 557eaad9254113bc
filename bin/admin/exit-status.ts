import { contended } from '#adapters/transaction-contention.ts';
/**
 * The admin CLI's exit status, so that a script can tell what to do next (sysexits.h's numbers):
 * - 2: the command line is wrong (a usage error), or a value in it refused (an unknown account or key prefix, a bad
 *   amount, a taken id, an unreadable file); running it again changes nothing;
 * - 75 (EX_TEMPFAIL): the store could not be reached, or was busy, throttled or failing on its side; running the same
 *   command again later may succeed — and every command may be rerun: a top-up happens once per reference, a replay
 *   settles each record once, the others read or set a state;
 * - 1: any other failure (a missing table, the store refusing a write): it will fail again.
 */
export const EXIT_USAGE = 2;
export const EXIT_TRANSIENT = 75;
export const EXIT_FAILED = 1;

/** AWS errors that say "not now" rather than "not this". */
const TRANSIENT_NAMES: ReadonlySet<string> = new Set([
  'TimeoutError',
  'RequestTimeout',
  'ThrottlingException',
  'ProvisionedThroughputExceededException',
  'RequestLimitExceeded',
  'TransactionConflictException',
  'InternalServerError',
  'ServiceUnavailable',
  'ServiceUnavailableException',
]);

/** Network failures: nothing answered, or the answer was cut. */
const TRANSIENT_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EAI_AGAIN',
  'ENETUNREACH',
  'EHOSTUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_SOCKET',
]);

/** Whether `error` says the store could not be reached or was busy: a later run may succeed. */
export const isTransient = (error: unknown, depth = 0): boolean => {
  if (typeof error !== 'object' || error === null || depth > 4) return false;
  const e = error as {
    name?: unknown;
    code?: unknown;
    cause?: unknown;
    $retryable?: unknown;
    $metadata?: { httpStatusCode?: unknown };
  };
  if (e.$retryable) return true;
  const status = e.$metadata?.httpStatusCode;
  if (typeof status === 'number' && (status >= 500 || status === 429)) return true;
  if (typeof e.name === 'string' && TRANSIENT_NAMES.has(e.name)) return true;
  if (typeof e.code === 'string' && TRANSIENT_CODES.has(e.code)) return true;
  // A transaction another write got in the way of, or throttled (its reasons say so): it may pass when run again.
  const reasons = (error as { CancellationReasons?: { Code?: string }[] }).CancellationReasons;
  if (Array.isArray(reasons) && contended(reasons)) return true;
  // Node's connection attempts to every address of a host fail together as one AggregateError.
  if (error instanceof AggregateError && error.errors.some((inner) => isTransient(inner, depth + 1)))
    return true;
  return isTransient(e.cause, depth + 1);
};
