/**
 * The admin CLI's registry commands: `registry`, `models` and `deployments` (see REGISTRY_USAGE and
 * docs/registry.md). Everything written is validated first — field schemas and the registry's cross-checks —
 * and refused with the field at fault; nothing is ever deleted, only retired.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { DynamoDBClient, type DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import type { z } from 'zod';
import { DynamoRegistry, type RegistryContents } from '#adapters/dynamo-registry.ts';
import { deploymentSchema, issueList, modelSchema } from '#adapters/registry-codec.ts';
import {
  checkRegistry,
  describeIssue,
  type LoadCounts,
  parseRegistryFileText,
  planLoad,
  type RegistryIssue,
  toRegistryFile,
  usesSimulator,
} from '#adapters/registry-file.ts';
import { byId, compareIds, type Deployment, type Model, type Rates } from '#core/registry.ts';
import { tables } from '#lib/resources.ts';
import { localClientConfig } from '#local/emulators.ts';
import { type CommandSpec, checkCommandLine } from './command-line.ts';
import { runningLocalStack } from './local-stack.ts';
import { UsageError } from './usage-error.ts';

export const REGISTRY_GROUPS: ReadonlySet<string> = new Set(['registry', 'models', 'deployments']);

export const REGISTRY_USAGE = `  registry check FILE
  registry load FILE [--replace] [--dry-run]
  registry export
  models list [--all]
  models show MODEL_ID
  models add --json '{…}' | --file FILE
  models update MODEL_ID --json '{partial}' | --file FILE
  models retire MODEL_ID
  deployments list [--model MODEL_ID] [--all]
  deployments show DEPLOYMENT_ID
  deployments add --json '{…}' | --file FILE
  deployments update DEPLOYMENT_ID --json '{partial}' | --file FILE
  deployments retire DEPLOYMENT_ID`;

/** What each command takes: an argument more or a flag it does not read is a mistake, never silently ignored. */
const COMMANDS: Readonly<Record<string, CommandSpec>> = {
  'registry check': { args: 1 },
  'registry load': { args: 1, flags: ['replace', 'dry-run'] },
  'registry export': { args: 0 },
  'models list': { args: 0, flags: ['all'] },
  'models show': { args: 1 },
  'models add': { args: 0, flags: ['json', 'file'] },
  'models update': { args: 1, flags: ['json', 'file'] },
  'models retire': { args: 1 },
  'deployments list': { args: 0, flags: ['model', 'all'] },
  'deployments show': { args: 1 },
  'deployments add': { args: 0, flags: ['json', 'file'] },
  'deployments update': { args: 1, flags: ['json', 'file'] },
  'deployments retire': { args: 1 },
};

/**
 * How long the gateway may serve the old registry: twice its snapshot's refresh period (REGISTRY_REFRESH_MS), as it
 * serves the snapshot while a refresh runs (dynamo-registry.ts).
 */
const VISIBILITY_NOTE = 'the gateway sees the change within twice REGISTRY_REFRESH_MS (30 s by default)';

interface Target {
  readonly client: DynamoDBClientConfig;
  readonly table: string;
  /** What `{{SIMULATOR_URL}}` stands for: SIMULATOR_URL, or the simulator of the `npm start` stack. */
  readonly simulatorUrl: string | undefined;
  /** The `npm start` stack (which resolves `env:` key references), not a deployed stage (which refuses them). */
  readonly local: boolean;
}

const target = (env: NodeJS.ProcessEnv): Target => {
  const table = env[tables.registry.envVar];
  if (table) return { client: {}, table, simulatorUrl: env.SIMULATOR_URL, local: false };
  // The accounting tables named mean a deployed stage: its registry is not to be mistaken for the local stack's.
  const stageTables = [tables.accounts, tables.wallet, tables.buckets, tables.usage].filter(
    (t) => env[t.envVar],
  );
  if (stageTables.length > 0)
    throw new UsageError(
      `Set ${tables.registry.envVar} too: ${stageTables.map((t) => t.envVar).join(', ')} name a deployed stage.`,
    );
  const stack = runningLocalStack();
  if (stack) {
    return {
      client: localClientConfig(stack.emulators.dynamodb),
      table: stack.resources.tables.registry,
      simulatorUrl: env.SIMULATOR_URL ?? stack.simulatorUrl ?? undefined,
      local: true,
    };
  }
  throw new UsageError(
    `No target: start the local stack (npm start) or set ${tables.registry.envVar} and AWS_* variables.`,
  );
};

