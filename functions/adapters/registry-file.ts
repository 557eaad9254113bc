import { z } from 'zod';
import { byId, compareIds, type Deployment, type Model, type ModelKind, RATE_NAMES } from '#core/registry.ts';
import { PSEUDO_GROUPS } from '#core/usage-aggregates.ts';
import { deploymentSchema, formatPath, issueList, modelSchema } from './registry-codec.ts';

/**
 * The registry file (`REGISTRY_FILE`, `npm run admin -- registry load`): `{ "models": [...], "deployments":
 * [...] }`, documented field by field in docs/registry.md. This module is pure — no file system, no DynamoDB —
 * so the local host, the admin CLI and the tests validate a registry the same way, and every problem is
 * reported with the path of the field at fault (`deployments[3].baseUrl: Invalid URL`).
 */

/** A whole registry: what a file holds, and what `DynamoRegistry.load` returns. */
export interface Registry {
  readonly models: readonly Model[];
  readonly deployments: readonly Deployment[];
}

/** Stands for the local host's upstream simulator in a deployment's `baseUrl` (no trailing slash). */
export const SIMULATOR_URL_PLACEHOLDER = '{{SIMULATOR_URL}}';

export interface RegistryFileOptions {
  /**
   * What `{{SIMULATOR_URL}}` stands for. Only the local host knows it: elsewhere a placeholder is an error,
   * so a file meant for the simulator cannot be loaded into a real registry by mistake.
   */
  readonly simulatorUrl?: string;
  /** Names the file in error messages. */
  readonly source?: string;
}

/** The file is refused: `issues` has one line per problem, each starting with the field's path. */
export class RegistryFileError extends Error {
  override readonly name = 'RegistryFileError';
  readonly issues: readonly string[];

  constructor(source: string, issues: readonly string[]) {
    super(`${source} is not a valid registry file:\n${issues.map((issue) => `  ${issue}`).join('\n')}`);
    this.issues = issues;
  }
}

export interface ParsedRegistryFile extends Registry {
  /** Accepted but probably not meant (e.g. an active model nobody can serve); shown to the operator. */
  readonly warnings: readonly string[];
}

/** Entries are parsed one by one, so a bad entry does not hide the cross-checks of the others. */
const fileSchema = z.object({
  /** Free text for the people who maintain the file; ignored. */
  description: z.string().optional(),
  models: z.array(z.unknown()),
  deployments: z.array(z.unknown()).default([]),
});
const FILE_FIELDS: ReadonlySet<string> = new Set(Object.keys(fileSchema.shape));

const PLACEHOLDER = /\{\{\s*([A-Za-z0-9_]+)\s*\}\}/g;

/** True when some deployment's `baseUrl` points at the local host's simulator. */
export const usesSimulator = (input: unknown): boolean =>
  deploymentsOf(input).some(
    (d) => typeof d.baseUrl === 'string' && /\{\{\s*SIMULATOR_URL\s*\}\}/.test(d.baseUrl),
  );

const deploymentsOf = (input: unknown): Record<string, unknown>[] => {
  const deployments = (input as { deployments?: unknown } | null)?.deployments;
  return Array.isArray(deployments)
    ? deployments.filter((d): d is Record<string, unknown> => typeof d === 'object' && d !== null)
    : [];
};

/** Substitutes `{{SIMULATOR_URL}}` in every `baseUrl`; returns the substituted copy and what could not be. */
const substitute = (input: unknown, simulatorUrl: string | undefined): { doc: unknown; issues: string[] } => {
  const issues: string[] = [];
  const raw = (input as { deployments?: unknown } | null)?.deployments;
  if (!Array.isArray(raw)) return { doc: input, issues };
  const deployments = raw.map((d: unknown, i) => {
    if (typeof d !== 'object' || d === null) return d;
    const { baseUrl } = d as { baseUrl?: unknown };
    if (typeof baseUrl !== 'string' || !baseUrl.includes('{{')) return d;
    const replaced = baseUrl.replace(PLACEHOLDER, (match, name: string) => {
      const path = `deployments[${i}].baseUrl`;
      if (name !== 'SIMULATOR_URL') {
        issues.push(`${path}: unknown placeholder ${match} (the only one is ${SIMULATOR_URL_PLACEHOLDER})`);
      } else if (simulatorUrl === undefined) {
        issues.push(
          `${path}: ${SIMULATOR_URL_PLACEHOLDER} has no value here; only the local host (npm start) knows its simulator's URL`,
        );
      } else return simulatorUrl.replace(/\/+$/, '');
      return match;
    });
    return { ...d, baseUrl: replaced };
  });
  return { doc: { ...(input as object), deployments }, issues };
};

