import type { HttpEvent, HttpResponse } from './lambda.ts';
import { header } from './lambda.ts';

/**
 * Cross-origin access for browser clients (an in-browser app calling the API with its user's key, as OpenAI's
 * SDK allows with `dangerouslyAllowBrowser`). Keys travel in the Authorization header, never in cookies, so any
 * origin may call: a page learns nothing it could not learn with the key itself, and no ambient credential
 * rides along. Answered by the functions themselves (not the Function URL's CORS setting) so that the Function
 * URL, the REST API and the local host behave alike. See ADR 0009.
 */

/** The response headers a page may read: ids, limits, timings and who served the call. */
const EXPOSED = [
  'x-request-id',
  'x-ratelimit-limit-requests',
  'x-ratelimit-remaining-requests',
  'x-ratelimit-reset-requests',
  'x-ratelimit-limit-tokens',
  'x-ratelimit-remaining-tokens',
  'x-ratelimit-reset-tokens',
  'retry-after',
  'retry-after-ms',
  'x-should-retry',
  'server-timing',
  'x-svc-provider',
  'x-svc-served-model',
  'x-svc-attempts',
].join(', ');

/** On every response, successes and errors alike. */
export const CORS_HEADERS: Readonly<Record<string, string>> = {
  'access-control-allow-origin': '*',
  'access-control-expose-headers': EXPOSED,
};

/** How long a browser may reuse a preflight answer (browsers cap it lower: Chromium at 2 h). */
const PREFLIGHT_MAX_AGE_S = 7200;

/**
 * The request headers a preflight may be allowed: the ones the browser asks for, when they are a plain list of
 * header names (the SDKs send their own `x-stainless-*` family, so a fixed list would break them on upgrade).
 * Anything else gets the headers every client needs.
 */
const allowedHeaders = (requested: string | undefined): string =>
  requested && requested.length <= 2048 && /^[\w-]+(?:\s*,\s*[\w-]+)*$/.test(requested.trim())
    ? requested.trim()
    : 'authorization, content-type';

/** The answer to a CORS preflight (`OPTIONS` with `Access-Control-Request-Method`) for `methods`. */
export const preflightResponse = (
  event: HttpEvent,
  methods: readonly string[],
  requestId: string,
): HttpResponse => ({
  statusCode: 204,
  headers: {
    ...CORS_HEADERS,
    'access-control-allow-methods': [...methods, 'OPTIONS'].join(', '),
    'access-control-allow-headers': allowedHeaders(header(event, 'access-control-request-headers')),
    'access-control-max-age': String(PREFLIGHT_MAX_AGE_S),
    'x-request-id': requestId,
  },
  body: '',
});