/**
 * A deployed stage's functions refuse `env:` key references (functions/adapters/secrets.ts): such a deployment
 * fails every call there and fallback skips it. Accepted (the same file may serve the local host), but said.
 */
const warnEnvKeyRefs = (deployments: readonly Deployment[], where: Target, warn: (line: string) => void) => {
  if (where.local) return;
  for (const d of deployments) {
    const refs = d.keyRefs.filter((ref) => ref.startsWith('env:'));
    if (refs.length > 0)
      warn(
        `warning: deployment "${d.id}" keys ${refs.join(', ')}: deployed functions refuse env: references ` +
          '(use secretsmanager:ID); every call to it will fail over to another deployment',
      );
  }
};

/**
 * Runs one registry command; returns what goes to stdout. Warnings (accepted, but probably not meant) go to
 * `warn`; refusals are thrown — `UsageError` for a wrong command line or a refused value, `RegistryFileError` for an
 * invalid file, `RegistryConflictError` for a taken or missing id — and exit 2 alike (`refused` in bin/admin.ts).
 */
export const runRegistryCommand = async (
  argv: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
  warn: (line: string) => void = (line) => console.error(line),
): Promise<string> => {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (error) {
    throw new UsageError(`${error instanceof Error ? error.message : String(error)}\n${usage()}`);
  }
  const { positionals, values } = parsed;
  // Before anything is read: a wrong command line needs no registry.
  const name = checkCommandLine(COMMANDS, positionals, values, usage());
  const args = positionals.slice(2);
  const need = (i: number, what: string): string => {
    const value = args[i];
    if (!value) throw new UsageError(`missing ${what}\n${usage()}`);
    return value;
  };

  // Checking a file needs no registry at all.
  if (name === 'registry check') {
    const file = need(0, 'FILE');
    const text = readText(file);
    const placeholder = usesSimulator(safeJson(text));
    const registry = parseRegistryFileText(text, {
      source: file,
      ...(placeholder ? { simulatorUrl: 'http://127.0.0.1:0' } : {}),
    });
    for (const warning of registry.warnings) warn(`warning: ${warning}`);
    return `${file}: valid, ${registry.models.length} models and ${registry.deployments.length} deployments${
      placeholder ? ' (uses {{SIMULATOR_URL}}: only the local host can load it as is)' : ''
    }`;
  }

  const where = target(env);
  const client = new DynamoDBClient(where.client);
  const registry = new DynamoRegistry(client, where.table);
  const current = async (): Promise<RegistryContents> => {
    const contents = await registry.load();
    for (const item of contents.invalid) warn(`warning: unreadable registry item skipped: ${item}`);
    return contents;
  };
  try {
    switch (name) {
      case 'registry load': {
        const file = need(0, 'FILE');
        const parsedFile = parseRegistryFileText(readText(file), {
          source: file,
          ...(where.simulatorUrl ? { simulatorUrl: where.simulatorUrl } : {}),
        });
        for (const warning of parsedFile.warnings) warn(`warning: ${warning}`);
        warnEnvKeyRefs(parsedFile.deployments, where, warn);
        const plan = planLoad(await current(), parsedFile, { replace: values.replace ?? false });
        if (plan.conflicts.length > 0) {
          throw new UsageError(
            `${file} cannot be loaded:\n${plan.conflicts.map((c) => `  ${c}`).join('\n')}`,
          );
        }
        // A registry with no active model refuses every call (503): an empty or truncated file given --replace,
        // most likely. Retiring models one by one stays possible.
        if (plan.activeModels === 0)
          throw new UsageError(
            `${file} cannot be loaded: it would leave no active model, and every call would be refused` +
              (values.replace ? ' (--replace retires every model the file does not list)' : ''),
          );
        const dryRun = values['dry-run'] ?? false;
        if (!dryRun) await registry.put(plan.models, plan.deployments);
        return [
          dryRun ? `${file} would load (dry run: nothing written)` : `loaded ${file}; ${VISIBILITY_NOTE}`,
          `  models:      ${counts(plan.summary.models)}`,
          `  deployments: ${counts(plan.summary.deployments)}`,
          ...(plan.retiring.models.length > 0
            ? [`  retired models:      ${plan.retiring.models.join(', ')}`]
            : []),
          ...(plan.retiring.deployments.length > 0
            ? [`  retired deployments: ${plan.retiring.deployments.join(', ')}`]
            : []),
        ].join('\n');
      }
      case 'registry export': {
        const contents = await current();
        const { errors } = checkRegistry(contents);
        for (const error of errors) warn(`warning: a load would refuse ${describeIssue(error)}`);
        return JSON.stringify(
          toRegistryFile(contents, where.simulatorUrl ? { simulatorUrl: where.simulatorUrl } : {}),
          null,
          2,
        );
      }

      case 'models list': {
        const { models, deployments } = await current();
        const active = countActive(deployments);
        const rows = models
          .filter((m) => values.all || m.status === 'active')
          .sort(byId)
          .map((m) => [
            m.id,
            m.kind,
            m.family,
            m.status,
            rate(m.rates.input),
            rate(m.rates.output),
            rate(m.rates.cachedInput),
            m.contextWindow === undefined ? '-' : String(m.contextWindow),
            flagList(m),
            String(active.get(m.id) ?? 0),
          ]);
        return table(
          ['ID', 'KIND', 'FAMILY', 'STATUS', 'INPUT', 'OUTPUT', 'CACHED', 'CONTEXT', 'FLAGS', 'DEPLOYMENTS'],
          rows,
        );
      }
      case 'models show': {
        const id = need(0, 'MODEL_ID');
        const model = await registry.getModel(id);
        if (!model) throw new UsageError(`no model "${id}"`);
        return JSON.stringify(model, null, 2);
      }
      case 'models add': {
        const input = readDocument(values);
        // A model added now was created now; a registry file's default (a fixed date) keeps files reproducible.
        const doc =
          isObject(input) && input.created === undefined ? { ...input, created: nowSeconds() } : input;
        const model = parseEntry<Model>(modelSchema, doc, 'model');
        const contents = await current();
        if (contents.models.some((m) => m.id === model.id)) {
          throw new UsageError(`model "${model.id}" already exists (models update changes it)`);
        }
        const merged = { models: [...contents.models, model], deployments: contents.deployments };
        refuseIssues(merged, 'model', contents.models.length, warn, () => false);
        await registry.addModel(model);
        return JSON.stringify(model, null, 2);
      }
      case 'models update': {
        const id = need(0, 'MODEL_ID');
        const patch = readDocument(values);
        const contents = await current();
        const index = contents.models.findIndex((m) => m.id === id);
        const existing = contents.models[index];
        if (!existing) throw new UsageError(`no model "${id}"`);
        const model = parseEntry<Model>(modelSchema, applyPatch(existing, patch, id), 'model');
        const models = contents.models.with(index, model);
        refuseIssues(
          { models, deployments: contents.deployments },
          'model',
          index,
          warn,
          (d) => d.model === id,
        );
        await registry.replaceModel(model);
        return JSON.stringify(model, null, 2);
      }
      case 'models retire': {
        const id = need(0, 'MODEL_ID');
        const model = await registry.retireModel(id);
        warn(`retired model ${id}: requests for it get 404 model_not_found; ${VISIBILITY_NOTE}`);
        return JSON.stringify(model, null, 2);
      }

      case 'deployments list': {
        const { models, deployments } = await current();
        if (values.model && !models.some((m) => m.id === values.model)) {
          throw new UsageError(`no model "${values.model}"`);
        }
        const rows = deployments
          .filter((d) => (values.all || d.status === 'active') && (!values.model || d.model === values.model))
          .sort((a, b) => compareIds(a.model, b.model) || a.priority - b.priority || compareIds(a.id, b.id))
          .map((d) => [
            d.id,
            d.model,
            d.provider,
            d.adapter,
            String(d.priority),
            String(d.weight),
            String(d.keyRefs.length),
            costOf(d.cost),
            d.status,
            d.baseUrl,
          ]);
        return table(
          ['ID', 'MODEL', 'PROVIDER', 'ADAPTER', 'PRIORITY', 'WEIGHT', 'KEYS', 'COST', 'STATUS', 'BASE URL'],
          rows,
        );
      }
      case 'deployments show': {
        const id = need(0, 'DEPLOYMENT_ID');
        const deployment = await registry.findDeployment(id);
        if (!deployment) throw new UsageError(`no deployment "${id}"`);
        return JSON.stringify(deployment, null, 2);
      }
      case 'deployments add': {
        const deployment = parseEntry<Deployment>(deploymentSchema, readDocument(values), 'deployment');
        const contents = await current();
        if (contents.deployments.some((d) => d.id === deployment.id)) {
          throw new UsageError(
            `deployment "${deployment.id}" already exists (deployments update changes it)`,
          );
        }
        const merged = { models: contents.models, deployments: [...contents.deployments, deployment] };
        refuseIssues(merged, 'deployment', contents.deployments.length, warn, () => false);
        warnEnvKeyRefs([deployment], where, warn);
        await registry.addDeployment(deployment);
        return JSON.stringify(deployment, null, 2);
      }
      case 'deployments update': {
        const id = need(0, 'DEPLOYMENT_ID');
        const patch = readDocument(values);
        const contents = await current();
        const index = contents.deployments.findIndex((d) => d.id === id);
        const existing = contents.deployments[index];
        if (!existing) throw new UsageError(`no deployment "${id}"`);
        const doc = applyPatch(existing, patch, id);
        if (isObject(doc) && doc.model !== existing.model) {
          throw new UsageError(
            `model: deployment "${id}" belongs to model "${existing.model}" and cannot move to another model ` +
              '(retire it and add a deployment with another id)',
          );
        }
        const deployment = parseEntry<Deployment>(deploymentSchema, doc, 'deployment');
        const deployments = contents.deployments.with(index, deployment);
        refuseIssues({ models: contents.models, deployments }, 'deployment', index, warn, () => false);
        warnEnvKeyRefs([deployment], where, warn);
        await registry.replaceDeployment(deployment);
        return JSON.stringify(deployment, null, 2);
      }
      case 'deployments retire': {
        const id = need(0, 'DEPLOYMENT_ID');
        const found = await registry.findDeployment(id);
        if (!found) throw new UsageError(`no deployment "${id}"`);
        const deployment = await registry.retireDeployment(found);
        warn(`retired deployment ${id}; ${VISIBILITY_NOTE}`);
        return JSON.stringify(deployment, null, 2);
      }
      default:
        throw new UsageError(usage());
    }
  } finally {
    client.destroy();
  }
};

