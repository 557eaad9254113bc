import { CallRecorder } from '#core/call-recorder.ts';
import { ENDPOINT_PATHS } from '#core/endpoints.ts';
import { ApiError, InvalidRequestError } from '#core/errors.ts';
import { countUpstreamCalls } from '#core/fallback.ts';
import type { SettlementSink } from '#core/ports.ts';
import type { ModelKind } from '#core/registry.ts';
import type { Endpoint, SettlementRecord } from '#core/settlement.ts';
import type { Usage } from '#core/usage.ts';
import type { Container } from '#functions/container.ts';
import { afterResponse } from './after-response.ts';
import { httpHandler } from './handler.ts';
import {
  type HttpEvent,
  type HttpResponse,
  header,
  jsonBody,
  type LambdaContext,
  requestIdOf,
} from './lambda.ts';
import { UNSENT_SETTLEMENT } from './unsent-settlement.ts';

export type InferenceFn = (
  event: HttpEvent,
  call: CallRecorder,
  container: Container,
) => Promise<HttpResponse>;

/**
 * The frame shared by every billed endpoint: a call recorder per request, error outcomes recorded, and
 * the settlement record sent to the queue after the response has ended — whatever the outcome.
 */
export const inferenceHandler = (endpoint: Endpoint, container: () => Container, fn: InferenceFn) =>
  httpHandler(
    async (event: HttpEvent, context: LambdaContext) => {
      const c = container();
      const call = new CallRecorder(endpoint, requestIdOf(context), c.clock);
      call.endBy = Date.now() + context.getRemainingTimeInMillis() - SETTLE_MARGIN_MS;
      call.firstByteBy = firstByteBy(event, c.config);
      afterResponse(context, () => settle(c, call, context.getRemainingTimeInMillis() - SEND_GRACE_MS));
      try {
        const response = await fn(event, call, c);
        call.responding();
        const timing = call.serverTiming();
        return {
          ...response,
          headers: {
            ...call.limitHeaders,
            ...servedBy(call),
            ...(timing ? { 'server-timing': timing } : {}),
            ...response.headers,
          },
        };
      } catch (error) {
        if (error instanceof InvalidRequestError) await noteNamedModel(event, call, c);
        call.failed(error);
        call.responding();
        // Limit headers from admission ride on errors too (a refusal sets its own, which win).
        if (error instanceof ApiError)
          Object.assign(error.headers, { ...call.limitHeaders, ...error.headers });
        throw error;
      }
    },
    () => container().log,
    ['POST'],
    // A preflight is answered once the container is built: a function that cannot start fails it (ADR 0009).
    container,
    ENDPOINT_PATHS[endpoint],
  );

/** The kind of model each endpoint serves. */
const KIND: Readonly<Record<Endpoint, ModelKind>> = {
  'chat.completions': 'chat',
  embeddings: 'embedding',
  'audio.transcriptions': 'transcription',
  'audio.speech': 'speech',
};

/**
 * A request refused as invalid before its model was resolved (a parameter off the whitelist) still named a
 * model: it is counted under it in the usage report when the catalog lists that model for this endpoint, and
 * under `-` otherwise — a string the catalog does not list never becomes a row (ADR 0008). Only for a caller with a
 * valid key (the key is checked before the body): the public report's rows must not be a count anyone could raise
 * without one. Reads the JSON body again, on this error path only; a body that is not JSON (a multipart upload)
 * names nothing here.
 */
const noteNamedModel = async (event: HttpEvent, call: CallRecorder, c: Container): Promise<void> => {
  if (call.model !== null || call.principal === null) return;
  try {
    const body = jsonBody(event, c.config.maxJsonBodyBytes);
    const id = typeof body === 'object' && body !== null && 'model' in body ? body.model : undefined;
    if (typeof id === 'string') call.model = (await c.registry.catalog()).named(id, KIND[call.endpoint]);
  } catch {
    // Not JSON, or no catalog to ask: the call stays under `-`, and the client gets the 400 all the same.
  }
};

/** Time kept at the end of an invocation to end a stream and send its settlement record. */
const SETTLE_MARGIN_MS = 10_000;

/**
 * When a call must begin its response, if something in front of the function stops waiting sooner than the
 * function runs; a call that went on past it would be served, and billed, to no one.
 * - The CDN gives up on an origin after its read timeout and answers the client 504 (which SDKs retry). CloudFront
 *   marks every origin request with `x-amz-cf-id` (a client that sets it itself only shortens its own wait).
 * - The REST API closes a streamed integration that stays silent past its idle timeout, and a non-stream call is
 *   silent until it is done. (Function URLs have no such limit: the function's own deadline bounds the call.)
 * The clocks in front start before ours: counted from when API Gateway received the request (`timeEpoch`, so a
 * cold start is inside it), with a few seconds kept for the way back.
 */
