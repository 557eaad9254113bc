import type { Readable } from 'node:stream';
import { brotliDecompressSync, gunzipSync, inflateSync, type ZlibOptions } from 'node:zlib';
import type { APIGatewayProxyEventV2, Context } from 'aws-lambda';
import { InvalidRequestError, RequestTooLargeError } from '#core/errors.ts';

/**
 * Function URLs and API Gateway (payload v2) deliver the same event shape. `via` marks an event that came through
 * the REST API (payload 1.0, mapped in rest-event.ts), whose idle timeout bounds how long a call may stay silent.
 */
export type HttpEvent = APIGatewayProxyEventV2 & { readonly via?: 'rest-api' };
export type LambdaContext = Context;

/** What a streaming handler returns to middy: status, headers, and a string or a stream body. */
export interface HttpResponse {
  statusCode: number;
  headers: Record<string, string>;
  body: string | Readable;
}

/** Header lookup; Function URLs and API Gateway v2 both lowercase header names. */
export const header = (event: HttpEvent, name: string): string | undefined => event.headers?.[name];

/**
 * Our request id, derived from Lambda's so one id ties the response header, our logs and Lambda's logs.
 * Formatted like OpenAI's (`req_` + 32 hex characters).
 */
export const requestIdOf = (context: LambdaContext): string =>
  `req_${context.awsRequestId.replaceAll('-', '')}`;

/**
 * The request body as bytes, enforcing the documented size limit before anything is parsed, and decoded when
 * the client compressed it (`Content-Encoding`). The limit holds for the decoded bytes too, so a small
 * compressed body cannot expand into more than a plain one may carry.
 */
export const bodyBytes = (event: HttpEvent, limitBytes: number): Buffer =>
  decodedBody(event, sizedBody(event, limitBytes), limitBytes);

/**
 * The body's bytes as sent (base64 undone, compression not), refused over the size limit: the checks that cost next
 * to nothing, which an endpoint may make before the caller's key (then `decodedBody`, after it).
 */
export const sizedBody = (event: HttpEvent, limitBytes: number): Buffer => {
  const raw = event.body ?? '';
  // A lower bound on the byte size, so an oversized body is refused before it is decoded or encoded:
  // base64 inflates by 4/3, and UTF-8 never takes fewer bytes than UTF-16 code units.
  const atLeast = event.isBase64Encoded ? Math.floor((raw.length * 3) / 4) - 2 : raw.length;
  if (atLeast > limitBytes) throw new RequestTooLargeError(limitBytes);
  const bytes = event.isBase64Encoded ? Buffer.from(raw, 'base64') : Buffer.from(raw, 'utf8');
  if (bytes.length > limitBytes) throw new RequestTooLargeError(limitBytes);
  return bytes;
};

/** `sized` (from `sizedBody`) decompressed as its Content-Encoding says, held to the same limit. */
export const decodedBody = (event: HttpEvent, sized: Buffer, limitBytes: number): Buffer => {
  const encoding = contentEncoding(event);
  return encoding === null ? sized : decompress(sized, encoding, limitBytes);
};

/** The codings a client may compress a body with (RFC 9110 §8.4.1), and how each is undone. */
const DECODERS: Readonly<Record<string, (bytes: Buffer, options: ZlibOptions) => Buffer>> = {
  gzip: gunzipSync,
  'x-gzip': gunzipSync,
  deflate: inflateSync,
  br: brotliDecompressSync,
};

/** The body's content coding, lowercased; null for none (absent, empty or `identity`). */
const contentEncoding = (event: HttpEvent): string | null => {
  const value = header(event, 'content-encoding')?.trim().toLowerCase();
  return !value || value === 'identity' ? null : value;
};

const decompress = (bytes: Buffer, encoding: string, limitBytes: number): Buffer => {
  const decode = DECODERS[encoding];
  if (!decode) {
    throw new InvalidRequestError(
      `Unsupported Content-Encoding "${encoding.slice(0, 64)}": send the body uncompressed, or compressed with gzip, deflate or br.`,
      'unsupported_content_encoding',
    );
  }
  try {
    // maxOutputLength stops the inflater as soon as the output passes the limit: a compression bomb costs
    // at most the limit's worth of memory and work.
    return decode(bytes, { maxOutputLength: limitBytes });
  } catch (error) {
    if (error instanceof RangeError) throw new RequestTooLargeError(limitBytes);
    throw new InvalidRequestError(
      `The request body could not be decompressed as ${encoding}, as its Content-Encoding says it is.`,
      'invalid_content_encoding',
    );
  }
};

/** Parses a JSON body: 413 over the limit, 400 when it is not JSON or not declared as JSON. */
export const jsonBody = (event: HttpEvent, limitBytes: number): unknown => {
  const raw = event.body ?? '';
  // Fast path for the common case: a plain UTF-8 body whose length (UTF-16 units ≤ bytes) fits.
  const text =
    !event.isBase64Encoded && raw.length <= limitBytes / 3 && contentEncoding(event) === null
      ? raw
      : bodyBytes(event, limitBytes).toString('utf8');
  const contentType = header(event, 'content-type');
  if (contentType !== undefined && !/^application\/(?:[\w.+-]*\+)?json\b/i.test(contentType)) {
    throw new InvalidRequestError(
      `Unsupported Content-Type "${contentType.split(';')[0]}": send the body as application/json.`,
      'invalid_content_type',
    );
  }
  if (text.trim() === '')
    throw new InvalidRequestError('The request body is empty; expected a JSON object.', 'invalid_json');
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new InvalidRequestError(
      'We could not parse the JSON body of your request. Check that it is valid JSON.',
      'invalid_json',
    );
  }
  if (nestedDeeperThan(body, MAX_JSON_DEPTH)) {
    throw new InvalidRequestError(
      `The request body nests objects and arrays more than ${MAX_JSON_DEPTH} levels deep.`,
      'invalid_value',
    );
  }
  return body;
};

/**
 * Deepest nesting of objects and arrays a body may have. JSON.parse takes any depth, but the work after it does
 * not: serializing a tool's parameters or a response schema thousands of levels deep (the prompt estimate, the
 * upstream body) overflows the stack — a 500 before admission, so outside every limit, counted as a platform
 * fault. OpenAI allows a handful of levels in a schema; no real request comes near this.
 */
export const MAX_JSON_DEPTH = 64;

/** Whether `value` nests objects or arrays more than `limit` deep, walked without recursion. */
const nestedDeeperThan = (value: unknown, limit: number): boolean => {
  if (value === null || typeof value !== 'object') return false;
  const pending: object[] = [value];
  const depths: number[] = [1];
  while (pending.length > 0) {
    const node = pending.pop() as object;
    const depth = depths.pop() as number;
    if (depth > limit) return true;
    for (const child of Array.isArray(node) ? node : Object.values(node)) {
      if (child !== null && typeof child === 'object') {
        pending.push(child);
        depths.push(depth + 1);
      }
    }
  }
  return false;
};
