import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  parseRegistryFile,
  parseRegistryFileText,
  planLoad,
  RegistryFileError,
  toRegistryFile,
  usesSimulator,
} from '#adapters/registry-file.ts';
import { Catalog, type Model } from '#core/registry.ts';

const EXAMPLE = readFileSync(new URL('../../../registry/example.json', import.meta.url), 'utf8');
const CATALOG = readFileSync(new URL('../../../registry/catalog.json', import.meta.url), 'utf8');

const chat = (id: string, extra: Record<string, unknown> = {}) => ({
  id,
  family: id.split('-')[0],
  kind: 'chat',
  contextWindow: 131072,
  rates: { input: 1, output: 2 },
  ...extra,
});

const deployment = (id: string, model: string, extra: Record<string, unknown> = {}) => ({
  id,
  model,
  provider: 'prov',
  adapter: 'openai-compatible',
  baseUrl: 'https://api.prov.example/v1',
  upstreamModel: model,
  keyRefs: ['env:PROV_KEY'],
  cost: { input: 0.5, output: 1 },
  ...extra,
});

/** A valid file with `n` chat models, each with one deployment. */
const file = (n = 3) => ({
  models: Array.from({ length: n }, (_, i) => chat(`famX-${i}`)),
  deployments: Array.from({ length: n }, (_, i) => deployment(`famX-${i}@prov`, `famX-${i}`)),
});

/** The issues a file is refused with. */
const issues = (input: unknown, options = {}): readonly string[] => {
  try {
    parseRegistryFile(input, options);
  } catch (error) {
    if (error instanceof RegistryFileError) return error.issues;
    throw error;
  }
  throw new Error('the file was accepted');
};