const parse = (argv: readonly string[]) =>
  parseArgs({
    args: [...argv],
    allowPositionals: true,
    options: {
      json: { type: 'string' },
      file: { type: 'string' },
      replace: { type: 'boolean' },
      'dry-run': { type: 'boolean' },
      all: { type: 'boolean' },
      model: { type: 'string' },
    },
  });

const usage = () => `usage: npm run admin -- <command>\n${REGISTRY_USAGE}`;

const readText = (file: string): string => {
  try {
    return readFileSync(file, 'utf8');
  } catch (error) {
    throw new UsageError(`cannot read ${file}: ${error instanceof Error ? error.message : String(error)}`);
  }
};

const safeJson = (text: string): unknown => {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
};

/** The document of `--json '{…}'` or `--file FILE`. */
const readDocument = (values: { json?: string | undefined; file?: string | undefined }): unknown => {
  if (values.json !== undefined && values.file !== undefined)
    throw new UsageError('give --json or --file, not both');
  const text = values.json ?? (values.file === undefined ? undefined : readText(values.file));
  if (text === undefined)
    throw new UsageError(`give the document as --json '{…}' or --file FILE\n${usage()}`);
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new UsageError(
      `the document is not JSON: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
};

const parseEntry = <T>(schema: z.ZodType<T, unknown>, doc: unknown, what: string): T => {
  const parsed = schema.safeParse(doc);
  if (!parsed.success) {
    throw new UsageError(
      `invalid ${what}:\n${issueList(parsed.error)
        .map((issue) => `  ${issue}`)
        .join('\n')}`,
    );
  }
  return parsed.data;
};

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * JSON Merge Patch (RFC 7386) of a stored entry: objects merge field by field, `null` removes a field, anything
 * else replaces it. The id is the entry's identity and cannot change.
 */
const applyPatch = (entry: object, patch: unknown, id: string): unknown => {
  if (!isObject(patch)) throw new UsageError('the update must be a JSON object of the fields to change');
  if (patch.id !== undefined && patch.id !== id) throw new UsageError(`id: "${id}" cannot be renamed`);
  return mergePatch(entry, patch);
};

const mergePatch = (target: unknown, patch: unknown): unknown => {
  if (!isObject(patch)) return patch;
  const result: Record<string, unknown> = isObject(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete result[key];
    else result[key] = mergePatch(result[key], value);
  }
  return result;
};

/**
 * Runs the registry's cross-checks on the registry as it would be after the change, and refuses the change
 * on any error about the entry being written (`subject`) or the deployments it affects (`affects`). Problems
 * elsewhere in the registry are not this command's business.
 */
const refuseIssues = (
  registry: { models: readonly Model[]; deployments: readonly Deployment[] },
  subject: 'model' | 'deployment',
  index: number,
  warn: (line: string) => void,
  affects: (d: Deployment) => boolean,
) => {
  const collection = subject === 'model' ? 'models' : 'deployments';
  const relevant = (issue: RegistryIssue) =>
    (issue.collection === collection && issue.index === index) ||
    (issue.collection === 'deployments' && affects(registry.deployments[issue.index] as Deployment));
  const label = (issue: RegistryIssue) =>
    issue.collection === collection && issue.index === index
      ? ''
      : issue.collection === 'models'
        ? `model "${registry.models[issue.index]?.id}"`
        : `deployment "${registry.deployments[issue.index]?.id}"`;
  const text = (issue: RegistryIssue) => {
    const name = label(issue);
    const path = name && issue.field ? `${name}.${issue.field}` : name || issue.field || subject;
    return `${path}: ${issue.message}`;
  };
  const { errors, warnings } = checkRegistry(registry);
  const refused = errors.filter(relevant);
  if (refused.length > 0)
    throw new UsageError(`invalid ${subject}:\n${refused.map((e) => `  ${text(e)}`).join('\n')}`);
  const own = (issue: RegistryIssue) => issue.collection === collection && issue.index === index;
  for (const warning of warnings.filter(own)) warn(`warning: ${text(warning)}`);
};

const counts = (c: LoadCounts) =>
  `${c.added} added, ${c.updated} updated, ${c.unchanged} unchanged, ${c.retired} retired`;

const countActive = (deployments: readonly Deployment[]) => {
  const active = new Map<string, number>();
  for (const d of deployments) if (d.status === 'active') active.set(d.model, (active.get(d.model) ?? 0) + 1);
  return active;
};

const rate = (usd: number | undefined) => (usd === undefined ? '-' : String(usd));

/** `input/output`, with `/cachedInput` when there is one; `-` for a rate not given. */
const costOf = (cost: Rates | undefined) =>
  cost === undefined
    ? '-'
    : [
        rate(cost.input),
        rate(cost.output),
        ...(cost.cachedInput === undefined ? [] : [rate(cost.cachedInput)]),
      ].join('/');

const flagList = (m: Model) =>
  Object.entries(m.flags)
    .filter(([, on]) => on)
    .map(([name]) => name)
    .join(',') || '-';

const nowSeconds = () => Math.floor(Date.now() / 1000);

/** Columns padded to their widest cell, two spaces apart. */
const table = (header: readonly string[], rows: readonly (readonly string[])[]): string => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n');
};