/**
 * Validates a parsed registry file: the field schemas of registry-codec.ts, then the cross-checks of
 * `checkRegistry`. Throws `RegistryFileError` listing every problem; returns the entries with defaults applied
 * and `{{SIMULATOR_URL}}` substituted.
 */
export const parseRegistryFile = (input: unknown, options: RegistryFileOptions = {}): ParsedRegistryFile => {
  const source = options.source ?? 'the registry file';
  const { doc, issues: placeholderIssues } = substitute(input, options.simulatorUrl);
  const file = fileSchema.safeParse(doc);
  if (!file.success) throw new RegistryFileError(source, issueList(file.error));
  const schemaIssues = Object.keys(doc as object)
    .filter((key) => !FILE_FIELDS.has(key))
    .map((key) => `${key}: unknown field`);
  const parseEach = <T>(collection: 'models' | 'deployments', schema: z.ZodType<T, unknown>) =>
    file.data[collection].flatMap((entry, index) => {
      const parsed = schema.safeParse(entry);
      if (parsed.success) return [{ index, entry: parsed.data }];
      schemaIssues.push(...issueList(parsed.error, `${collection}[${index}]`));
      return [];
    });
  const models = parseEach<Model>('models', modelSchema);
  const deployments = parseEach<Deployment>('deployments', deploymentSchema);
  // A model that failed its schema still names an id: its deployments are not "unknown model" on top.
  const unparsedModelIds = file.data.models.flatMap((m) => {
    const id = (m as { id?: unknown } | null)?.id;
    return typeof id === 'string' ? [id] : [];
  });
  const { errors, warnings } = checkEntries(models, deployments, unparsedModelIds);
  // A field whose placeholder could not be substituted is reported once, for the placeholder.
  const reported = new Set(placeholderIssues.map(fieldOf));
  const issues = [
    ...placeholderIssues,
    ...schemaIssues.filter((issue) => !reported.has(fieldOf(issue))),
    ...errors.map((e) => describeIssue(e)),
  ];
  if (issues.length > 0) throw new RegistryFileError(source, issues.sort(byPosition));
  return {
    models: models.map((m) => m.entry),
    deployments: deployments.map((d) => d.entry),
    warnings: warnings.map((w) => describeIssue(w)).sort(byPosition),
  };
};

const fieldOf = (issue: string) => issue.slice(0, issue.indexOf(': '));

/** File order: models before deployments, then by position (a stable sort keeps an entry's own order). */
const byPosition = (a: string, b: string) => position(a) - position(b);
const position = (issue: string): number => {
  const match = /^(models|deployments)\[(\d+)\]/.exec(issue);
  if (!match) return -1;
  return (match[1] === 'models' ? 0 : 1e9) + Number(match[2]);
};

/** `parseRegistryFile` for the file's text; malformed JSON is refused like any other problem. */
export const parseRegistryFileText = (text: string, options: RegistryFileOptions = {}): ParsedRegistryFile =>
  parseRegistryFile(parseRegistryJson(text, options.source), options);

/** The file's JSON, or a `RegistryFileError` saying why it is not JSON. */
export const parseRegistryJson = (text: string, source = 'the registry file'): unknown => {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new RegistryFileError(source, [
      `(root): not JSON: ${error instanceof Error ? error.message : String(error)}`,
    ]);
  }
};

/** A problem with one entry of a registry, located by collection and index. */
export interface RegistryIssue {
  readonly collection: 'models' | 'deployments';
  readonly index: number;
  /** The field inside the entry, e.g. `rates.output`; empty when it is about the entry as a whole. */
  readonly field: string;
  readonly message: string;
}

/** Names an entry in a message; the default is its position in the file (`deployments[3]`). */
export type EntryLabel = (issue: RegistryIssue) => string;

const positionLabel: EntryLabel = (issue) => formatPath([issue.collection, issue.index]);

export const describeIssue = (issue: RegistryIssue, label: EntryLabel = positionLabel): string =>
  `${label(issue)}${issue.field ? `.${issue.field}` : ''}: ${issue.message}`;

