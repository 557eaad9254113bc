/**
 * `POST /v1/embeddings`: deterministic unit-length embedding vectors in OpenAI's wire format.
 *
 * Each vector is a pure function of its input (text, or token ids joined by commas) and the requested
 * dimensions, so a test can compare two responses, or a cached answer with a fresh one. A vector of d
 * dimensions is the first d PRNG components re-normalised, like the prefix property of OpenAI's
 * `text-embedding-3` models. Components are rounded to float32, the precision OpenAI serves, so the
 * `float` and `base64` encodings of one input decode to exactly the same numbers.
 */
import { type ApiCall, type ApiEndpoint, type ApiRejection, parseModelRequest } from '#sim/api.ts';
import { invalidRequestError } from '#sim/errors.ts';
import {
  DIRECTIVE_MARKER,
  type FaultPlan,
  FaultSyntaxError,
  mergeDirectives,
  parseInlineDirectives,
  type RequestDirectives,
} from '#sim/faults.ts';
import { type Exchange, sendJson, sendTruncatedJson } from '#sim/http.ts';
import { fnv1a, mulberry32 } from '#sim/text.ts';
import { countTextTokens } from '#sim/tokens.ts';

/** Dimensions of a vector when the request sets none (those of `text-embedding-3-small`). */
export const DEFAULT_EMBEDDING_DIMENSIONS = 1536;
/** Largest `dimensions` accepted (those of `text-embedding-3-large`). */
export const MAX_EMBEDDING_DIMENSIONS = 3072;
/** Largest number of inputs in one request, as on OpenAI. */
export const MAX_EMBEDDING_INPUTS = 2048;

/** The values of `encoding_format`. */
export type EmbeddingEncoding = 'float' | 'base64';

/** One input to embed: its text (what seeds the vector) and its token count (what usage reports). */
export interface EmbeddingInput {
  /** The string itself, or token ids joined by commas. */
  text: string;
  tokens: number;
}

/** Creates the embeddings endpoint. */
export function createEmbeddingsEndpoint(): ApiEndpoint {
  return {
    method: 'POST',
    path: '/v1/embeddings',
    parse(raw: Buffer): ApiCall | ApiRejection {
      const parsed = parseModelRequest(raw);
      if ('error' in parsed) return parsed;
      const { body, model } = parsed;
      const reject = (message: string, param: string, code: string | null = null): ApiRejection => ({
        status: 400,
        model,
        error: invalidRequestError(message, param, code),
      });

      const inputs = readInputs(body.input);
      if (typeof inputs === 'string') {
        return body.input === undefined
          ? reject(inputs, 'input', 'missing_required_parameter')
          : reject(inputs, 'input');
      }
      const dimensions = body.dimensions ?? DEFAULT_EMBEDDING_DIMENSIONS;
      if (
        typeof dimensions !== 'number' ||
        !Number.isInteger(dimensions) ||
        dimensions < 1 ||
        dimensions > MAX_EMBEDDING_DIMENSIONS
      ) {
        return reject(
          `Invalid 'dimensions': ${JSON.stringify(dimensions)}. Expected an integer from 1 to ${MAX_EMBEDDING_DIMENSIONS}.`,
          'dimensions',
        );
      }
      const encoding = body.encoding_format ?? 'float';
      if (encoding !== 'float' && encoding !== 'base64') {
        return reject(
          `Invalid value: ${JSON.stringify(encoding)}. Supported values are: 'float' and 'base64'.`,
          'encoding_format',
          'invalid_value',
        );
      }

      let directives: RequestDirectives | null;
      try {
        directives = findDirectives(body.input);
      } catch (error) {
        if (!(error instanceof FaultSyntaxError)) throw error;
        return { status: 400, model, error: invalidRequestError(error.message) };
      }
      return {
        model,
        stream: false,
        directives,
        body,
        respond: (ex, plan) => sendEmbeddings(ex, model, inputs, dimensions, encoding, plan),
      };
    },
  };
}

/**
 * Normalises `input` (a string, strings, token ids, or arrays of token ids) into the inputs to embed, or
 * returns the error message for a malformed one.
 */
