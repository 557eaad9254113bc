/**
 * The shared pipeline of every API endpoint: body, auth, call recording, fault resolution, latency and
 * error injection. An endpoint only has to parse its body and write its success response, which is what
 * makes new endpoints (embeddings, audio, Anthropic Messages, ...) cheap to add; one from another provider
 * family also names its {@link ApiDialect} (authentication and error wording).
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { CallLog } from '#sim/calls.ts';
import {
  INVALID_API_KEY_ERROR,
  INVALID_JSON_ERROR,
  invalidRequestError,
  MISSING_API_KEY_ERROR,
  type OpenAiErrorBody,
  OVERLOADED_ERROR,
  SERVER_ERROR,
} from '#sim/errors.ts';
import {
  type FaultPlan,
  type FaultStore,
  FaultSyntaxError,
  type RequestDirectives,
  readHeaderDirectives,
  resolveFaultPlan,
} from '#sim/faults.ts';
import { BodyTooLargeError, bearerKey, type Exchange, parseJson, readBody, sendJson } from '#sim/http.ts';
import { escapeRegExp, PROVIDER_PATTERN, type Route } from '#sim/router.ts';

/** Provider name of calls made without a `/p/<provider>` prefix. */
export const DEFAULT_PROVIDER = 'default';

/** A parsed, valid API request, ready to be answered once faults and delays have been applied. */
export interface ApiCall {
  model: string;
  stream: boolean;
  /** Inline directives found in the request content (see faults.ts), or null. */
  directives: RequestDirectives | null;
  /** The parsed request body, kept in the call log so tests can see what a gateway sent upstream. */
  body?: unknown;
  /** Writes the success response, honouring `plan.chunkDelayMs` and a `drop_mid` error. */
  respond(ex: Exchange, plan: FaultPlan): void | Promise<void>;
}

/** An HTTP error to send instead of serving a request, with what is known for the call log. */
export interface ApiRejection {
  status: number;
  /** The error body, in the endpoint's dialect (OpenAI's unless the endpoint says otherwise). */
  error: OpenAiErrorBody | object;
  model?: string;
  stream?: boolean;
}

/** An error status and body, as one provider dialect words it. */
export interface DialectError {
  status: number;
  body: object;
}

/**
 * How a provider's API authenticates and words its errors. The pipeline (faults, delays, call log) is the
 * same for every provider; only this differs. OpenAI's is the default ({@link OPENAI_DIALECT}).
 */
export interface ApiDialect {
  /** The caller's key (recorded, and matched against a fault spec's `keys`), or the error to answer with. */
  authenticate(headers: IncomingHttpHeaders): string | DialectError;
  /** What the injected `overloaded`, `server_error` and `unauthorized` faults answer with. */
  overloaded: DialectError;
  serverError: DialectError;
  unauthorized: DialectError;
  /** A 400 body for a malformed directive or header, and a 413 body for an oversized request. */
  invalidRequest(message: string): object;
}

/** OpenAI's dialect: `Authorization: Bearer`, 429 `engine_overloaded`, OpenAI-shaped error bodies. */
export const OPENAI_DIALECT: ApiDialect = Object.freeze({
  authenticate: (headers: IncomingHttpHeaders) =>
    bearerKey(headers.authorization) ?? { status: 401, body: MISSING_API_KEY_ERROR },
  overloaded: { status: 429, body: OVERLOADED_ERROR },
  serverError: { status: 500, body: SERVER_ERROR },
  unauthorized: { status: 401, body: INVALID_API_KEY_ERROR },
  invalidRequest: (message: string) => invalidRequestError(message),
});

/** One API endpoint, served at `/v1<path>` and `/p/<provider>/v1<path>`. */
export interface ApiEndpoint {
  method: 'GET' | 'POST';
  /** Path below the provider prefix, starting with `/v1/`. */
  path: string;
  /** Authentication and error wording; OpenAI's when absent. */
  dialect?: ApiDialect;
  /**
   * Validates the raw body; may throw {@link FaultSyntaxError} for a malformed inline directive. May be
   * asynchronous, for bodies that need asynchronous decoding (multipart forms, audio metadata).
   */
  parse(body: Buffer, ex: Exchange): ApiCall | ApiRejection | Promise<ApiCall | ApiRejection>;
}

