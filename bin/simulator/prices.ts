/**
 * The simulated providers' price lists, so the gateway's price sync has something real to read:
 *
 * - `GET /v1/models` and `GET /p/<provider>/v1/models` (bearer key required): an OpenAI model list whose
 *   entries carry `pricing: { input, output, cached_input }` in USD per 1M tokens (the Together/DeepInfra
 *   convention) for every model priced for that provider;
 * - `PUT /_sim/prices/<provider>` with `{ "<model>": { "input": 0.2, "output": 0.5, "cachedInput": 0.05 } }`
 *   (or `null` for a model) merges into that provider's list; `DELETE /_sim/prices` forgets every list.
 */
import { INVALID_JSON_ERROR, invalidRequestError, MISSING_API_KEY_ERROR } from '#sim/errors.ts';
import { bearerKey, type Exchange, parseJson, readBody, sendJson } from '#sim/http.ts';
import { PROVIDER_PATTERN, type Route } from '#sim/router.ts';

export interface SimPrice {
  input: number;
  output?: number;
  cachedInput?: number;
}

export type PriceLists = Record<string, Record<string, SimPrice>>;

export class PriceStore {
  readonly #lists = new Map<string, Map<string, SimPrice>>();

  constructor(initial: PriceLists = {}) {
    for (const [provider, list] of Object.entries(initial)) this.set(provider, list);
  }

  set(provider: string, prices: Record<string, SimPrice | null>): void {
    const list = this.#lists.get(provider) ?? new Map<string, SimPrice>();
    for (const [model, price] of Object.entries(prices)) {
      if (price === null) list.delete(model);
      else list.set(model, checkPrice(model, price));
    }
    this.#lists.set(provider, list);
  }

  clear(): void {
    this.#lists.clear();
  }

  list(provider: string): [string, SimPrice][] {
    return [...(this.#lists.get(provider) ?? new Map<string, SimPrice>())];
  }
}

export class PriceSyntaxError extends Error {}

const rate = (value: unknown): value is number =>
  typeof value === 'number' && Number.isFinite(value) && value >= 0;

const checkPrice = (model: string, price: unknown): SimPrice => {
  const p = price as Partial<SimPrice> | null;
  if (p === null || typeof p !== 'object' || !rate(p.input)) {
    throw new PriceSyntaxError(`price of ${model}: "input" must be a number >= 0 (USD per 1M tokens)`);
  }
  for (const field of ['output', 'cachedInput'] as const) {
    if (p[field] !== undefined && !rate(p[field])) {
      throw new PriceSyntaxError(`price of ${model}: "${field}" must be a number >= 0`);
    }
  }
  return {
    input: p.input,
    ...(p.output === undefined ? {} : { output: p.output }),
    ...(p.cachedInput === undefined ? {} : { cachedInput: p.cachedInput }),
  };
};

const modelList = (prices: PriceStore, provider: string) => ({
  object: 'list',
  data: prices.list(provider).map(([id, p]) => ({
    id,
    object: 'model',
    created: 1_700_000_000,
    owned_by: provider,
    pricing: {
      input: p.input,
      ...(p.output === undefined ? {} : { output: p.output }),
      ...(p.cachedInput === undefined ? {} : { cached_input: p.cachedInput }),
    },
  })),
});

export function createPriceRoutes(prices: PriceStore): Route[] {
  const list = (ex: Exchange, provider: string) => {
    if (bearerKey(ex.req.headers.authorization) === null) return sendJson(ex, 401, MISSING_API_KEY_ERROR);
    sendJson(ex, 200, modelList(prices, provider));
  };
  return [
    { method: 'GET', pattern: /^\/v1\/models$/, handle: (ex) => list(ex, 'default') },
    {
      method: 'GET',
      pattern: new RegExp(`^/p/(${PROVIDER_PATTERN})/v1/models$`),
      handle: (ex, [provider = '']) => list(ex, provider),
    },
    {
      method: 'PUT',
      pattern: new RegExp(`^/_sim/prices/(${PROVIDER_PATTERN})$`),
      handle: async (ex, [provider = '']) => {
        const body = parseJson(await readBody(ex.req));
        if (body === undefined || body === null || typeof body !== 'object' || Array.isArray(body)) {
          return sendJson(ex, 400, INVALID_JSON_ERROR);
        }
        try {
          prices.set(provider, body as Record<string, SimPrice | null>);
        } catch (error) {
          if (!(error instanceof PriceSyntaxError)) throw error;
          return sendJson(ex, 400, invalidRequestError(error.message));
        }
        sendJson(ex, 200, { ok: true });
      },
    },
    {
      method: 'DELETE',
      pattern: /^\/_sim\/prices$/,
      handle: (ex) => {
        prices.clear();
        sendJson(ex, 200, { ok: true });
      },
    },
  ];
}
