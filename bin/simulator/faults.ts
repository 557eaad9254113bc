/**
 * Fault injection: per-provider specs set through the admin API, plus per-request overrides.
 *
 * Per-request overrides come from two places and win over the provider spec field by field (headers win
 * over the inline directive):
 *
 * 1. Headers, for clients that call the simulator directly (e.g. a benchmark):
 *    `x-sim-latency-ms`, `x-sim-first-byte-delay-ms`, `x-sim-chunk-delay-ms`, `x-sim-fault`,
 *    `x-sim-drop-after-chunks`, `x-sim-completion-tokens`, `x-sim-omit-usage`.
 * 2. An inline directive inside the request's text (any chat message, any embeddings `input` string, the
 *    transcription `prompt` field, the speech `input`), so a test can inject a fault *through* a gateway
 *    that does not forward custom headers:
 *
 *        [[sim: fault=drop_mid drop_after_chunks=3 chunk_delay_ms=5 latency_ms=10 first_byte_delay_ms=0]]
 *
 *    Pairs are `key=value` separated by whitespace; keys are the header names without `x-sim-`, written
 *    with underscores (hyphens are accepted too). Several directives in one request are merged in order.
 *    The directive stays part of the prompt, so it counts towards prompt tokens like any other text.
 *
 * `omit_usage=1` (or `x-sim-omit-usage: 1`) makes the response carry no usage at all, as some upstreams
 * do, so a gateway's own token counting can be tested; `0` turns it off again.
 *
 * `fault=none` (or `x-sim-fault: none`) cancels a provider fault for that request. Malformed values are
 * rejected with HTTP 400 rather than ignored, so a typo in a test fails loudly.
 */

/** The error behaviours a fault can trigger. */
export type FaultError =
  | 'overloaded'
  | 'server_error'
  | 'unauthorized'
  | 'drop_before'
  | 'drop_mid'
  | 'error_mid';

/** Every valid {@link FaultError}, in documentation order. */
export const FAULT_ERRORS: readonly FaultError[] = Object.freeze([
  'overloaded',
  'server_error',
  'unauthorized',
  'drop_before',
  'drop_mid',
  'error_mid',
]);

/**
 * Number of chunks (SSE data events, or 8 KiB pieces of a speech body) sent before a streamed `drop_mid`
 * destroys the socket, or an `error_mid` sends its error event and closes the stream cleanly, unless overridden.
 * (`error_mid` acts on event streams; any other response gets the `server_error` answer instead.)
 */
export const DEFAULT_DROP_AFTER_CHUNKS = 2;

/** Faults applied to a provider's requests; set with `PUT /_sim/faults/<provider>` or `setFaults`. */
export interface FaultSpec {
  /** Wait this long before doing anything (on top of the simulator-wide latency). */
  latencyMs?: number;
  /** Wait this long before sending the status line and headers. */
  firstByteDelayMs?: number;
  /** Delay between streamed chunks (SSE events, pieces of a speech body). */
  chunkDelayMs?: number;
  /** Error behaviour to trigger instead of (or part-way through) a normal response. */
  error?: FaultError;
  /** For `drop_mid` and `error_mid` on streams: chunks (SSE events, speech body pieces) to send first. */
  dropAfterChunks?: number;
  /** Leave the usage out of successful responses (see {@link FaultPlan.omitUsage}). */
  omitUsage?: boolean;
  /** Only apply to requests whose bearer key is in this list. */
  keys?: string[];
  /** Apply to the next N matching requests only, then expire. */
  count?: number;
}

/** Per-request overrides from headers or an inline directive. `error: null` means "no error". */
export interface RequestDirectives {
  latencyMs?: number;
  firstByteDelayMs?: number;
  chunkDelayMs?: number;
  error?: FaultError | null;
  dropAfterChunks?: number;
  /** Force exactly this many completion words (chat), overriding the natural length and `max_tokens`. */
  completionTokens?: number;
  /** Leave the usage out of the response (`omit_usage=0|1`). */
  omitUsage?: boolean;
}

/** The fully resolved behaviour for one request. */
export interface FaultPlan {
  latencyMs: number;
  firstByteDelayMs: number;
  chunkDelayMs: number;
  error: FaultError | null;
  dropAfterChunks: number;
  completionTokens: number | null;
  /**
   * Send no usage: embeddings and `json`/`verbose_json` transcriptions leave out `usage`, chat leaves out
   * its `usage` object (and the final usage chunk of a stream), so a gateway has to count by itself.
   */
  omitUsage: boolean;
}

/** Thrown for an invalid fault spec, header or directive; surfaces as HTTP 400. */
export class FaultSyntaxError extends Error {
  override name = 'FaultSyntaxError';
}

const NO_FAULTS: FaultPlan = Object.freeze({
  latencyMs: 0,
  firstByteDelayMs: 0,
  chunkDelayMs: 0,
  error: null,
  dropAfterChunks: DEFAULT_DROP_AFTER_CHUNKS,
  completionTokens: null,
  omitUsage: false,
});

