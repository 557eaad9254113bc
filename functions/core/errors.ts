/**
 * Named errors of the API. Each carries its HTTP status and serialises to the OpenAI error shape
 * `{"error":{"message","type","param","code"}}`; one middleware turns them into responses
 * (`functions/http/error-handler.ts`), so nothing else decides status codes or bodies.
 */

export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export interface ApiErrorOptions {
  param?: string | null;
  headers?: Record<string, string>;
  cause?: unknown;
}

export abstract class ApiError extends Error {
  abstract readonly status: number;
  abstract readonly type: string;
  readonly code: string | null;
  readonly param: string | null;
  /** Extra response headers, e.g. `retry-after` on a 429. */
  readonly headers: Record<string, string>;

  constructor(message: string, code: string | null, options: ApiErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.param = options.param ?? null;
    this.headers = options.headers ?? {};
  }

  /** Extra top-level fields for the error object (e.g. the 402's balance figures). */
  protected details(): Record<string, unknown> {
    return {};
  }

  toJSON(): ErrorBody {
    return {
      error: {
        message: this.message,
        type: this.type,
        param: this.param,
        code: this.code,
        ...this.details(),
      },
    };
  }
}

/** 400: the request itself is wrong — whitelist, types, ranges, malformed JSON. */
export class InvalidRequestError extends ApiError {
  override readonly name = 'InvalidRequestError';
  readonly status = 400;
  readonly type = 'invalid_request_error';
}

/** 401: missing, malformed, unknown or revoked API key. The message never says which. */
export class AuthenticationError extends ApiError {
  override readonly name = 'AuthenticationError';
  readonly status = 401;
  readonly type = 'invalid_request_error';
  constructor(
    message = 'Incorrect API key provided. Pass a valid key as "Authorization: Bearer svc_live_…".',
  ) {
    super(message, 'invalid_api_key');
  }
}

/** 404 on an unknown model id. */
export class ModelNotFoundError extends ApiError {
  override readonly name = 'ModelNotFoundError';
  readonly status = 404;
  readonly type = 'invalid_request_error';
  constructor(model: string, reason = 'does not exist') {
    // The id is the caller's: cut short, so an absurd one does not come back (and into the record) whole.
    const shown = model.length <= 256 ? model : `${model.slice(0, 256)}…`;
    super(`The model \`${shown}\` ${reason}.`, 'model_not_found', { param: 'model' });
  }
}

/** 404/405 on a path or method the API does not serve. */
export class RouteNotFoundError extends ApiError {
  override readonly name = 'RouteNotFoundError';
  readonly status = 404;
  readonly type = 'invalid_request_error';
  constructor(method: string, path: string) {
    super(`Unknown request URL: ${method} ${path}.`, 'unknown_url');
  }
}

/** 413: the body is over the documented limit; it was not parsed. */
export class RequestTooLargeError extends ApiError {
  override readonly name = 'RequestTooLargeError';
  readonly status = 413;
  readonly type = 'invalid_request_error';
  constructor(limitBytes: number) {
    super(`Request body exceeds the ${limitBytes} byte limit.`, 'request_too_large');
  }
}

/** 429 from every upstream deployment of the model: the model is busy. Same wording as the upstream's. */
export class EngineOverloadedError extends ApiError {
  override readonly name = 'EngineOverloadedError';
  readonly status = 429;
  readonly type = 'invalid_request_error';
  constructor(options: ApiErrorOptions = {}) {
    super(
      'The model is currently busy with other requests. Please retry later.',
      'engine_overloaded',
      options,
    );
  }
}

/** 500: an upstream or platform fault that fallbacks could not absorb. Details stay in the logs. */
export class UpstreamFaultError extends ApiError {
  override readonly name: string = 'UpstreamFaultError';
  readonly status = 500;
  readonly type = 'server_error';
  constructor(
    message = 'The upstream provider failed to complete the request. Please retry.',
    cause?: unknown,
  ) {
    super(message, null, { cause });
  }
}