const CHAT_ONLY_FLAGS = ['reasoning', 'multimodal', 'promptCaching', 'autoLanguage'] as const;
const AUDIO: ReadonlySet<ModelKind> = new Set(['transcription', 'speech']);

/**
 * What the field schemas cannot see: identity and references across entries, and combinations that would
 * bill or route wrongly. Errors make a registry unusable; warnings describe a registry that works but
 * probably not as meant. Positions refer to `registry.models` and `registry.deployments`.
 */
export const checkRegistry = (registry: Registry): { errors: RegistryIssue[]; warnings: RegistryIssue[] } =>
  checkEntries(
    registry.models.map((entry, index) => ({ index, entry })),
    registry.deployments.map((entry, index) => ({ index, entry })),
  );

interface Positioned<T> {
  readonly index: number;
  readonly entry: T;
}

const checkEntries = (
  models: readonly Positioned<Model>[],
  deployments: readonly Positioned<Deployment>[],
  unparsedModelIds: readonly string[] = [],
): { errors: RegistryIssue[]; warnings: RegistryIssue[] } => {
  const errors: RegistryIssue[] = [];
  const warnings: RegistryIssue[] = [];
  const modelError = (index: number, field: string, message: string) =>
    errors.push({ collection: 'models', index, field, message });
  const deploymentError = (index: number, field: string, message: string) =>
    errors.push({ collection: 'deployments', index, field, message });

  const byId = new Map<string, Positioned<Model>>();
  for (const { index, entry: m } of models) {
    const first = byId.get(m.id);
    if (first) modelError(index, 'id', `duplicate model id "${m.id}" (also models[${first.index}])`);
    else byId.set(m.id, { index, entry: m });
    checkModel(m, (field, message) => modelError(index, field, message));
  }

  const deploymentIndex = new Map<string, number>();
  const served = new Set<string>();
  for (const { index, entry: d } of deployments) {
    const first = deploymentIndex.get(d.id);
    if (first !== undefined) {
      deploymentError(index, 'id', `duplicate deployment id "${d.id}" (also deployments[${first}])`);
    } else deploymentIndex.set(d.id, index);
    const model = byId.get(d.model)?.entry;
    if (!model) {
      if (!unparsedModelIds.includes(d.model)) deploymentError(index, 'model', `unknown model "${d.model}"`);
      continue;
    }
    checkDeployment(d, model, (field, message) => deploymentError(index, field, message));
    if (d.status !== 'active') continue;
    served.add(d.model);
    if (model.status === 'active' && !model.flags.free && d.cost === undefined) {
      warnings.push({
        collection: 'deployments',
        index,
        field: 'cost',
        message: `no upstream cost: the price floor cannot protect the margin on "${d.model}"`,
      });
    }
  }

  for (const { index, entry: m } of models) {
    if (m.status === 'active' && !served.has(m.id)) {
      warnings.push({
        collection: 'models',
        index,
        field: '',
        message: `"${m.id}" has no active deployment: requests for it get 503`,
      });
    }
  }
  return { errors, warnings };
};

/** Decimals a rate may have: per 1M units, a pico-dollar is the sixth; per minute of audio, the twelfth. */
const rateDecimals = (kind: ModelKind): number => (kind === 'transcription' ? 12 : 6);

const onPicoGrid = (usd: number, kind: ModelKind): boolean => {
  const scaled = usd * 10 ** rateDecimals(kind);
  // A tolerance for binary fractions: 2.01 × 1e6 is 2009999.9999999998.
  return Math.abs(scaled - Math.round(scaled)) <= 8 * Number.EPSILON * Math.max(1, Math.abs(scaled));
};

