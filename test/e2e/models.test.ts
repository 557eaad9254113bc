import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { schemaErrors } from '#test/openapi-schemas.ts';
import { startTestStack, type TestStack } from '#test/stack.ts';

/** Spec §2.1: every chat model with its input and output rate (USD per 1M tokens) and context window. */
const SPEC_CHAT_MODELS: [string, number, number, number][] = [
  ['famA-v4.1-flash', 0.25, 0.8, 1_048_576],
  ['famA-v4.1-flash-1017', 0.3, 0.85, 1_048_576],
  ['famA-v4-flash-0731', 0.09, 0.15, 1_048_576],
  ['svc-free-famA', 0, 0, 1_048_576],
  ['famB-5.3-flash', 0.25, 0.7, 327_680],
  ['famC-k3', 3.85, 19.25, 1_048_576],
  ['famD-5-preview', 1.25, 3.3, 1_048_576],
  ['famE-v2.6-pro', 0.6, 1.2, 1_048_576],
  ['famF3.8-27b', 0.4, 0.4, 1_001_536],
  ['famG-4-argon', 2.5, 12.0, 1_048_576],
  ['famH-nemotron-3.5-super-vl', 0.5, 1.25, 1_048_576],
  ['famB-5.3', 1.2, 5.5, 1_048_576],
  ['famB-5.2', 1.0, 3.2, 1_048_576],
  ['svc-pro-20b', 0.2, 0.2, 131_072],
  ['svc-pro-120b', 0.3, 0.3, 131_072],
  ['svc-famF-27b', 0.4, 0.4, 262_144],
  ['svc-famF-max', 6.0, 12.0, 1_048_576],
  ['svc-auto', 0.4, 0.4, 262_144],
  ['svc-auto-pro', 6.0, 12.0, 1_048_576],
  ['svc-code-35b', 1.0, 1.0, 262_144],
];

interface ListedModel extends OpenAI.Models.Model {
  family: string;
  kind: string;
  context_window: number | null;
  pricing: { currency: string; unit: string; input: number; output?: number; cached_input?: number };
  free: boolean;
  reasoning: boolean;
  multimodal: boolean;
  prompt_caching: boolean;
}

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack();
});
afterAll(() => t?.stop());