export const firstByteBy = (
  event: HttpEvent,
  limits: { readonly cdnReadTimeoutMs: number; readonly restApiIdleTimeoutMs: number },
): number | null => {
  const waits: number[] = [];
  if (limits.cdnReadTimeoutMs > 0 && header(event, 'x-amz-cf-id') !== undefined)
    waits.push(limits.cdnReadTimeoutMs);
  if (limits.restApiIdleTimeoutMs > 0 && event.via === 'rest-api') waits.push(limits.restApiIdleTimeoutMs);
  if (waits.length === 0) return null;
  const wait = Math.min(...waits);
  const now = Date.now();
  const received = event.requestContext?.timeEpoch;
  // Never later than now (a clock ahead of ours). A receipt older than the wait means the entry has given up
  // already: the deadline is past. Older than any function runs, it makes no sense and is ignored.
  const start =
    typeof received === 'number' && received <= now && received > now - MAX_FUNCTION_MS ? received : now;
  return start + Math.max(wait / 2, wait - ENTRY_MARGIN_MS);
};

const ENTRY_MARGIN_MS = 3_000;
/** Lambda's longest timeout. */
const MAX_FUNCTION_MS = 15 * 60_000;

/** Which deployment served the call, after how many upstream calls (ARCHITECTURE.md §8). */
const servedBy = (call: CallRecorder): Record<string, string> =>
  call.deployment
    ? {
        'x-svc-provider': call.deployment.provider,
        'x-svc-served-model': headerValue(call.deployment.upstreamModel),
        'x-svc-attempts': String(countUpstreamCalls(call.attempts)),
      }
    : {};

/**
 * A header value from registry text: visible ASCII as it is, anything else percent-encoded as UTF-8. A header the
 * runtime refuses fails the response after the upstream has served (and been paid) — no answer, no settlement.
 */
export const headerValue = (text: string): string => {
  // Visible ASCII and spaces as they are; with anything else (or a `%`, so an encoded name never reads as plain).
  if (/^[\x20-\x24\x26-\x7e]*$/.test(text)) return text;
  let encoded = '';
  for (const byte of Buffer.from(text, 'utf8')) {
    encoded +=
      byte > 0x20 && byte < 0x7f && byte !== 0x25
        ? String.fromCharCode(byte)
        : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return encoded;
};

/**
 * Logs a usage report held to what the call can be billed (ADR 0002): the excess is the provider's, for whoever
 * reconciles with it. Counts and ids only, nothing of the request. Nothing when the report was billed as it came.
 */
export const logHeldReport = (
  log: Pick<Container['log'], 'warn'>,
  call: CallRecorder,
  reported: Usage,
  billed: Usage,
): void => {
  if (reported.promptTokens === billed.promptTokens && reported.completionTokens === billed.completionTokens)
    return;
  log.warn('upstream reported more than the call can be billed; billed at its limits', {
    requestId: call.requestId,
    deployment: call.deployment?.id ?? null,
    reported: { promptTokens: reported.promptTokens, completionTokens: reported.completionTokens },
    billed: { promptTokens: billed.promptTokens, completionTokens: billed.completionTokens },
  });
};

/** Kept after the settlement send gives up waiting, for the log line and the invocation's end. */
const SEND_GRACE_MS = 1_000;

const settle = async (c: Container, call: CallRecorder, budgetMs: number): Promise<void> => {
  call.closeUnread();
  const record = call.settlement();
  // The charge goes first: the instance's own bookkeeping (health, the limits' memory) failing must not keep the
  // record from being sent, or logged for replay.
  const sending = sendSettlement(c, record, budgetMs);
  try {
    c.gateway.observeEnd(call, record.outcome);
    c.gateway.expectSettlement(record);
  } catch (error) {
    c.log.error('call end not observed', { requestId: record.requestId, error });
  }
  await sending;
};

/**
 * Sends the record, or logs it whole (it holds no secrets) for replay when the send fails — or has not been
 * acknowledged within `budgetMs`, what is left of the invocation: a slow queue's retries (5 attempts of up to 5 s)
 * outlast the margin a call keeps, and Lambda would end the invocation before any failure was logged, leaving no
 * trace of the charge. Replay is idempotent by the record's id, so a record both logged and, later, sent settles once.
 */
export const sendSettlement = async (
  deps: { readonly settlements: SettlementSink; readonly log: Pick<Container['log'], 'error'> },
  record: SettlementRecord,
  budgetMs: number,
): Promise<void> => {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), Math.max(0, budgetMs));
  });
  // A send that throws before it returns a promise (the record would not encode) is logged like one that fails.
  const sending = new Promise<void>((resolve) => resolve(deps.settlements.send(record))).then(
    () => 'sent' as const,
    (error: unknown) => ({ error }),
  );
  const outcome = await Promise.race([sending, late]);
  clearTimeout(timer);
  if (outcome === 'late') deps.log.error(UNSENT_SETTLEMENT.unacknowledged, { record });
  else if (outcome !== 'sent') deps.log.error(UNSENT_SETTLEMENT.failed, { record, error: outcome.error });
};