describe('registry file', () => {
  it('accepts the shipped example, with defaults applied and the simulator placeholder substituted', () => {
    expect(usesSimulator(JSON.parse(EXAMPLE))).toBe(true);
    const registry = parseRegistryFileText(EXAMPLE, { simulatorUrl: 'http://127.0.0.1:4010' });
    expect(registry.warnings).toEqual([]);
    expect(registry.models.map((m) => m.id)).toEqual([
      'famA-v4.1-flash',
      'famA-v4.1-flash-1017',
      'famA-v4-flash-0731',
      'svc-embed',
    ]);
    expect(new Set(registry.deployments.map((d) => d.adapter))).toEqual(
      new Set(['openai-compatible', 'anthropic']),
    );
    const keyRefs = registry.deployments.flatMap((d) => d.keyRefs);
    expect(keyRefs.some((ref) => ref.startsWith('secretsmanager:'))).toBe(true);
    expect(keyRefs.some((ref) => ref.startsWith('env:'))).toBe(true);
    expect(registry.deployments.every((d) => d.cost !== undefined)).toBe(true);
    expect(registry.deployments.find((d) => d.id === 'famA-v4.1-flash@local-simulator')).toMatchObject({
      baseUrl: 'http://127.0.0.1:4010/p/sim-a/v1',
      weight: 1,
      status: 'active',
    });
    expect(registry.models.find((m) => m.id === 'famA-v4-flash-0731')?.status).toBe('retired');
  });

  it('accepts the catalog as a models-only file, warning that nothing serves its models', () => {
    const registry = parseRegistryFileText(CATALOG);
    expect(registry.models).toHaveLength(23);
    expect(registry.deployments).toEqual([]);
    expect(registry.warnings).toHaveLength(23);
    expect(registry.warnings[0]).toBe(
      'models[0]: "famA-v4.1-flash" has no active deployment: requests for it get 503',
    );
  });

  it('lets dated and build-suffixed ids coexist with the undated one, each resolving to itself', () => {
    const ids = ['famA-v4.1-flash', 'famA-v4.1-flash-1017', 'famA-v4-flash-0731'];
    const registry = parseRegistryFile({
      models: ids.map((id) => chat(id)),
      deployments: ids.map((id) => deployment(`${id}@prov`, id, { upstreamModel: `upstream-${id}` })),
    });
    const catalog = new Catalog(registry.models, registry.deployments);
    for (const id of ids) {
      const resolved = catalog.resolve(id, 'chat');
      expect(resolved.model.id).toBe(id);
      expect(resolved.deployments.map((d) => d.upstreamModel)).toEqual([`upstream-${id}`]);
    }
  });

  it('names the field of a schema error by its path', () => {
    const input = file(4);
    (input.deployments[3] as Record<string, unknown>).baseUrl = 'not a url';
    (input.models[1] as Record<string, unknown>).rates = { input: 'cheap', output: 2 };
    expect(issues(input)).toEqual([
      expect.stringMatching(/^models\[1\]\.rates\.input: .*expected number/),
      'deployments[3].baseUrl: Invalid URL',
    ]);
  });

  it('names an unknown field by its own path, at any depth', () => {
    const input = file(1);
    Object.assign(input.deployments[0] as object, { baseURL: 'https://x.example' });
    Object.assign(input.models[0] as object, { rates: { input: 1, output: 2, cached: 0.5 } });
    expect(issues({ ...input, version: 2 })).toEqual([
      'version: unknown field',
      'models[0].rates.cached: unknown field',
      'deployments[0].baseURL: unknown field',
    ]);
  });

  it('refuses a timeout no timer can wait (2³¹ ms or more fires at once, failing every call)', () => {
    const input = file(2);
    (input.deployments[0] as Record<string, unknown>).timeouts = { firstByteMs: 3_000_000_000 };
    (input.deployments[1] as Record<string, unknown>).timeouts = { idleMs: 2 ** 31 - 1 };
    expect(issues(input)).toEqual([expect.stringMatching(/^deployments\[0\]\.timeouts\.firstByteMs: /)]);
  });

  it('takes upstream model names as providers spell them, but no control characters', () => {
    const input = file(4);
    const names = [
      'meta-llama/Llama-3.1-8B-Instruct',
      'anthropic.claude-v2:1',
      '模型-7b',
      'm\r\nset-cookie: a=1',
    ];
    names.forEach((name, i) => {
      (input.deployments[i] as Record<string, unknown>).upstreamModel = name;
    });
    expect(issues(input)).toEqual([
      'deployments[3].upstreamModel: no control characters (line breaks, tabs) in an upstream model name',
    ]);
  });

  it('refuses a deployment of an unknown model', () => {
    const input = file(3);
    (input.deployments[2] as Record<string, unknown>).model = 'famZ';
    expect(issues(input)).toEqual(['deployments[2].model: unknown model "famZ"']);
  });

  it('refuses duplicate model and deployment ids, pointing at the first', () => {
    const input = file(3);
    input.models.push(chat('famX-1'));
    input.deployments.push(deployment('famX-0@prov', 'famX-2'));
    expect(issues(input)).toEqual([
      'models[3].id: duplicate model id "famX-1" (also models[1])',
      'deployments[3].id: duplicate deployment id "famX-0@prov" (also deployments[0])',
    ]);
  });

  it('refuses a deployment its adapter cannot serve', () => {
    const input = {
      models: [
        { id: 'svc-embed', family: 'svc', kind: 'embedding', dimensions: 1536, rates: { input: 0.05 } },
      ],
      deployments: [
        deployment('svc-embed@b', 'svc-embed', { adapter: 'anthropic', keyRefs: [], cost: undefined }),
      ],
    };
    expect(issues(input)).toEqual([
      'deployments[0].adapter: the anthropic adapter serves chat models only; "svc-embed" is an embedding model',
      'deployments[0].keyRefs: the anthropic adapter needs at least one key',
    ]);
  });

  it('refuses reasoning parameters outside the reasoning tier (spec §4 rule 1)', () => {
    const input = file(2);
    Object.assign(input.models[1] as object, { flags: { reasoning: true } });
    Object.assign(input.deployments[0] as object, { reasoningParams: { reasoning_effort: 'high' } });
    Object.assign(input.deployments[1] as object, { reasoningParams: { reasoning_effort: 'medium' } });
    expect(issues(input)).toEqual([
      'deployments[0].reasoningParams: only reasoning-tier models (flags.reasoning) take reasoning parameters',
    ]);
  });

  it.each([
    'https://user:secret@api.example.com/v1',
    'https://api.example.com/v1?api_key=secret',
    'https://api.example.com/v1#secret',
    // Empty, but still cutting every path appended to the URL.
    'https://api.example.com/v1?',
    'https://api.example.com/v1#',
  ])('refuses a base URL carrying credentials, a query or a fragment: %s', (baseUrl) => {
    const input = file(1);
    Object.assign(input.deployments[0] as object, { baseUrl });
    expect(issues(input)).toEqual([
      'deployments[0].baseUrl: no credentials, query or fragment in a base URL (upstream keys go in keyRefs)',
    ]);
  });

  it('refuses http for a deployment with keys unless it is on this machine: the keys would cross the network in clear', () => {
    const at = (baseUrl: string, keyRefs = ['env:PROV_KEY']) => {
      const input = file(1);
      Object.assign(input.deployments[0] as object, { baseUrl, keyRefs });
      return input;
    };
    expect(issues(at('http://api.prov.example/v1'))).toEqual([
      'deployments[0].baseUrl: a deployment with keys is called over https (over http only on this machine): its keys would cross the network in clear',
    ]);
    expect(issues(at('http://10.0.3.7:8000/v1'))).toHaveLength(1);
    for (const ok of ['http://127.0.0.1:8000/v1', 'http://localhost:11434/v1', 'http://[::1]:8000/v1'])
      expect(() => parseRegistryFile(at(ok))).not.toThrow();
    // Without keys there is nothing to leak: a self-hosted server on the network, as it is.
    expect(() => parseRegistryFile(at('http://10.0.3.7:8000/v1', []))).not.toThrow();
  });

  it('takes a completion cap field for chat deployments only', () => {
    const chatOnly = file(1);
    Object.assign(chatOnly.deployments[0] as object, { completionCapParam: 'max_completion_tokens' });
    expect(() => parseRegistryFile(chatOnly, {})).not.toThrow();
    const embedding = {
      models: [
        { id: 'svc-embed', family: 'svc', kind: 'embedding', dimensions: 1536, rates: { input: 0.05 } },
      ],
      deployments: [
        deployment('svc-embed@b', 'svc-embed', {
          completionCapParam: 'max_completion_tokens',
          cost: undefined,
        }),
      ],
    };
    expect(issues(embedding)).toEqual([
      'deployments[0].completionCapParam: "svc-embed" is an embedding model: only chat calls carry a completion cap',
    ]);
    const unknown = file(1);
    Object.assign(unknown.deployments[0] as object, { completionCapParam: 'max_output_tokens' });
    expect(issues(unknown)[0]).toMatch(/^deployments\[0\]\.completionCapParam: /);
  });

  it('takes fields to leave out of chat bodies, for chat deployments only and from the sampling fields', () => {
    const chatOnly = file(1);
    Object.assign(chatOnly.deployments[0] as object, { omitParams: ['temperature', 'top_p'] });
    expect(parseRegistryFile(chatOnly, {}).deployments[0]?.omitParams).toEqual(['temperature', 'top_p']);
    const embedding = {
      models: [
        { id: 'svc-embed', family: 'svc', kind: 'embedding', dimensions: 1536, rates: { input: 0.05 } },
      ],
      deployments: [deployment('svc-embed@b', 'svc-embed', { omitParams: ['temperature'], cost: undefined })],
    };
    expect(issues(embedding)).toEqual([
      'deployments[0].omitParams: "svc-embed" is an embedding model: only chat calls carry sampling fields',
    ]);
    // Never a field the call depends on: the model, its messages, the cap the hold was sized by.
    for (const field of ['messages', 'max_tokens', 'stream_options']) {
      const bad = file(1);
      Object.assign(bad.deployments[0] as object, { omitParams: [field] });
      expect(issues(bad)[0]).toMatch(/^deployments\[0\]\.omitParams\[0\]: /);
    }
  });

  it("refuses rates that contradict the model's flags or kind", () => {
    const input = {
      models: [
        chat('free-1', { flags: { free: true }, rates: { input: 0, output: 0.1 } }),
        chat('zero-1', { rates: { input: 0, output: 0 } }),
        chat('nooutput-1', { rates: { input: 1 } }),
        chat('nocontext-1', { contextWindow: undefined }),
        chat('cached-1', { rates: { input: 1, output: 2, cachedInput: 0.1 } }),
        {
          id: 'stt',
          family: 'svc',
          kind: 'transcription',
          contextWindow: 10,
          rates: { input: 0.001, output: 1 },
        },
      ],
    };
    expect(issues(input)).toEqual([
      'models[0].rates.output: a free model (flags.free) bills nothing: its rates must be 0',
      'models[1].rates: every rate is 0 but flags.free is not set (set it for a free model)',
      'models[2].rates.output: chat models need an output rate',
      'models[3].contextWindow: chat models need a context window (spec §2.1)',
      'models[4].rates.cachedInput: only prompt-caching models (flags.promptCaching) have a cached-input rate',
      'models[5].rates.output: only chat models have an output rate',
      'models[5].contextWindow: audio models have no context window',
    ]);
  });

  it("refuses a model named as one of the usage report's pseudo-groups", () => {
    const input = { models: [chat('agent-error'), chat('platform'), chat('incident'), chat('platform-1')] };
    expect(issues(input)).toEqual([
      'models[0].id: "agent-error" is one of the usage report\'s pseudo-groups (platform, incident, agent-error)',
      'models[1].id: "platform" is one of the usage report\'s pseudo-groups (platform, incident, agent-error)',
      'models[2].id: "incident" is one of the usage report\'s pseudo-groups (platform, incident, agent-error)',
    ]);
  });

  it('refuses a rate finer than the pico-dollar a call is billed in', () => {
    const input = {
      models: [
        chat('tiny-1', { rates: { input: 0.0000004, output: 1 } }),
        chat('fine-1', { rates: { input: 0.1234567, output: 0.3 } }),
        // Six decimals, also where the float is a hair off the grid (2.01 × 1e6 is 2009999.9999999998): fine.
        chat('grid-1', {
          rates: { input: 0.000001, output: 2.01, cachedInput: 0.000123 },
          flags: { promptCaching: true },
        }),
        { id: 'stt-1', family: 'svc', kind: 'transcription', rates: { input: 0.0000000000015 } },
        { id: 'stt-2', family: 'svc', kind: 'transcription', rates: { input: 0.000123456789 } },
        { id: 'stt-3', family: 'svc', kind: 'transcription', rates: { input: 0.000123456789012 } },
      ],
    };
    expect(issues(input)).toEqual([
      'models[0].rates.input: at most 6 decimals: calls are billed in whole pico-dollars',
      'models[1].rates.input: at most 6 decimals: calls are billed in whole pico-dollars',
      'models[3].rates.input: at most 12 decimals: calls are billed in whole pico-dollars',
      'models[5].rates.input: at most 12 decimals: calls are billed in whole pico-dollars',
    ]);
  });

  it("refuses upstream cost rates the model's kind has no use for", () => {
    const input = {
      models: [{ id: 'svc-tts', family: 'svc', kind: 'speech', rates: { input: 25 } }],
      deployments: [
        deployment('svc-tts@prov', 'svc-tts', { cost: { input: 10, output: 1, cachedInput: 1 } }),
      ],
    };
    expect(issues(input)).toEqual([
      'deployments[0].cost.output: "svc-tts" is a speech model: only chat models have an output rate',
      'deployments[0].cost.cachedInput: "svc-tts" does not cache prompts (flags.promptCaching)',
    ]);
  });

  it('reports every problem at once in file order, still cross-checking around an entry that failed its schema', () => {
    const input = file(4);
    Object.assign(input.models[0] as object, { kind: 'video' });
    Object.assign(input.deployments[1] as object, { model: 'famZ' });
    Object.assign(input.deployments[3] as object, { baseUrl: 'ftp://files.example' });
    const refused = issues(input);
    expect(refused).toEqual([
      expect.stringMatching(/^models\[0\]\.kind: /),
      'deployments[1].model: unknown model "famZ"',
      'deployments[3].baseUrl: Invalid URL',
    ]);
    // models[0] failed its schema but its deployment is not blamed for it.
    expect(refused.some((issue) => issue.startsWith('deployments[0]'))).toBe(false);
  });

  it('refuses malformed JSON and a file without models', () => {
    expect(() => parseRegistryFileText('{"models": [', { source: 'bad.json' })).toThrow(
      /^bad\.json is not a valid registry file:\n {2}\(root\): not JSON: /,
    );
    expect(issues({ deployments: [] })).toEqual([expect.stringMatching(/^models: /)]);
  });

  it('warns about an active model nobody serves and a paid deployment without cost, and accepts them', () => {
    const input = file(2);
    input.deployments.pop();
    delete (input.deployments[0] as Record<string, unknown>).cost;
    expect(parseRegistryFile(input).warnings).toEqual([
      'models[1]: "famX-1" has no active deployment: requests for it get 503',
      'deployments[0].cost: no upstream cost: the price floor cannot protect the margin on "famX-0"',
    ]);
  });
});

