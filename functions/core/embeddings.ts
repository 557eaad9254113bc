import { InvalidRequestError } from './errors.ts';
import { UpstreamFailure } from './fallback.ts';
import type { TokenCounter } from './ports.ts';
import type { Deployment, Model } from './registry.ts';
import type { UpstreamVector } from './upstream.ts';
import type { Usage } from './usage.ts';

/** A validated `POST /v1/embeddings` body (OpenAI's contract; the spec leaves it "not shown"). */
export interface EmbeddingsRequest {
  model: string;
  /** A string, strings, token ids, or arrays of token ids. */
  input: string | string[] | number[] | number[][];
  encoding_format?: 'float' | 'base64' | undefined;
  dimensions?: number | undefined;
  /** End-user id; accepted for compatibility and never forwarded (the usage report stays anonymous). */
  user?: string | undefined;
}

export type EmbeddingsInput = string | readonly number[];

/** OpenAI's bounds: at most 2048 inputs per request, and 300,000 tokens summed across them. */
export const MAX_EMBEDDING_INPUTS = 2048;
export const MAX_EMBEDDING_REQUEST_TOKENS = 300_000;
/** Per-input token limit when the model gives no context window (OpenAI's for every embedding model). */
export const DEFAULT_EMBEDDING_CONTEXT = 8192;

export interface PreparedEmbeddings {
  readonly model: Model;
  readonly inputs: readonly EmbeddingsInput[];
  /** Estimated input tokens (real tokenizer; a token array counts its length): limits, hold, fallback bill. */
  readonly promptTokens: number;
  readonly encoding: 'float' | 'base64';
  readonly dimensions: number | null;
}

const isTokenArray = (value: unknown): value is number[] =>
  Array.isArray(value) && value.length > 0 && typeof value[0] === 'number';

/** Normalises the input to a list and checks each item against the model's context and the request total. */
export const prepareEmbeddings = (
  request: EmbeddingsRequest,
  model: Model,
  tokens: TokenCounter,
): PreparedEmbeddings => {
  const input = request.input;
  const single = typeof input === 'string' || isTokenArray(input);
  const inputs: EmbeddingsInput[] = single ? [input] : (input as EmbeddingsInput[]);
  const context = model.contextWindow ?? DEFAULT_EMBEDDING_CONTEXT;
  let promptTokens = 0;
  inputs.forEach((item, i) => {
    // Counting stops at what the limits allow: past them the request is refused anyway, and text is counted
    // before admission, from any key.
    const count = typeof item === 'string' ? tokens.countUpTo(item, context) : item.length;
    if (count > context) {
      throw new InvalidRequestError(
        `This model's maximum context length is ${context} tokens, however you requested at least ${count} tokens in ${single ? 'input' : `input[${i}]`}. Please reduce your input.`,
        'context_length_exceeded',
        { param: single ? 'input' : `input[${i}]` },
      );
    }
    promptTokens += count;
    if (promptTokens > MAX_EMBEDDING_REQUEST_TOKENS) {
      const counted =
        i + 1 < inputs.length
          ? `at least ${promptTokens} tokens in the first ${i + 1} inputs`
          : `${promptTokens} tokens across all inputs`;
      throw new InvalidRequestError(
        `Requested ${counted}; the maximum per request is ${MAX_EMBEDDING_REQUEST_TOKENS}.`,
        'context_length_exceeded',
        { param: 'input' },
      );
    }
  });
  const dimensions = request.dimensions ?? null;
  if (dimensions !== null && model.dimensions !== undefined && dimensions > model.dimensions) {
    throw new InvalidRequestError(
      `The model \`${model.id}\` produces at most ${model.dimensions} dimensions; requested ${dimensions}.`,
      'invalid_value',
      { param: 'dimensions' },
    );
  }
  return { model, inputs, promptTokens, encoding: request.encoding_format ?? 'float', dimensions };
};

/** The widest vectors any embedding model of ours may return when its registry row names no width. */
const WIDEST_VECTOR = 4096;