describe('GET /v1/models (openai SDK)', () => {
  it('lists every chat model of spec §2.1 with its published rates and context window', async () => {
    const models: ListedModel[] = [];
    for await (const m of t.openai().models.list()) models.push(m as ListedModel);
    const chat = models.filter((m) => m.kind === 'chat');
    expect(chat.map((m) => [m.id, m.pricing.input, m.pricing.output, m.context_window]).sort()).toEqual(
      [...SPEC_CHAT_MODELS].sort(),
    );
    for (const m of models) {
      expect(m).toMatchObject({ object: 'model', owned_by: m.family });
      expect(Number.isInteger(m.created)).toBe(true);
    }
    // In the order of their ids, whatever order the registry's table returns them in: a person reads the list.
    const ids = models.map((m) => m.id);
    expect(ids).toEqual([...ids].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
  });

  it('lists the utility models with their own units, and the flags of §2.1', async () => {
    const page = await t.openai().models.list();
    const byId = new Map(page.data.map((m) => [m.id, m as ListedModel]));
    expect(byId.get('svc-embed')).toMatchObject({
      kind: 'embedding',
      pricing: { currency: 'USD', unit: '1M tokens', input: 0.05 },
    });
    expect(byId.get('svc-stt')).toMatchObject({
      kind: 'transcription',
      context_window: null,
      pricing: { unit: 'minute', input: 0.001 },
    });
    expect(byId.get('svc-tts')).toMatchObject({
      kind: 'speech',
      pricing: { unit: '1M characters', input: 25 },
    });
    expect(byId.get('famF3.8-27b')).toMatchObject({
      multimodal: true,
      prompt_caching: true,
      pricing: { input: 0.4, output: 0.4, cached_input: 0.1 },
    });
    expect(byId.get('svc-free-famA')).toMatchObject({ free: true });
    expect(byId.get('svc-famF-max')).toMatchObject({ reasoning: true });
    expect(byId.get('famA-v4.1-flash')).toMatchObject({
      free: false,
      reasoning: false,
      multimodal: false,
      prompt_caching: false,
    });
    expect(page.data).toHaveLength(SPEC_CHAT_MODELS.length + 3);
  });

  it('validates against OpenAI’s ListModelsResponse and Model schemas', async () => {
    const headers = { authorization: `Bearer ${t.apiKey}` };
    const list = await (await fetch(`${t.baseURL}/models`, { headers })).json();
    expect(schemaErrors('ListModelsResponse', list)).toBe('');
    const one = await (await fetch(`${t.baseURL}/models/famC-k3`, { headers })).json();
    expect(schemaErrors('Model', one)).toBe('');
  });

  it('retrieves one model, dated builds alongside the undated id', async () => {
    const client = t.openai();
    const [undated, build1017, build0731] = (await Promise.all([
      client.models.retrieve('famA-v4.1-flash'),
      client.models.retrieve('famA-v4.1-flash-1017'),
      client.models.retrieve('famA-v4-flash-0731'),
    ])) as ListedModel[];
    expect(undated).toMatchObject({ id: 'famA-v4.1-flash', pricing: { input: 0.25, output: 0.8 } });
    expect(build1017).toMatchObject({ id: 'famA-v4.1-flash-1017', pricing: { input: 0.3, output: 0.85 } });
    expect(build0731).toMatchObject({ id: 'famA-v4-flash-0731', pricing: { input: 0.09, output: 0.15 } });
  });

  it('answers 404, not 500, for an id with a malformed escape', async () => {
    const res = await fetch(`${t.baseURL}/models/%E0%A4%A`, {
      headers: { authorization: `Bearer ${t.apiKey}` },
    });
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('model_not_found');
  });

  it('reads trailing slashes as none, and a run of slashes inside the path as part of the id', async () => {
    const get = (path: string) =>
      fetch(`${t.baseURL}${path}`, { headers: { authorization: `Bearer ${t.apiKey}` } });
    expect((await get('/models///')).status).toBe(200);
    expect((await get('/models/famA-v4.1-flash//')).status).toBe(200);
    // Once a quadratic regex's worst case (~0.3 s of one instance's time each); now a plain 404.
    const res = await get(`/models/${'/'.repeat(16_000)}x`);
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('model_not_found');
  });

  it('answers 404 model_not_found for an unknown id', async () => {
    const error = await t
      .openai()
      .models.retrieve('famZ-nope')
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
    expect((error as InstanceType<typeof OpenAI.NotFoundError>).code).toBe('model_not_found');
  });

  it('requires a valid key like every endpoint', async () => {
    const error = await t
      .openai({ apiKey: 'svc_live_not-a-real-key-000000000000' })
      .models.list()
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
    const res = await fetch(`${t.baseURL}/models/famC-k3`);
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('invalid_api_key');
  });

  it('drops a retired model from the list and answers 404 for it, after the registry refresh', async () => {
    const registry = t.stack.container.registryStore;
    const { models } = await registry.load();
    const model = models.find((m) => m.id === 'famB-5.2');
    expect(model).toBeDefined();
    await registry.put([{ ...(model as NonNullable<typeof model>), status: 'retired' }], []);
    await t.stack.container.registry.refresh();
    const page = await t.openai().models.list();
    expect(page.data.map((m) => m.id)).not.toContain('famB-5.2');
    const res = await fetch(`${t.baseURL}/models/famB-5.2`, {
      headers: { authorization: `Bearer ${t.apiKey}` },
    });
    expect(res.status).toBe(404);
  });
});