/**
 * 500: the call ran into the longest time it may take (its function's, or the time what is in front of the
 * function waits for a response to begin) before any upstream answered. Not the upstreams' failure — they may
 * still have been working — so health ignores its attempts and the usage report files it under `platform`.
 */
export class DeadlineError extends UpstreamFaultError {
  override readonly name = 'DeadlineError';
}

/** 500 for anything unexpected; the message is generic on purpose (secrets may be in the cause). */
export class InternalError extends ApiError {
  override readonly name = 'InternalError';
  readonly status = 500;
  readonly type = 'server_error';
  constructor(cause?: unknown) {
    super('The server had an error while processing your request.', null, { cause });
  }
}

/**
 * Why a 503 happened. The client sees the same body for all three; the usage report does not: an empty
 * registry or a model nothing can serve is an incident (ADR 0008), an unreachable store is a platform fault.
 */
export type UnavailableReason = 'registry_empty' | 'no_eligible_model' | 'circuits_open' | 'accounting';

/**
 * 503: nothing can serve the request — no eligible deployment, an empty registry, or the accounting
 * store is unreachable (we fail closed rather than serve unmetered). The code follows ARCHITECTURE.md §8.
 */
export class ServiceUnavailableError extends ApiError {
  override readonly name = 'ServiceUnavailableError';
  readonly status = 503;
  readonly type = 'service_unavailable';
  readonly reason: UnavailableReason;
  constructor(
    message: string,
    cause?: unknown,
    reason: UnavailableReason = 'no_eligible_model',
    headers: Readonly<Record<string, string>> = { 'retry-after': '1' },
  ) {
    super(message, 'no_eligible_model', { cause, headers: { ...headers } });
    this.reason = reason;
  }
}

/**
 * When to come back, as clients read it: `Retry-After` in whole seconds (at least 1, as SDKs floor to it anyway)
 * and OpenAI's precise `retry-after-ms`.
 */
export const retryAfterHeaders = (ms: number): Record<string, string> => ({
  'retry-after': String(Math.max(1, Math.ceil(ms / 1000))),
  'retry-after-ms': String(Math.ceil(ms)),
});

/** 429: the account's own limit (spec §8), with `Retry-After` and the `x-ratelimit-*` headers. */
export class RateLimitError extends ApiError {
  override readonly name = 'RateLimitError';
  readonly status = 429;
  readonly type: 'requests' | 'tokens';
  constructor(type: 'requests' | 'tokens', message: string, headers: Record<string, string>) {
    super(message, 'rate_limit_exceeded', { headers });
    this.type = type;
  }
}

export interface BalanceDetails {
  /** USD. */
  readonly balance: number;
  /** USD: balance minus open holds. */
  readonly available: number;
  /** USD this call needs held: its worst-case cost. */
  readonly required: number;
  /** Largest `max_tokens` the available amount covers for this request (chat only), 0 if none. */
  readonly maxAffordableMaxTokens: number | null;
}

/** 402: the wallet cannot cover the call's worst-case cost. The body says by how much. */
export class InsufficientBalanceError extends ApiError {
  override readonly name = 'InsufficientBalanceError';
  readonly status = 402;
  readonly type = 'insufficient_balance';
  readonly balance: BalanceDetails;
  constructor(details: BalanceDetails, headers: Record<string, string>) {
    const affordable =
      details.maxAffordableMaxTokens === null
        ? ''
        : details.maxAffordableMaxTokens > 0
          ? ` The available amount covers max_tokens up to ${details.maxAffordableMaxTokens}.`
          : '';
    super(
      `Insufficient balance: this request needs ${details.required.toFixed(9)} USD available; the wallet has ${details.available.toFixed(9)} USD available (balance ${details.balance.toFixed(9)} USD).${affordable} Top up to continue.`,
      'insufficient_balance',
      { headers },
    );
    this.balance = details;
  }

  protected override details(): Record<string, unknown> {
    return {
      balance_usd: this.balance.balance,
      available_usd: this.balance.available,
      required_usd: this.balance.required,
      max_affordable_max_tokens: this.balance.maxAffordableMaxTokens,
    };
  }
}