describe('{{SIMULATOR_URL}}', () => {
  const withPlaceholder = (baseUrl: string) => {
    const input = file(1);
    Object.assign(input.deployments[0] as object, { baseUrl });
    return input;
  };

  it('is substituted in baseUrl, without doubling a slash', () => {
    const registry = parseRegistryFile(withPlaceholder('{{SIMULATOR_URL}}/p/sim-a/v1'), {
      simulatorUrl: 'http://127.0.0.1:4010/',
    });
    expect(registry.deployments[0]?.baseUrl).toBe('http://127.0.0.1:4010/p/sim-a/v1');
    expect(usesSimulator(withPlaceholder('{{ SIMULATOR_URL }}/v1'))).toBe(true);
    expect(usesSimulator(file(1))).toBe(false);
  });

  it('is refused where no simulator URL is known, once, for the placeholder', () => {
    expect(issues(withPlaceholder('{{SIMULATOR_URL}}/v1'))).toEqual([
      "deployments[0].baseUrl: {{SIMULATOR_URL}} has no value here; only the local host (npm start) knows its simulator's URL",
    ]);
  });

  it('is the only placeholder', () => {
    expect(issues(withPlaceholder('{{UPSTREAM}}/v1'), { simulatorUrl: 'http://127.0.0.1:1' })).toEqual([
      'deployments[0].baseUrl: unknown placeholder {{UPSTREAM}} (the only one is {{SIMULATOR_URL}})',
    ]);
  });
});

