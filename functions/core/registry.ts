import { ModelNotFoundError, ServiceUnavailableError } from './errors.ts';
import { DEFAULT_PRICE_MIN_MARGIN, publishedRates } from './price-floor.ts';

/** What a model does; each kind is served by one endpoint. */
export type ModelKind = 'chat' | 'embedding' | 'transcription' | 'speech';

/**
 * Published rates in USD, per 1M tokens for chat and embeddings, per minute of audio for
 * transcription, per 1M characters (of `input` and `instructions`) for speech.
 */
export interface Rates {
  readonly input: number;
  readonly output?: number;
  /** Prompt-caching models: rate for cached input tokens. */
  readonly cachedInput?: number;
}

export const RATE_NAMES = ['input', 'output', 'cachedInput'] as const satisfies readonly (keyof Rates)[];

export interface ModelFlags {
  /** Zero billing: no hold, no debit. */
  readonly free?: boolean;
  /** Reasoning tier: the only way a client gets reasoning (spec §4 rule 1). */
  readonly reasoning?: boolean;
  readonly multimodal?: boolean;
  readonly promptCaching?: boolean;
  /** Adds the reply-in-the-user's-language system message when none is given (spec §4 rule 2). */
  readonly autoLanguage?: boolean;
}

export interface Model {
  readonly id: string;
  readonly family: string;
  readonly kind: ModelKind;
  /** Tokens; absent for audio models. */
  readonly contextWindow?: number;
  /** Embedding models: the vector length, and the most a request's `dimensions` may ask for. */
  readonly dimensions?: number;
  /** Completion cap when a request gives none; defaults to `DEFAULT_MAX_TOKENS` (core/chat.ts). */
  readonly defaultMaxTokens?: number;
  /**
   * Registry items hold the operator's list rates. In a Catalog they are the published rates (price floor
   * applied, see price-floor.ts), which billing uses; the list rates are kept in `listRates`.
   */
  readonly rates: Rates;
  /** Set by Catalog: the list rates before the price floor. */
  readonly listRates?: Rates;
  readonly flags: ModelFlags;
  readonly status: 'active' | 'retired';
  /** Unix seconds, for the model object's `created`. */
  readonly created: number;
}

export type AdapterName = 'openai-compatible' | 'anthropic';

/** Binds a model to one upstream provider endpoint. */
export interface Deployment {
  readonly id: string;
  readonly model: string;
  /**
   * Provider label, exposed in the `x-svc-provider` response header and kept in the settlement record (and its
   * attempts). The public usage report has no provider figures: it counts per model and pseudo-group (ADR 0008).
   */
  readonly provider: string;
  readonly adapter: AdapterName;
  /** Ends before the endpoint path, e.g. `https://api.example.com/v1`. */
  readonly baseUrl: string;
  readonly upstreamModel: string;
  /** Secret references (`env:NAME`, `secretsmanager:ID`), resolved once per cold start; never the keys. */
  readonly keyRefs: readonly string[];
  /** Lower is tried first. */
  readonly priority: number;
  /** Share of traffic among deployments of equal priority. */
  readonly weight: number;
  /** Upstream's own rates (USD, same units as `Rates`) as the operator configured them: an input to the price floor. */
  readonly cost?: Rates;
  /**
   * The provider's published rates as the price sync last read them: the other input to the price floor, which
   * takes the larger of the two per rate. Stored apart from the deployment's document (DynamoRegistry), so no
   * operator write — a registry file loaded with last month's costs, an edit of the weight — can put a lower cost
   * back under a price the provider raised; and never part of a registry file.
   */
  readonly syncedCost?: Rates;
  /** Extra upstream body fields sent only for reasoning-tier models, e.g. `{"reasoning_effort":"medium"}`. */
  readonly reasoningParams?: Readonly<Record<string, unknown>>;
  /**
   * The body field the completion cap goes upstream in (chat). `max_tokens` by default; OpenAI's reasoning models
   * refuse it and take `max_completion_tokens`, which also bounds their hidden reasoning.
   */
  readonly completionCapParam?: 'max_tokens' | 'max_completion_tokens';
  /**
   * Chat: client sampling fields this upstream refuses, left out of its body. OpenAI's reasoning models answer 400
   * to any temperature but 1 (and we send the spec's default, 0.7, when the client gives none), to `top_p` and to
   * the penalties; o3 and o4-mini also to `stop`. Sent anyway, every call to such a deployment would fail.
   */
  readonly omitParams?: readonly OmittableParam[];
  readonly timeouts?: DeploymentTimeouts;
  readonly status: 'active' | 'retired';
}