/**
 * The most an upstream's reply to `prepared` can be: every vector at the model's full width — a deployment may
 * ignore the client's `dimensions`, which checkVectors must get to see and call `unsupported`, not a reply cut as
 * too large (a protocol fault that counts against the deployment) — as JSON floats of up to 25 characters
 * (`-0.000012345678901234568,`) with room for a pretty-printer's line and indent, plus each item's frame and the
 * reply's own. A reply past this is no answer to the request; and reading it whole — chunks, their join, the
 * string, the parse — could take more memory than a function has, ending the invocation with no answer and no
 * settlement.
 */
export const embeddingsReplyLimitBytes = (prepared: PreparedEmbeddings): number =>
  prepared.inputs.length *
    (Math.max(prepared.dimensions ?? 0, prepared.model.dimensions ?? WIDEST_VECTOR) * 40 + 512) +
  64 * 1024;

/** The upstream body for one deployment: inputs always as a list; `user` stays with us. */
export const upstreamEmbeddingsBody = (
  prepared: PreparedEmbeddings,
  deployment: Deployment,
): Record<string, unknown> => ({
  model: deployment.upstreamModel,
  input: prepared.inputs,
  encoding_format: prepared.encoding,
  ...(prepared.dimensions !== null ? { dimensions: prepared.dimensions } : {}),
});

/**
 * Float32 count of a vector; -1 when it is no vector. A base64 one must be canonical base64 of whole, finite
 * float32s: Node's decoder skips what is not base64, so "!!!!…" of the right length would otherwise pass.
 */
const vectorLength = (vector: UpstreamVector): number => {
  if (typeof vector !== 'string') return vector.every(Number.isFinite) ? vector.length : -1;
  const bytes = Buffer.from(vector, 'base64');
  // Padding aside: an upstream may leave it off (the client gets it padded: encodeVector).
  if (bytes.length % 4 !== 0 || bytes.toString('base64').replace(/=+$/, '') !== vector.replace(/=+$/, ''))
    return -1;
  for (let i = 0; i < bytes.length; i += 4) if (!Number.isFinite(bytes.readFloatLE(i))) return -1;
  return bytes.length / 4;
};

/**
 * Checks an upstream's vectors before anything reaches the client: one per input, all of one length (the
 * requested one, when the client chose it), well-formed. A short list or a malformed vector fails over like any
 * other faulty reply instead of handing the client wrong vectors. Well-formed vectors of another length than the
 * client's `dimensions` are this deployment's inability, not its fault (`unsupported`, ADR 0013): the route moves
 * on, the circuit is untouched — one client's option must not open it for everyone — and if no deployment can,
 * the client is told so in a 400.
 */
export const checkVectors = (prepared: PreparedEmbeddings, vectors: readonly UpstreamVector[]): void => {
  if (vectors.length !== prepared.inputs.length) {
    throw new UpstreamFailure(
      'protocol',
      `upstream returned ${vectors.length} embeddings for ${prepared.inputs.length} inputs`,
    );
  }
  let width: number | null = null;
  for (const vector of vectors) {
    const length = vectorLength(vector);
    if (length < 1)
      throw new UpstreamFailure('protocol', 'upstream embedding is not a vector of finite numbers');
    width ??= length;
    if (length !== width)
      throw new UpstreamFailure('protocol', `upstream embeddings of ${width} and ${length} dimensions`);
  }
  const requested = prepared.dimensions;
  if (requested !== null && width !== null && width !== requested) {
    const message = `This model cannot return embeddings of ${requested} dimensions.`;
    throw new UpstreamFailure('unsupported', `upstream returned ${width} dimensions, not ${requested}`, {
      status: 200,
      upstreamError: { message, type: 'invalid_request_error', code: 'invalid_value', param: 'dimensions' },
    });
  }
};