const checkModel = (m: Model, error: (field: string, message: string) => void) => {
  // Its faults would merge into the pseudo-group's rows of the usage report, or vanish with the callers' errors.
  if (PSEUDO_GROUPS.has(m.id))
    error('id', `"${m.id}" is one of the usage report's pseudo-groups (${[...PSEUDO_GROUPS].join(', ')})`);
  const rates = RATE_NAMES.filter((name) => m.rates[name] !== undefined);
  if (m.flags.free) {
    for (const name of rates) {
      if (m.rates[name] !== 0)
        error(`rates.${name}`, 'a free model (flags.free) bills nothing: its rates must be 0');
    }
  } else if (rates.every((name) => m.rates[name] === 0)) {
    error('rates', 'every rate is 0 but flags.free is not set (set it for a free model)');
  }
  // Calls are billed in whole pico-dollars per unit (pricing.ts): a finer rate would be rounded on every call,
  // and one under half a pico-dollar per token (0.0000004 per 1M) would bill nothing on a paid model.
  for (const name of rates) {
    if (!onPicoGrid(m.rates[name] as number, m.kind))
      error(
        `rates.${name}`,
        `at most ${rateDecimals(m.kind)} decimals: calls are billed in whole pico-dollars`,
      );
  }
  if (m.kind === 'chat') {
    if (m.contextWindow === undefined)
      error('contextWindow', 'chat models need a context window (spec §2.1)');
    if (m.rates.output === undefined && !m.flags.free)
      error('rates.output', 'chat models need an output rate');
    if (
      m.defaultMaxTokens !== undefined &&
      m.contextWindow !== undefined &&
      m.defaultMaxTokens > m.contextWindow
    ) {
      error('defaultMaxTokens', `exceeds the context window (${m.contextWindow})`);
    }
  } else {
    if (m.rates.output !== undefined) error('rates.output', `only chat models have an output rate`);
    if (m.defaultMaxTokens !== undefined) error('defaultMaxTokens', 'only chat models have a completion cap');
    for (const flag of CHAT_ONLY_FLAGS)
      if (m.flags[flag]) error(`flags.${flag}`, 'only chat models take this flag');
  }
  if (AUDIO.has(m.kind) && m.contextWindow !== undefined) {
    error('contextWindow', 'audio models have no context window');
  }
  if (m.kind !== 'embedding' && m.dimensions !== undefined) {
    error('dimensions', 'only embedding models have dimensions');
  }
  if (m.rates.cachedInput !== undefined && !m.flags.promptCaching) {
    error('rates.cachedInput', 'only prompt-caching models (flags.promptCaching) have a cached-input rate');
  }
};

const checkDeployment = (d: Deployment, model: Model, error: (field: string, message: string) => void) => {
  if (d.adapter === 'anthropic') {
    if (model.kind !== 'chat') {
      error(
        'adapter',
        `the anthropic adapter serves chat models only; "${model.id}" is ${aKind(model)} model`,
      );
    }
    if (d.keyRefs.length === 0) error('keyRefs', 'the anthropic adapter needs at least one key');
  }
  // Spec §4 rule 1: reasoning is on only for reasoning-tier models, so only they may carry its parameters.
  if (d.reasoningParams !== undefined && !model.flags.reasoning) {
    error('reasoningParams', `only reasoning-tier models (flags.reasoning) take reasoning parameters`);
  }
  if (d.completionCapParam !== undefined && model.kind !== 'chat') {
    error(
      'completionCapParam',
      `"${model.id}" is ${aKind(model)} model: only chat calls carry a completion cap`,
    );
  }
  if (d.omitParams !== undefined && model.kind !== 'chat') {
    error('omitParams', `"${model.id}" is ${aKind(model)} model: only chat calls carry sampling fields`);
  }
  if (d.cost?.output !== undefined && model.kind !== 'chat') {
    error('cost.output', `"${model.id}" is ${aKind(model)} model: only chat models have an output rate`);
  }
  if (d.cost?.cachedInput !== undefined && !model.flags.promptCaching) {
    error('cost.cachedInput', `"${model.id}" does not cache prompts (flags.promptCaching)`);
  }
};

const aKind = (model: Model) => `${/^[aeiou]/.test(model.kind) ? 'an' : 'a'} ${model.kind}`;

/** Counts of what a load did to one collection. */
export interface LoadCounts {
  readonly added: number;
  readonly updated: number;
  readonly unchanged: number;
  readonly retired: number;
}

export interface LoadPlan {
  /** Entries to write (new, changed, or retired because the file no longer lists them). */
  readonly models: Model[];
  readonly deployments: Deployment[];
  readonly summary: { readonly models: LoadCounts; readonly deployments: LoadCounts };
  /** The ids `replace` retires because the file no longer lists them. */
  readonly retiring: { readonly models: readonly string[]; readonly deployments: readonly string[] };
  /** Models active once the plan is written: none means every call would be refused. */
  readonly activeModels: number;
  /** Problems that refuse the load, named by the file's field paths. */
  readonly conflicts: string[];
}