/** Simulator-wide state the pipeline needs. */
export interface ApiContext {
  faults: FaultStore;
  calls: CallLog;
  /** Latency added to every API call. */
  latencyMs: number;
}

/** Runs one API request through the shared pipeline. */
export async function handleApiRequest(
  ex: Exchange,
  endpoint: ApiEndpoint,
  provider: string,
  context: ApiContext,
): Promise<void> {
  const at = Date.now();
  const dialect = endpoint.dialect ?? OPENAI_DIALECT;
  const auth = dialect.authenticate(ex.req.headers);
  const key = typeof auth === 'string' ? auth : null;
  const record = (model: string, stream: boolean, fault: string | null, requestBody: unknown = null): void =>
    context.calls.record({ provider, path: endpoint.path, model, key, stream, fault, at, body: requestBody });

  let body: Buffer;
  try {
    body = await readBody(ex.req);
  } catch (error) {
    record('', false, null);
    if (error instanceof BodyTooLargeError) sendJson(ex, 413, dialect.invalidRequest(error.message));
    else ex.drop();
    return;
  }

  let call: ApiCall | ApiRejection;
  let headerDirectives: RequestDirectives | null;
  try {
    const parsed = endpoint.parse(body, ex);
    // Only asynchronous endpoints pay for an await; chat stays on the synchronous hot path.
    call = parsed instanceof Promise ? await parsed : parsed;
    headerDirectives = readHeaderDirectives(ex.req.headers);
  } catch (error) {
    if (!(error instanceof FaultSyntaxError)) throw error;
    record('', false, null);
    sendJson(ex, 400, dialect.invalidRequest(error.message));
    return;
  }
  if ('error' in call) {
    record(call.model ?? '', call.stream ?? false, null);
    sendJson(ex, call.status, call.error);
    return;
  }
  if (typeof auth !== 'string') {
    record(call.model, call.stream, null);
    sendJson(ex, auth.status, auth.body);
    return;
  }

  // Header directives are applied last so a benchmark's explicit headers always win.
  const plan = resolveFaultPlan(context.faults.take(provider, key), call.directives, headerDirectives);
  record(call.model, call.stream, plan.error, call.body ?? null);

  // Both delays elapse before the status line: "latency" models queueing, "first byte" a slow start.
  const wait = context.latencyMs + plan.latencyMs + plan.firstByteDelayMs;
  if (wait > 0 && !(await ex.sleep(wait))) return;

  switch (plan.error) {
    case 'overloaded':
      return sendJson(ex, dialect.overloaded.status, dialect.overloaded.body);
    case 'server_error':
      return sendJson(ex, dialect.serverError.status, dialect.serverError.body);
    case 'unauthorized':
      return sendJson(ex, dialect.unauthorized.status, dialect.unauthorized.body);
    case 'drop_before':
      return ex.drop();
    case 'error_mid':
      // An error event needs an event stream; anything else fails as a whole.
      if (!call.stream) return sendJson(ex, dialect.serverError.status, dialect.serverError.body);
      return call.respond(ex, plan);
    default:
      // null and drop_mid: the endpoint writes the response, truncating it for drop_mid.
      return call.respond(ex, plan);
  }
}

/**
 * Routes an endpoint at both `/v1/...` (provider `default`) and `/p/<provider>/v1/...`, the base URL
 * shape the gateway gives each deployment.
 */
export function createApiRoute(endpoint: ApiEndpoint, context: ApiContext): Route {
  return {
    method: endpoint.method,
    pattern: new RegExp(`^(?:/p/(${PROVIDER_PATTERN}))?${escapeRegExp(endpoint.path)}$`),
    handle: (ex, [provider = DEFAULT_PROVIDER]) => handleApiRequest(ex, endpoint, provider, context),
  };
}

/**
 * The start every JSON endpoint shares: the body must be a JSON object naming a model. Returns the body and
 * model, or the 400 an upstream sends otherwise.
 */
export function parseModelRequest(
  raw: Buffer,
): { body: Record<string, unknown>; model: string } | ApiRejection {
  const body = parseJson(raw);
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return { status: 400, error: INVALID_JSON_ERROR };
  }
  const record = body as Record<string, unknown>;
  const model = typeof record.model === 'string' ? record.model : '';
  if (model === '') return { status: 400, error: invalidRequestError('you must provide a model parameter') };
  return { body: record, model };
}
