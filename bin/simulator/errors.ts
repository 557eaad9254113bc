/**
 * OpenAI-shaped error bodies. Wording matches what OpenAI sends where it matters to clients (the
 * overload and server-error messages are what SDKs and gateways show users).
 */

/** The `error` object of an OpenAI error response. */
export interface OpenAiErrorDetail {
  message: string;
  type: string;
  param: string | null;
  code: string | null;
}

/** An OpenAI error response body: `{"error":{"message","type","param","code"}}`. */
export interface OpenAiErrorBody {
  error: OpenAiErrorDetail;
}

function errorBody(
  message: string,
  type: string,
  param: string | null,
  code: string | null,
): OpenAiErrorBody {
  return Object.freeze({ error: Object.freeze({ message, type, param, code }) });
}

/** Body of the HTTP 429 sent for the `overloaded` fault; the gateway reuses this exact wording. */
export const OVERLOADED_ERROR: OpenAiErrorBody = errorBody(
  'The model is currently busy with other requests. Please retry later.',
  'invalid_request_error',
  null,
  'engine_overloaded',
);

/** Body of the HTTP 500 sent for the `server_error` fault. */
export const SERVER_ERROR: OpenAiErrorBody = errorBody(
  'The server had an error while processing your request.',
  'server_error',
  null,
  null,
);

/** Body of the HTTP 401 sent when the `Authorization: Bearer` header is missing or empty. */
export const MISSING_API_KEY_ERROR: OpenAiErrorBody = errorBody(
  "You didn't provide an API key. You need to provide your API key in an Authorization header using " +
    'Bearer auth (i.e. Authorization: Bearer YOUR_KEY).',
  'invalid_request_error',
  null,
  'invalid_api_key',
);

/** Body of the HTTP 401 sent for the `unauthorized` fault. */
export const INVALID_API_KEY_ERROR: OpenAiErrorBody = errorBody(
  'Incorrect API key provided.',
  'invalid_request_error',
  null,
  'invalid_api_key',
);

/** Body of the HTTP 400 sent when the request body is not valid JSON. */
export const INVALID_JSON_ERROR: OpenAiErrorBody = errorBody(
  'We could not parse the JSON body of your request. The API expects a JSON payload.',
  'invalid_request_error',
  null,
  null,
);

/** A 400 `invalid_request_error` for a request the simulator cannot serve. */
export function invalidRequestError(
  message: string,
  param: string | null = null,
  code: string | null = null,
): OpenAiErrorBody {
  return errorBody(message, 'invalid_request_error', param, code);
}

/** The 404 body OpenAI sends for an unknown method/path combination. */
export function invalidUrlError(method: string, path: string): OpenAiErrorBody {
  return errorBody(`Invalid URL (${method} ${path})`, 'invalid_request_error', null, null);
}
