import type { Rates } from '#core/registry.ts';
import type { PriceSource, UpstreamTarget } from '#core/upstream.ts';
import type { KeyRing } from './key-ring.ts';

/** A price list is small; anything bigger is not one. */
const MAX_BODY_BYTES = 8 * 1024 * 1024;
const TIMEOUT_MS = 10_000;

/**
 * Reads an OpenAI-compatible provider's model list (`GET {baseUrl}/models`) for prices. There is no standard
 * field, so the conventions in use are read, in a `{ data: [...] }` list or a bare array (Together's):
 *
 * - `pricing: { input, output, cached_input }`: USD per 1M tokens (Together and others);
 * - `metadata.pricing: { input_tokens, output_tokens, cache_read_tokens }`: USD per 1M tokens (DeepInfra);
 * - `pricing: { prompt, completion, input_cache_read }`: USD per token, often as strings (OpenRouter-style).
 *
 * Entries without a readable input price are skipped. A provider whose list carries no prices at all (OpenAI
 * itself) gives `null`: the operator's configured cost then stands. Not on the request path: plain `fetch`.
 */
export class OpenAiCompatiblePrices implements PriceSource {
  readonly #keys: KeyRing;

  constructor(keys: KeyRing) {
    this.#keys = keys;
  }

  async prices(target: UpstreamTarget): Promise<ReadonlyMap<string, Rates> | null> {
    const key = await this.#keys.key(target.deployment, target.keyIndex);
    const response = await fetch(`${target.deployment.baseUrl.replace(/\/+$/, '')}/models`, {
      headers: { accept: 'application/json', ...(key === null ? {} : { authorization: `Bearer ${key}` }) },
      signal: target.signal ?? AbortSignal.timeout(TIMEOUT_MS),
    });
    if (!response.ok) {
      // Read no further, and let the connection go now rather than when the body is collected.
      // (A connection reset meanwhile is no news: the status is.)
      await response.body?.cancel().catch(() => {});
      throw new Error(`price list: upstream answered ${response.status}`);
    }
    return parsePriceList(JSON.parse(await boundedText(response, MAX_BODY_BYTES)));
  }
}

/** The body as text, refused past `limit` bytes — a chunked reply states no length to check first. */
const boundedText = async (response: Response, limit: number): Promise<string> => {
  if (Number(response.headers.get('content-length') ?? 0) > limit) {
    await response.body?.cancel().catch(() => {});
    throw new Error('price list: response too large');
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of response.body ?? []) {
    size += chunk.length;
    // Leaving the loop by a throw cancels the body.
    if (size > limit) throw new Error('price list: response too large');
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, size).toString('utf8');
};

const number = (value: unknown): number | undefined => {
  const n = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
  return typeof n === 'number' && Number.isFinite(n) && n >= 0 ? n : undefined;
};

/** Per-token figures become per-1M ones; rounding to 1e-9 removes binary noise from the multiplication. */
const perMillion = (perToken: number | undefined) =>
  perToken === undefined ? undefined : Math.round(perToken * 1e6 * 1e9) / 1e9;

const ratesOf = (pricing: Record<string, unknown>): Rates | null => {
  if (number(pricing.input_tokens) !== undefined) {
    const output = number(pricing.output_tokens);
    const cachedInput = number(pricing.cache_read_tokens);
    return {
      input: number(pricing.input_tokens) as number,
      ...(output === undefined ? {} : { output }),
      ...(cachedInput === undefined ? {} : { cachedInput }),
    };
  }
  const perM = number(pricing.input) !== undefined;
  const input = perM ? number(pricing.input) : perMillion(number(pricing.prompt));
  if (input === undefined) return null;
  const output = perM ? number(pricing.output) : perMillion(number(pricing.completion));
  const cachedInput = perM ? number(pricing.cached_input) : perMillion(number(pricing.input_cache_read));
  return {
    input,
    ...(output === undefined ? {} : { output }),
    ...(cachedInput === undefined ? {} : { cachedInput }),
  };
};

export const parsePriceList = (body: unknown): ReadonlyMap<string, Rates> | null => {
  const data = Array.isArray(body) ? body : (body as { data?: unknown } | null)?.data;
  if (!Array.isArray(data))
    throw new Error('price list: expected a model list (a `data` array, or an array of models)');
  const prices = new Map<string, Rates>();
  for (const entry of data) {
    const {
      id,
      pricing: own,
      metadata,
    } = (entry ?? {}) as {
      id?: unknown;
      pricing?: unknown;
      metadata?: { pricing?: unknown } | null;
    };
    const pricing = own ?? metadata?.pricing;
    if (typeof id !== 'string' || pricing === null || typeof pricing !== 'object') continue;
    const rates = ratesOf(pricing as Record<string, unknown>);
    if (rates) prices.set(id, rates);
  }
  return prices.size > 0 ? prices : null;
};
