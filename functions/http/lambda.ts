import type { Readable } from 'node:stream';
import type { APIGatewayProxyEventV2, Context } from 'aws-lambda';
import { InvalidRequestError, RequestTooLargeError } from '#core/errors.ts';

/** Function URLs and API Gateway (payload v2) deliver the same event shape. */
export type HttpEvent = APIGatewayProxyEventV2;
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

/** The raw request body as bytes, enforcing the documented size limit before anything is parsed. */
export const bodyBytes = (event: HttpEvent, limitBytes: number): Buffer => {
  const raw = event.body ?? '';
  // A lower bound on the byte size, so an oversized body is refused before it is decoded or encoded:
  // base64 inflates by 4/3, and UTF-8 never takes fewer bytes than UTF-16 code units.
  const atLeast = event.isBase64Encoded ? Math.floor((raw.length * 3) / 4) - 2 : raw.length;
  if (atLeast > limitBytes) throw new RequestTooLargeError(limitBytes);
  const bytes = event.isBase64Encoded ? Buffer.from(raw, 'base64') : Buffer.from(raw, 'utf8');
  if (bytes.length > limitBytes) throw new RequestTooLargeError(limitBytes);
  return bytes;
};

/** Parses a JSON body: 413 over the limit, 400 when it is not JSON or not declared as JSON. */
export const jsonBody = (event: HttpEvent, limitBytes: number): unknown => {
  const raw = event.body ?? '';
  // Fast path for the common case: a plain UTF-8 body whose length (UTF-16 units ≤ bytes) fits.
  const text =
    !event.isBase64Encoded && raw.length <= limitBytes / 3
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
  try {
    return JSON.parse(text);
  } catch {
    throw new InvalidRequestError(
      'We could not parse the JSON body of your request. Check that it is valid JSON.',
      'invalid_json',
    );
  }
};
