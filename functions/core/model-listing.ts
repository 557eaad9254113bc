import type { Model, ModelKind } from './registry.ts';

/** What a published rate is per, by kind (spec §2.1). */
const PRICE_UNIT: Readonly<Record<ModelKind, string>> = {
  chat: '1M tokens',
  embedding: '1M tokens',
  transcription: 'minute',
  speech: '1M characters',
};

/** Who a model is owned by, OpenAI's `owned_by`: its family (`svc` for the service's own models). */
export interface ModelObject {
  readonly id: string;
  readonly object: 'model';
  readonly created: number;
  readonly owned_by: string;
  readonly family: string;
  readonly kind: ModelKind;
  readonly context_window: number | null;
  /** Published USD rates (price floor applied) — exactly what a call is billed at. */
  readonly pricing: {
    readonly currency: 'USD';
    readonly unit: string;
    readonly input: number;
    readonly output?: number;
    readonly cached_input?: number;
  };
  readonly free: boolean;
  readonly reasoning: boolean;
  readonly multimodal: boolean;
  readonly prompt_caching: boolean;
}

/**
 * OpenAI's model object (`id`, `object`, `created`, `owned_by`) plus what a client needs to choose and budget:
 * kind, context window, published rates and flags. Extra fields are allowed by OpenAI's schema and ignored by
 * its SDKs.
 */
export const modelObject = (model: Model): ModelObject => ({
  id: model.id,
  object: 'model',
  created: model.created,
  owned_by: model.family,
  family: model.family,
  kind: model.kind,
  context_window: model.contextWindow ?? null,
  pricing: {
    currency: 'USD',
    unit: PRICE_UNIT[model.kind],
    input: model.rates.input,
    ...(model.rates.output === undefined ? {} : { output: model.rates.output }),
    ...(model.rates.cachedInput === undefined ? {} : { cached_input: model.rates.cachedInput }),
  },
  free: model.flags.free ?? false,
  reasoning: model.flags.reasoning ?? false,
  multimodal: model.flags.multimodal ?? false,
  prompt_caching: model.flags.promptCaching ?? false,
});