/**
 * Combines a provider spec with per-request overrides (later arguments win field by field). Returns a
 * shared frozen plan when nothing applies, keeping the fault-free hot path allocation-free.
 */
export function resolveFaultPlan(
  spec: FaultSpec | null,
  ...overrides: ReadonlyArray<RequestDirectives | null>
): FaultPlan {
  if (spec === null && overrides.every((o) => o === null)) return NO_FAULTS;
  const plan: FaultPlan = { ...NO_FAULTS };
  if (spec !== null) {
    if (spec.latencyMs !== undefined) plan.latencyMs = spec.latencyMs;
    if (spec.firstByteDelayMs !== undefined) plan.firstByteDelayMs = spec.firstByteDelayMs;
    if (spec.chunkDelayMs !== undefined) plan.chunkDelayMs = spec.chunkDelayMs;
    if (spec.error !== undefined) plan.error = spec.error;
    if (spec.dropAfterChunks !== undefined) plan.dropAfterChunks = spec.dropAfterChunks;
    if (spec.omitUsage !== undefined) plan.omitUsage = spec.omitUsage;
  }
  for (const o of overrides) {
    if (o === null) continue;
    if (o.latencyMs !== undefined) plan.latencyMs = o.latencyMs;
    if (o.firstByteDelayMs !== undefined) plan.firstByteDelayMs = o.firstByteDelayMs;
    if (o.chunkDelayMs !== undefined) plan.chunkDelayMs = o.chunkDelayMs;
    if (o.error !== undefined) plan.error = o.error;
    if (o.dropAfterChunks !== undefined) plan.dropAfterChunks = o.dropAfterChunks;
    if (o.completionTokens !== undefined) plan.completionTokens = o.completionTokens;
    if (o.omitUsage !== undefined) plan.omitUsage = o.omitUsage;
  }
  return plan;
}

interface StoredSpec {
  spec: FaultSpec;
  keys: ReadonlySet<string> | null;
  remaining: number | null;
}

/** Per-provider fault specs with key filtering and count-based expiry. */
export class FaultStore {
  readonly #specs = new Map<string, StoredSpec>();

  /** Sets (or with `null` clears) a provider's spec. Throws {@link FaultSyntaxError} if it is invalid. */
  set(provider: string, spec: unknown): void {
    if (spec === null) {
      this.#specs.delete(provider);
      return;
    }
    const valid = validateFaultSpec(spec);
    this.#specs.set(provider, {
      spec: valid,
      keys: valid.keys === undefined ? null : new Set(valid.keys),
      remaining: valid.count ?? null,
    });
  }

  /** Removes every provider's spec. */
  clear(): void {
    this.#specs.clear();
  }

  /**
   * Returns the spec that applies to a request from `provider` with bearer `key`, consuming one use of a
   * counted spec. Returns null when no spec matches.
   */
  take(provider: string, key: string | null): FaultSpec | null {
    if (this.#specs.size === 0) return null;
    const stored = this.#specs.get(provider);
    if (stored === undefined) return null;
    if (stored.keys !== null && (key === null || !stored.keys.has(key))) return null;
    if (stored.remaining !== null && --stored.remaining <= 0) this.#specs.delete(provider);
    return stored.spec;
  }
}

const SPEC_DURATIONS = ['latencyMs', 'firstByteDelayMs', 'chunkDelayMs'] as const;
const SPEC_FIELDS = new Set<string>([
  ...SPEC_DURATIONS,
  'error',
  'dropAfterChunks',
  'omitUsage',
  'keys',
  'count',
]);

/** Validates an untrusted fault spec (e.g. an admin API body) and returns a normalised copy. */
export function validateFaultSpec(value: unknown): FaultSpec {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new FaultSyntaxError('A fault spec must be a JSON object or null.');
  }
  const input = value as Record<string, unknown>;
  for (const field of Object.keys(input)) {
    if (!SPEC_FIELDS.has(field)) throw new FaultSyntaxError(`Unknown fault spec field: ${field}.`);
  }
  const spec: FaultSpec = {};
  for (const field of SPEC_DURATIONS) {
    if (input[field] !== undefined) spec[field] = nonNegativeNumber(input[field], field);
  }
  if (input.error !== undefined) spec.error = faultError(input.error, 'error');
  if (input.dropAfterChunks !== undefined) {
    spec.dropAfterChunks = nonNegativeInteger(input.dropAfterChunks, 'dropAfterChunks');
  }
  if (input.omitUsage !== undefined) {
    if (typeof input.omitUsage !== 'boolean') throw new FaultSyntaxError('omitUsage must be a boolean.');
    spec.omitUsage = input.omitUsage;
  }
  if (input.keys !== undefined) {
    if (!Array.isArray(input.keys) || !input.keys.every((k) => typeof k === 'string')) {
      throw new FaultSyntaxError('keys must be an array of strings.');
    }
    spec.keys = [...input.keys];
  }
  if (input.count !== undefined) {
    const count = nonNegativeInteger(input.count, 'count');
    if (count < 1) throw new FaultSyntaxError('count must be at least 1.');
    spec.count = count;
  }
  return spec;
}

