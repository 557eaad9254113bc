import type { Endpoint } from './settlement.ts';

/**
 * Where the API is served: the one list of its paths. The functions check their own path against it (a Function
 * URL hands a function every path below it), the stacks route it (lib/functions.ts), the local host serves what the
 * stacks route, and the uptime probe calls it. Written once, so a path cannot be routed in one place and refused in
 * another.
 */

/** The API's base path, as in an OpenAI base URL (`https://host/v1`). */
export const API_BASE = '/v1';

/** The path each billed endpoint's function serves (POST). */
export const ENDPOINT_PATHS: Readonly<Record<Endpoint, `${typeof API_BASE}/${string}`>> = {
  'chat.completions': `${API_BASE}/chat/completions`,
  embeddings: `${API_BASE}/embeddings`,
  'audio.transcriptions': `${API_BASE}/audio/transcriptions`,
  'audio.speech': `${API_BASE}/audio/speech`,
};

/** The catalog (GET), and one model below it: `/v1/models/{id}`. */
export const MODELS_PATH = `${API_BASE}/models` as const;

/** A path relative to the API's base (`/chat/completions`): what a client appends to its base URL. */
export const underBase = (path: `${typeof API_BASE}/${string}`): string => path.slice(API_BASE.length);