/** Base64 of little-endian float32s: what OpenAI sends for `encoding_format: "base64"`. */
export const vectorToBase64 = (vector: readonly number[]): string => {
  const bytes = Buffer.allocUnsafe(vector.length * 4);
  for (let i = 0; i < vector.length; i++) bytes.writeFloatLE(vector[i] as number, i * 4);
  return bytes.toString('base64');
};

export const base64ToVector = (encoded: string): number[] => {
  const bytes = Buffer.from(encoded, 'base64');
  const vector = new Array<number>(bytes.length / 4);
  for (let i = 0; i < vector.length; i++) vector[i] = bytes.readFloatLE(i * 4);
  return vector;
};

/**
 * Base64 with its padding, as OpenAI sends it: an upstream may leave it off (vectorLength takes that), and Python's
 * decoder — the openai SDK's, which asks for base64 by default — refuses it ("Incorrect padding").
 */
const padded = (base64: string): string => {
  const short = base64.length % 4;
  return short === 0 ? base64 : base64 + '='.repeat(4 - short);
};

/** A vector in the encoding the client asked for, converting only when the upstream used the other one. */
export const encodeVector = (
  vector: UpstreamVector,
  encoding: 'float' | 'base64',
): readonly number[] | string => {
  if (encoding === 'base64') return typeof vector === 'string' ? padded(vector) : vectorToBase64(vector);
  return typeof vector === 'string' ? base64ToVector(vector) : vector;
};

/**
 * The most input tokens an embeddings call can be billed. Token ids are what the upstream embeds, so their count
 * is exact; a text has at most one token per UTF-8 byte (doubled for slack, plus a few for its start and end
 * markers), and never more than the model's context. Never below our own count.
 */
export const embeddingsCeiling = (prepared: PreparedEmbeddings): number => {
  const context = prepared.model.contextWindow ?? DEFAULT_EMBEDDING_CONTEXT;
  let bound = 0;
  for (const input of prepared.inputs)
    bound +=
      typeof input === 'string' ? Math.min(context, 2 * Buffer.byteLength(input, 'utf8') + 8) : input.length;
  return Math.max(prepared.promptTokens, bound);
};

/**
 * The fewest input tokens an embeddings call can be billed: token ids are what the upstream embeds, so their count
 * is exact; a text is never empty (the request schema refuses it), so it is at least one token.
 */
export const embeddingsFloor = (prepared: PreparedEmbeddings): number => {
  let floor = 0;
  for (const input of prepared.inputs) floor += typeof input === 'string' ? 1 : input.length;
  return floor;
};

/**
 * Usage of an embeddings call: the upstream's input tokens held between what the call must and could take
 * (embeddingsFloor, embeddingsCeiling; a report above the ceiling is a provider's error — one reported a billion
 * tokens for three token ids), or our own count when it reported none. A report of 0 is none: what was embedded was
 * not empty, so the provider did not count (some OpenAI-compatible servers send zeros), and billing it served the
 * call free.
 */
export const embeddingsUsage = (prepared: PreparedEmbeddings, reported: number | null): Usage => {
  const counted = reported !== null && reported > 0;
  return {
    promptTokens: !counted
      ? prepared.promptTokens
      : reported <= prepared.promptTokens
        ? Math.max(reported, embeddingsFloor(prepared))
        : Math.min(reported, embeddingsCeiling(prepared)),
    completionTokens: 0,
    cachedPromptTokens: 0,
    reasoningTokens: 0,
    source: counted ? 'upstream' : 'estimated',
  };
};

/** OpenAI's embeddings list object, labelled with the public model id. */
export const embeddingsResponse = (
  prepared: PreparedEmbeddings,
  vectors: readonly UpstreamVector[],
  usage: Usage,
) => ({
  object: 'list' as const,
  data: vectors.map((vector, index) => ({
    object: 'embedding' as const,
    index,
    embedding: encodeVector(vector, prepared.encoding),
  })),
  model: prepared.model.id,
  usage: { prompt_tokens: usage.promptTokens, total_tokens: usage.promptTokens },
});
