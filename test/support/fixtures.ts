import type { Deployment, Model } from '#core/registry.ts';

/** A chat model for unit tests; override any field. */
export const chatModel = (overrides: Partial<Model> = {}): Model => ({
  id: 'famA-test',
  family: 'famA',
  kind: 'chat',
  contextWindow: 10_000,
  rates: { input: 1, output: 2 },
  flags: {},
  status: 'active',
  created: 0,
  ...overrides,
});

export const deployment = (overrides: Partial<Deployment> = {}): Deployment => ({
  id: 'famA-test@p1',
  model: 'famA-test',
  provider: 'p1',
  adapter: 'openai-compatible',
  baseUrl: 'http://upstream.invalid/v1',
  upstreamModel: 'upstream-model',
  keyRefs: ['env:K1'],
  priority: 1,
  weight: 1,
  status: 'active',
  ...overrides,
});

/** Counts tokens as whitespace-separated words: predictable arithmetic for estimate tests. */
export const wordCounter = { count: (text: string) => text.split(/\s+/).filter(Boolean).length };

/** A clock tests move by hand. */
export const manualClock = (start = 1_000_000) => {
  let now = start;
  return { now: () => now, advance: (ms: number) => (now += ms) };
};