export function readInputs(input: unknown): EmbeddingInput[] | string {
  if (input === undefined || input === null) return "Missing required parameter: 'input'.";
  if (typeof input === 'string') {
    return input === '' ? "'input' cannot be an empty string." : [textInput(input)];
  }
  if (!Array.isArray(input)) return INVALID_INPUT;
  if (input.length === 0) return "'input' cannot be an empty array.";
  if (input.length > MAX_EMBEDDING_INPUTS) {
    return (
      `Invalid 'input': array too long. Expected an array with maximum length ${MAX_EMBEDDING_INPUTS}, ` +
      `but got an array with length ${input.length} instead.`
    );
  }
  const first: unknown = input[0];
  if (typeof first === 'string') {
    const inputs: EmbeddingInput[] = [];
    for (const item of input) {
      if (typeof item !== 'string') return INVALID_INPUT;
      if (item === '') return "'input' cannot contain an empty string.";
      inputs.push(textInput(item));
    }
    return inputs;
  }
  if (isTokenId(first)) {
    return input.every(isTokenId) ? [tokenInput(input as number[])] : INVALID_INPUT;
  }
  const inputs: EmbeddingInput[] = [];
  for (const item of input) {
    if (!Array.isArray(item) || !item.every(isTokenId)) return INVALID_INPUT;
    if (item.length === 0) return "'input' cannot contain an empty array of tokens.";
    inputs.push(tokenInput(item as number[]));
  }
  return inputs;
}

const INVALID_INPUT =
  "Invalid 'input': expected a string, an array of strings, an array of integers (token ids) or an " +
  'array of arrays of integers.';

function textInput(text: string): EmbeddingInput {
  return { text, tokens: countTextTokens(text) };
}

function tokenInput(ids: readonly number[]): EmbeddingInput {
  return { text: ids.join(','), tokens: ids.length };
}

function isTokenId(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0;
}

/**
 * The deterministic unit vector of `text`: PRNG components in [-1, 1) seeded by the text's hash,
 * L2-normalised, then rounded to float32.
 */
export function embeddingVector(text: string, dimensions: number): Float32Array {
  const random = mulberry32(fnv1a(text));
  const raw = new Float64Array(dimensions);
  let sumOfSquares = 0;
  for (let i = 0; i < dimensions; i++) {
    const component = random() * 2 - 1;
    raw[i] = component;
    sumOfSquares += component * component;
  }
  // A zero vector would need every component to be exactly 0, which mulberry32 never yields in a row.
  const scale = 1 / Math.sqrt(sumOfSquares);
  const vector = new Float32Array(dimensions);
  for (let i = 0; i < dimensions; i++) vector[i] = (raw[i] as number) * scale;
  return vector;
}

/** `encoding_format: base64`: the vector's little-endian float32 bytes, base64-encoded. */
export function encodeBase64Vector(vector: Float32Array): string {
  const bytes = Buffer.allocUnsafe(vector.length * 4);
  for (let i = 0; i < vector.length; i++) bytes.writeFloatLE(vector[i] as number, i * 4);
  return bytes.toString('base64');
}

function sendEmbeddings(
  ex: Exchange,
  model: string,
  inputs: readonly EmbeddingInput[],
  dimensions: number,
  encoding: EmbeddingEncoding,
  plan: FaultPlan,
): void {
  let promptTokens = 0;
  const data = inputs.map((input, index) => {
    promptTokens += input.tokens;
    const vector = embeddingVector(input.text, dimensions);
    // Float32Array elements read back as the exact doubles of their float32 values.
    const embedding = encoding === 'base64' ? encodeBase64Vector(vector) : Array.from(vector);
    return { object: 'embedding', index, embedding };
  });
  const text = JSON.stringify({
    object: 'list',
    data,
    model,
    ...(plan.omitUsage ? {} : { usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } }),
  });
  if (plan.error === 'drop_mid') sendTruncatedJson(ex, text);
  else sendJson(ex, 200, text);
}

/** Collects `[[sim: ...]]` directives from every string input, in order. */
function findDirectives(input: unknown): RequestDirectives | null {
  const texts = typeof input === 'string' ? [input] : Array.isArray(input) ? input : [];
  let directives: RequestDirectives | null = null;
  for (const text of texts) {
    if (typeof text === 'string' && text.includes(DIRECTIVE_MARKER)) {
      directives = mergeDirectives(directives, parseInlineDirectives(text));
    }
  }
  return directives;
}