describe('planLoad', () => {
  const current = parseRegistryFile(file(3));

  it('writes only what is new or changed, and leaves unlisted entries alone without replace', () => {
    const next = file(4);
    Object.assign(next.models[0] as object, { rates: { input: 1.5, output: 2 } });
    next.models.splice(2, 1);
    next.deployments.splice(2, 1);
    const plan = planLoad(current, parseRegistryFile(next), { replace: false });
    expect(plan.conflicts).toEqual([]);
    expect(plan.models.map((m) => m.id)).toEqual(['famX-0', 'famX-3']);
    expect(plan.deployments.map((d) => d.id)).toEqual(['famX-3@prov']);
    expect(plan.summary.models).toEqual({ added: 1, updated: 1, unchanged: 1, retired: 0 });
  });

  it('with replace, retires (never deletes) the active entries the file no longer lists', () => {
    const next = file(2);
    const plan = planLoad(current, parseRegistryFile(next), { replace: true });
    expect(plan.models).toEqual([expect.objectContaining({ id: 'famX-2', status: 'retired' })]);
    expect(plan.deployments).toEqual([expect.objectContaining({ id: 'famX-2@prov', status: 'retired' })]);
    expect(plan.summary.deployments).toEqual({ added: 0, updated: 0, unchanged: 2, retired: 1 });
    // Already retired entries are not written again.
    const retired = {
      models: [
        ...current.models.slice(0, 2),
        { ...(current.models[2] as Model), status: 'retired' as const },
      ],
      deployments: current.deployments.slice(0, 2),
    };
    expect(planLoad(retired, parseRegistryFile(next), { replace: true }).models).toEqual([]);
  });

  it('refuses to move a deployment to another model', () => {
    const next = file(3);
    Object.assign(next.deployments[0] as object, { model: 'famX-1' });
    expect(planLoad(current, parseRegistryFile(next), { replace: false }).conflicts).toEqual([
      expect.stringMatching(/^deployments\[0\]\.model: deployment "famX-0@prov" belongs to model "famX-0"/),
    ]);
  });
});

describe('toRegistryFile', () => {
  it('exports a registry as a file that loads back to the same entries', () => {
    const registry = parseRegistryFileText(EXAMPLE, { simulatorUrl: 'http://127.0.0.1:4010' });
    const shuffled = {
      models: [...registry.models].reverse(),
      deployments: [...registry.deployments].reverse(),
    };
    const exported = JSON.parse(JSON.stringify(toRegistryFile(shuffled)));
    const reloaded = parseRegistryFile(exported);
    expect(exported.models.map((m: { id: string }) => m.id)).toEqual(
      [...registry.models.map((m) => m.id)].sort(),
    );
    expect(planLoad(registry, reloaded, { replace: true }).summary).toEqual({
      models: { added: 0, updated: 0, unchanged: 4, retired: 0 },
      deployments: { added: 0, updated: 0, unchanged: 7, retired: 0 },
    });
  });
});