/**
 * What loading `file` into a registry that holds `current` writes. Upserts every entry of the file; with
 * `replace`, active entries the file does not list are retired — never deleted, so settlements and usage that
 * name them stay meaningful. A deployment is stored under its model, so a file that moves one to another model
 * is refused (give it a new id) rather than leaving two entries with the same id.
 */
/** A deployment as an operator writes it: without the synced price the price sync keeps beside it. */
const documentOf = (d: Deployment): Deployment => {
  const { syncedCost: _synced, ...document } = d;
  return document;
};

export const planLoad = (current: Registry, file: Registry, options: { replace: boolean }): LoadPlan => {
  const conflicts: string[] = [];
  const currentDeployments = new Map(current.deployments.map((d) => [d.id, d]));
  file.deployments.forEach((d, i) => {
    const existing = currentDeployments.get(d.id);
    if (existing && existing.model !== d.model) {
      conflicts.push(
        `deployments[${i}].model: deployment "${d.id}" belongs to model "${existing.model}" in the registry; ` +
          'a deployment cannot move to another model (retire it and give the new one another id)',
      );
    }
  });
  const models = diff(current.models, file.models, options.replace);
  // Synced prices are the price sync's, beside the documents a file writes: not part of the comparison.
  const deployments = diff(current.deployments.map(documentOf), file.deployments, options.replace);
  const after = new Map(current.models.map((m) => [m.id, m.status]));
  for (const m of models.write) after.set(m.id, m.status);
  return {
    models: models.write,
    deployments: deployments.write,
    summary: { models: models.counts, deployments: deployments.counts },
    retiring: { models: models.retiring, deployments: deployments.retiring },
    activeModels: [...after.values()].filter((status) => status === 'active').length,
    conflicts,
  };
};

const diff = <T extends { readonly id: string; readonly status: 'active' | 'retired' }>(
  current: readonly T[],
  file: readonly T[],
  replace: boolean,
): { write: T[]; counts: LoadCounts; retiring: string[] } => {
  const before = new Map(current.map((entry) => [entry.id, entry]));
  const listed = new Set(file.map((entry) => entry.id));
  const write: T[] = [];
  let added = 0;
  let updated = 0;
  let unchanged = 0;
  const retiring: string[] = [];
  for (const entry of file) {
    const existing = before.get(entry.id);
    if (!existing) added++;
    else if (canonicalJson(existing) === canonicalJson(entry)) {
      unchanged++;
      continue;
    } else updated++;
    write.push(entry);
  }
  if (replace) {
    for (const entry of current) {
      if (listed.has(entry.id) || entry.status === 'retired') continue;
      write.push({ ...entry, status: 'retired' });
      retiring.push(entry.id);
    }
  }
  return {
    write,
    counts: { added, updated, unchanged, retired: retiring.length },
    retiring: retiring.sort(),
  };
};

/** JSON with object keys sorted, so two documents compare equal whatever order their fields came in. */
export const canonicalJson = (value: unknown): string =>
  JSON.stringify(value, (_key, v: unknown) =>
    typeof v === 'object' && v !== null && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );

/**
 * A registry as a registry file: every entry (retired ones too, so loading the file back changes nothing),
 * fields in the schema's order, models by id and deployments by model, priority and id.
 */
export const toRegistryFile = (
  registry: Registry,
  options: { readonly simulatorUrl?: string } = {},
): { models: Model[]; deployments: Deployment[] } => {
  const simulator = options.simulatorUrl?.replace(/\/+$/, '');
  // A deployment on the local host's simulator is written back as the placeholder it was loaded from: the
  // simulator's port changes with every `npm start`, and a file naming this one's would point the next at
  // nothing.
  const portable = (baseUrl: string): string =>
    simulator && (baseUrl === simulator || baseUrl.startsWith(`${simulator}/`))
      ? SIMULATOR_URL_PLACEHOLDER + baseUrl.slice(simulator.length)
      : baseUrl;
  return {
    models: [...registry.models].sort(byId).map((m) => modelSchema.parse(m) as Model),
    deployments: [...registry.deployments]
      .sort((a, b) => compareIds(a.model, b.model) || a.priority - b.priority || compareIds(a.id, b.id))
      .map((d) => {
        const parsed = deploymentSchema.parse(documentOf(d)) as Deployment;
        return { ...parsed, baseUrl: portable(parsed.baseUrl) };
      }),
  };
};