type DirectiveField = Exclude<keyof RequestDirectives, 'error' | 'omitUsage'>;

// Names shared by headers (`x-sim-` + hyphens) and inline directives (underscores).
const DIRECTIVE_NUMBERS: ReadonlyArray<readonly [name: string, field: DirectiveField, integer: boolean]> = [
  ['latency_ms', 'latencyMs', false],
  ['first_byte_delay_ms', 'firstByteDelayMs', false],
  ['chunk_delay_ms', 'chunkDelayMs', false],
  ['drop_after_chunks', 'dropAfterChunks', true],
  ['completion_tokens', 'completionTokens', true],
];

const HEADER_NUMBERS = DIRECTIVE_NUMBERS.map(
  ([name, field, integer]) => [`x-sim-${name.replaceAll('_', '-')}`, field, integer] as const,
);

/** Reads the `x-sim-*` request headers. Returns null when none is present (the common case). */
export function readHeaderDirectives(
  headers: Readonly<Record<string, string | string[] | undefined>>,
): RequestDirectives | null {
  let directives: RequestDirectives | null = null;
  for (const [header, field, integer] of HEADER_NUMBERS) {
    const raw = headers[header];
    if (typeof raw !== 'string') continue;
    directives ??= {};
    directives[field] = integer ? nonNegativeInteger(raw, header) : nonNegativeNumber(raw, header);
  }
  const fault = headers['x-sim-fault'];
  if (typeof fault === 'string') {
    directives ??= {};
    directives.error = fault === 'none' ? null : faultError(fault, 'x-sim-fault');
  }
  const omitUsage = headers['x-sim-omit-usage'];
  if (typeof omitUsage === 'string') {
    directives ??= {};
    directives.omitUsage = flag(omitUsage, 'x-sim-omit-usage');
  }
  return directives;
}

/** Cheap pre-check so callers only run the directive parser on text that may contain one. */
export const DIRECTIVE_MARKER = '[[sim:';

const DIRECTIVE_PATTERN = /\[\[sim:([^\]]*)\]\]/g;

/**
 * Parses every `[[sim: key=value ...]]` directive in `text`, merged in order. Returns null if there is
 * none. Throws {@link FaultSyntaxError} for unknown keys or malformed values.
 */
export function parseInlineDirectives(text: string): RequestDirectives | null {
  if (!text.includes(DIRECTIVE_MARKER)) return null;
  let directives: RequestDirectives | null = null;
  for (const match of text.matchAll(DIRECTIVE_PATTERN)) {
    directives ??= {};
    for (const pair of (match[1] ?? '').trim().split(/\s+/)) {
      if (pair === '') continue;
      const eq = pair.indexOf('=');
      if (eq <= 0) throw new FaultSyntaxError(`Invalid simulator directive pair: ${pair}.`);
      const key = pair.slice(0, eq).replaceAll('-', '_');
      const value = pair.slice(eq + 1);
      if (key === 'fault') {
        directives.error = value === 'none' ? null : faultError(value, 'fault');
        continue;
      }
      if (key === 'omit_usage') {
        directives.omitUsage = flag(value, key);
        continue;
      }
      const known = DIRECTIVE_NUMBERS.find(([name]) => name === key);
      if (known === undefined) throw new FaultSyntaxError(`Unknown simulator directive key: ${key}.`);
      const [, field, integer] = known;
      directives[field] = integer ? nonNegativeInteger(value, key) : nonNegativeNumber(value, key);
    }
  }
  return directives;
}

/** Merges directive sets in order; later ones win field by field. */
export function mergeDirectives(
  earlier: RequestDirectives | null,
  later: RequestDirectives | null,
): RequestDirectives | null {
  if (earlier === null) return later;
  if (later === null) return earlier;
  return { ...earlier, ...later };
}

function faultError(value: unknown, name: string): FaultError {
  if (typeof value === 'string' && (FAULT_ERRORS as readonly string[]).includes(value)) {
    return value as FaultError;
  }
  throw new FaultSyntaxError(
    `${name} must be one of ${FAULT_ERRORS.join(', ')}, got ${JSON.stringify(value)}.`,
  );
}

/** A 0/1 switch, written as an integer like every other directive value. */
function flag(value: string, name: string): boolean {
  const trimmed = value.trim();
  if (trimmed === '0' || trimmed === '1') return trimmed === '1';
  throw new FaultSyntaxError(`${name} must be 0 or 1, got ${JSON.stringify(value)}.`);
}

function nonNegativeNumber(value: unknown, name: string): number {
  const n = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isFinite(n) || n < 0) {
    throw new FaultSyntaxError(`${name} must be a non-negative number, got ${JSON.stringify(value)}.`);
  }
  return n;
}

function nonNegativeInteger(value: unknown, name: string): number {
  const n = nonNegativeNumber(value, name);
  if (!Number.isInteger(n)) {
    throw new FaultSyntaxError(`${name} must be a non-negative integer, got ${JSON.stringify(value)}.`);
  }
  return n;
}