/** Whitelisted chat fields a deployment may leave out (`omitParams`): each only tunes sampling or stopping. */
export const OMITTABLE_PARAMS = [
  'temperature',
  'top_p',
  'presence_penalty',
  'frequency_penalty',
  'stop',
  'seed',
] as const;
export type OmittableParam = (typeof OMITTABLE_PARAMS)[number];

export interface DeploymentTimeouts {
  /** Upper bound on waiting for the first byte (headers for non-streams, first event for streams). */
  readonly firstByteMs?: number;
  /** Upper bound on silence between stream events once streaming. */
  readonly idleMs?: number;
}

/** A model resolved for one request, with the deployments that may serve it. */
export interface Resolved {
  readonly model: Model;
  readonly deployments: readonly Deployment[];
}

/**
 * An immutable snapshot of the registry. Handlers read it on the hot path without I/O; the adapter
 * replaces the snapshot in the background.
 */
export class Catalog {
  readonly models: ReadonlyMap<string, Model>;
  readonly #deployments: ReadonlyMap<string, readonly Deployment[]>;

  /** @param minMargin the price floor's minimum margin over upstream cost (price-floor.ts). */
  constructor(
    models: readonly Model[],
    deployments: readonly Deployment[],
    minMargin: number = DEFAULT_PRICE_MIN_MARGIN,
  ) {
    const byModel = new Map<string, Deployment[]>();
    for (const d of deployments) {
      if (d.status !== 'active') continue;
      const list = byModel.get(d.model) ?? [];
      list.push(d);
      byModel.set(d.model, list);
    }
    for (const list of byModel.values()) list.sort((a, b) => a.priority - b.priority);
    this.#deployments = byModel;
    this.models = new Map(
      models.map((m) => {
        const listRates = m.listRates ?? m.rates;
        const rates = publishedRates({ ...m, rates: listRates }, byModel.get(m.id) ?? [], minMargin);
        return [m.id, { ...m, rates, listRates }];
      }),
    );
  }

  get isEmpty(): boolean {
    return this.models.size === 0;
  }

  /**
   * The model a request names, checked against the endpoint's kind.
   * Unknown or retired → 404; known but with nothing to serve it (or an empty registry) → 503.
   */
  resolve(modelId: string, kind: ModelKind): Resolved {
    if (this.isEmpty)
      throw new ServiceUnavailableError(
        'No model is available: the model registry is empty.',
        undefined,
        'registry_empty',
      );
    const model = this.models.get(modelId);
    if (model?.status !== 'active') throw new ModelNotFoundError(modelId);
    if (model.kind !== kind) {
      const article = kind === 'embedding' ? 'an' : 'a';
      throw new ModelNotFoundError(
        modelId,
        `is not ${article} ${kind} model and cannot be used with this endpoint`,
      );
    }
    const deployments = this.#deployments.get(modelId) ?? [];
    if (deployments.length === 0) {
      throw new ServiceUnavailableError(`No deployment of \`${modelId}\` is available right now.`);
    }
    return { model, deployments };
  }

  /**
   * The listed (active) model of this kind that `modelId` names, if any, whether or not anything can serve it:
   * what a call is counted under in the usage report even when it fails before `resolve` returns (ADR 0008).
   * Any other string names no model.
   */
  named(modelId: string, kind: ModelKind): Model | null {
    const model = this.models.get(modelId);
    return model?.status === 'active' && model.kind === kind ? model : null;
  }

  /** Active models of a kind, for the catalog listing. */
  list(kind?: ModelKind): Model[] {
    return [...this.models.values()].filter(
      (m) => m.status === 'active' && (kind === undefined || m.kind === kind),
    );
  }
}

/** Strings in the order of their UTF-16 code units (as JavaScript's default sort): ids, model names. */
export const compareIds = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** Entries in the order of their ids. */
export const byId = (a: { readonly id: string }, b: { readonly id: string }): number =>
  compareIds(a.id, b.id);
