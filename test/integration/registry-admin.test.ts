import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { DynamoRegistry } from '#adapters/dynamo-registry.ts';
import { parseRegistryFileText, toRegistryFile } from '#adapters/registry-file.ts';
import { LOCAL_AWS_ENV, localClientConfig } from '#local/emulators.ts';
import { provision } from '#local/provision.ts';
import { readRegistryFile } from '#local/registry-file.ts';
import { childEnv } from '#test/child-env.ts';
import { startTestStack, type TestStack } from '#test/stack.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const EXAMPLE = join(ROOT, 'registry/example.json');
const SIMULATOR_URL = 'http://127.0.0.1:4010';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'svc-registry-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A fresh registry table on the shared emulators. */
const registryTable = async () =>
  (await provision(inject('emulators'), `r${randomBytes(4).toString('hex')}`)).tables.registry;

const writeJson = (name: string, value: unknown): string => {
  const path = join(dir, name);
  writeFileSync(path, typeof value === 'string' ? value : JSON.stringify(value, null, 2));
  return path;
};

interface Run {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** The admin CLI as an operator runs it against AWS: REGISTRY_TABLE and the standard AWS_* variables. */
const adminOn =
  (table: string, simulatorUrl = SIMULATOR_URL) =>
  (...args: string[]): Promise<Run> =>
    new Promise((resolve) => {
      execFile(
        process.execPath,
        ['bin/admin.ts', ...args],
        {
          cwd: ROOT,
          env: childEnv({
            ...LOCAL_AWS_ENV,
            REGISTRY_TABLE: table,
            AWS_ENDPOINT_URL_DYNAMODB: inject('emulators').dynamodb,
            SIMULATOR_URL: simulatorUrl,
            LOCAL_STACK_FILE: join(dir, 'no-stack.json'),
          }),
        },
        (error, stdout, stderr) => {
          const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
          resolve({ code, stdout: stdout.trim(), stderr: stderr.trim() });
        },
      );
    });

/** The rows of a table the CLI printed, as arrays of cells (columns are two or more spaces apart). */
const rows = (table: string): string[][] =>
  table
    .split('\n')
    .slice(1)
    .map((line) => line.split(/ {2,}/));

const ok = (run: Run): string => {
  expect(run, run.stderr).toMatchObject({ code: 0 });
  return run.stdout;
};

describe('the registry through the admin CLI', () => {
  let admin: ReturnType<typeof adminOn>;
  beforeAll(async () => {
    admin = adminOn(await registryTable());
  });

  it('loads a registry file and lists what it holds as tables', async () => {
    const run = await admin('registry', 'load', EXAMPLE);
    const loaded = ok(run);
    // A deployed stage refuses env: key references: said for each deployment that has one, and only those.
    const envWarnings = run.stderr.split('\n').filter((line) => line.includes('refuse env: references'));
    expect(envWarnings).toHaveLength(4);
    expect(envWarnings[0]).toBe(
      'warning: deployment "famA-v4.1-flash@provider-b" keys env:PROVIDER_B_KEY: deployed functions refuse env: ' +
        'references (use secretsmanager:ID); every call to it will fail over to another deployment',
    );
    expect(loaded).toContain('models:      4 added, 0 updated, 0 unchanged, 0 retired');
    expect(loaded).toContain('deployments: 7 added, 0 updated, 0 unchanged, 0 retired');

    const models = ok(await admin('models', 'list'));
    expect(models.split('\n')[0]).toMatch(/^ID\s+KIND\s+FAMILY\s+STATUS\s+INPUT\s+OUTPUT/);
    // Dated builds sit beside the undated id; the retired one is listed only with --all.
    expect(rows(models).map((r) => r[0])).toEqual(['famA-v4.1-flash', 'famA-v4.1-flash-1017', 'svc-embed']);
    expect(rows(models)[0]).toEqual([
      'famA-v4.1-flash',
      'chat',
      'famA',
      'active',
      '0.25',
      '0.8',
      '-',
      '1048576',
      '-',
      '3',
    ]);
    const all = rows(ok(await admin('models', 'list', '--all')));
    expect(all.find((r) => r[0] === 'famA-v4-flash-0731')?.[3]).toBe('retired');

    const deployments = rows(ok(await admin('deployments', 'list', '--model', 'famA-v4.1-flash')));
    expect(deployments.map((r) => [r[0], r[3], r[4], r[7]])).toEqual([
      ['famA-v4.1-flash@provider-a', 'openai-compatible', '1', '0.15/0.5'],
      ['famA-v4.1-flash@provider-b', 'anthropic', '2', '0.2/0.72'],
      ['famA-v4.1-flash@local-simulator', 'openai-compatible', '9', '0/0'],
    ]);
    // {{SIMULATOR_URL}} came from the SIMULATOR_URL variable.
    expect(deployments[2]?.at(-1)).toBe(`${SIMULATOR_URL}/p/sim-a/v1`);
  });

  it('shows one model and one deployment as JSON', async () => {
    expect(JSON.parse(ok(await admin('models', 'show', 'famA-v4.1-flash-1017')))).toMatchObject({
      id: 'famA-v4.1-flash-1017',
      rates: { input: 0.3, output: 0.85 },
      status: 'active',
    });
    expect(JSON.parse(ok(await admin('deployments', 'show', 'famA-v4.1-flash@provider-b')))).toMatchObject({
      adapter: 'anthropic',
      keyRefs: ['env:PROVIDER_B_KEY'],
      cost: { input: 0.2, output: 0.72 },
    });
    expect(await admin('models', 'show', 'famZ')).toMatchObject({ code: 2, stderr: 'no model "famZ"' });
  });

  it('adds a model and its deployment, refusing an existing id and a deployment of an unknown model', async () => {
    const model = {
      id: 'famB-5.3-flash',
      family: 'famB',
      kind: 'chat',
      contextWindow: 327680,
      rates: { input: 0.25, output: 0.7 },
    };
    const added = await admin('models', 'add', '--json', JSON.stringify(model));
    expect(JSON.parse(ok(added))).toMatchObject({ ...model, status: 'active', flags: {} });
    expect(added.stderr).toContain('has no active deployment');
    expect(await admin('models', 'add', '--json', JSON.stringify(model))).toMatchObject({
      code: 2,
      stderr: 'model "famB-5.3-flash" already exists (models update changes it)',
    });

    const deployment = {
      id: 'famB-5.3-flash@provider-c',
      model: 'famB-5.3-flash',
      provider: 'provider-c',
      adapter: 'openai-compatible',
      baseUrl: 'https://api.provider-c.example/v1',
      upstreamModel: 'b-5.3-flash',
      keyRefs: ['secretsmanager:svc/provider-c'],
      cost: { input: 0.1, output: 0.3 },
    };
    const file = writeJson('deployment.json', deployment);
    expect(JSON.parse(ok(await admin('deployments', 'add', '--file', file)))).toMatchObject({
      ...deployment,
      priority: 1,
      weight: 1,
    });
    expect(await admin('deployments', 'add', '--file', file)).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('already exists'),
    });

    const orphan = { ...deployment, id: 'famZ@provider-c', model: 'famZ' };
    expect(await admin('deployments', 'add', '--json', JSON.stringify(orphan))).toMatchObject({
      code: 2,
      stderr: 'invalid deployment:\n  model: unknown model "famZ"',
    });
    const wrongAdapter = {
      ...deployment,
      id: 'svc-embed@anthropic',
      model: 'svc-embed',
      adapter: 'anthropic',
      cost: { input: 0.01 },
    };
    expect(await admin('deployments', 'add', '--json', JSON.stringify(wrongAdapter))).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('adapter: the anthropic adapter serves chat models only'),
    });
    const badUrl = { ...deployment, id: 'famB-5.3-flash@bad', baseUrl: 'nope' };
    expect(await admin('deployments', 'add', '--json', JSON.stringify(badUrl))).toMatchObject({
      code: 2,
      stderr: 'invalid deployment:\n  baseUrl: Invalid URL',
    });
  });

  it('updates with a merge patch validated after merging, refusing a missing id', async () => {
    const updated = JSON.parse(
      ok(await admin('models', 'update', 'famA-v4.1-flash', '--json', '{"rates":{"input":0.3}}')),
    );
    expect(updated.rates).toEqual({ input: 0.3, output: 0.8 });
    expect(
      await admin('models', 'update', 'famA-v4.1-flash', '--json', '{"rates":{"output":null}}'),
    ).toMatchObject({
      code: 2,
      stderr: 'invalid model:\n  rates.output: chat models need an output rate',
    });
    // A change of kind is checked against the model's deployments too.
    expect(
      await admin(
        'models',
        'update',
        'famA-v4.1-flash',
        '--json',
        '{"kind":"embedding","rates":{"output":null}}',
      ),
    ).toMatchObject({
      code: 2,
      stderr: expect.stringContaining(
        'deployment "famA-v4.1-flash@provider-b".adapter: the anthropic adapter serves chat models only',
      ),
    });
    expect(await admin('models', 'update', 'famQ', '--json', '{"family":"famQ"}')).toMatchObject({
      code: 2,
      stderr: 'no model "famQ"',
    });
    expect(await admin('models', 'update', 'famA-v4.1-flash', '--json', '{"id":"famA-v5"}')).toMatchObject({
      code: 2,
      stderr: 'id: "famA-v4.1-flash" cannot be renamed',
    });

    const deployment = JSON.parse(
      ok(
        await admin(
          'deployments',
          'update',
          'famA-v4.1-flash@provider-a',
          '--json',
          '{"priority":3,"timeouts":null,"cost":{"output":0.55}}',
        ),
      ),
    );
    expect(deployment).toMatchObject({ priority: 3, cost: { input: 0.15, output: 0.55 } });
    expect(deployment.timeouts).toBeUndefined();
    expect(
      await admin('deployments', 'update', 'famA-v4.1-flash@provider-a', '--json', '{"model":"svc-embed"}'),
    ).toMatchObject({ code: 2, stderr: expect.stringMatching(/^model: .* cannot move to another model/) });
    expect(await admin('deployments', 'update', 'nope@x', '--json', '{"priority":1}')).toMatchObject({
      code: 2,
      stderr: 'no deployment "nope@x"',
    });
  });

  it('retires models and deployments, never deleting them', async () => {
    const model = JSON.parse(ok(await admin('models', 'retire', 'famB-5.3-flash')));
    expect(model).toMatchObject({ id: 'famB-5.3-flash', status: 'retired', rates: { input: 0.25 } });
    expect(rows(ok(await admin('models', 'list'))).map((r) => r[0])).not.toContain('famB-5.3-flash');
    expect(rows(ok(await admin('models', 'list', '--all'))).map((r) => r[0])).toContain('famB-5.3-flash');

    ok(await admin('deployments', 'retire', 'famA-v4.1-flash@provider-b'));
    const listed = rows(ok(await admin('deployments', 'list', '--model', 'famA-v4.1-flash', '--all')));
    expect(listed.find((r) => r[0] === 'famA-v4.1-flash@provider-b')?.[8]).toBe('retired');
    expect(
      rows(ok(await admin('deployments', 'list', '--model', 'famA-v4.1-flash'))).map((r) => r[0]),
    ).toEqual(['famA-v4.1-flash@provider-a', 'famA-v4.1-flash@local-simulator']);
    expect(await admin('models', 'retire', 'famQ')).toMatchObject({ code: 2, stderr: 'no model "famQ"' });
  });

  it('exports a registry file that loads into another registry and exports the same again', async () => {
    const exported = ok(await admin('registry', 'export'));
    const file = writeJson('exported.json', exported);
    expect(ok(await admin('registry', 'check', file))).toMatch(
      /valid, 5 models and 8 deployments \(uses \{\{SIMULATOR_URL\}\}/,
    );
    const registry = JSON.parse(exported);
    expect(registry.models.find((m: { id: string }) => m.id === 'famB-5.3-flash').status).toBe('retired');
    // The simulator's deployment keeps its placeholder, not this simulator's address: the next `npm start`'s
    // simulator listens elsewhere.
    const simulated = (file: { deployments: { id: string; baseUrl: string }[] }) =>
      file.deployments.find((d) => d.id === 'famA-v4.1-flash@local-simulator')?.baseUrl;
    expect(simulated(registry)).toBe('{{SIMULATOR_URL}}/p/sim-a/v1');
    expect(exported).not.toContain(SIMULATOR_URL);

    const elsewhere = 'http://127.0.0.1:4020';
    const other = adminOn(await registryTable(), elsewhere);
    expect(ok(await other('registry', 'load', file))).toContain('models:      5 added');
    expect(ok(await other('registry', 'export'))).toBe(exported);
    const loaded = ok(await other('deployments', 'show', 'famA-v4.1-flash@local-simulator'));
    expect(JSON.parse(loaded).baseUrl).toBe(`${elsewhere}/p/sim-a/v1`);
    // Loading it again changes nothing.
    expect(ok(await admin('registry', 'load', file))).toContain(
      'models:      0 added, 0 updated, 5 unchanged, 0 retired',
    );
  });

  it('with --replace, retires what the file no longer lists', async () => {
    const example = JSON.parse(readFileSync(EXAMPLE, 'utf8'));
    const onlyFlash = {
      models: example.models.filter((m: { id: string }) => m.id === 'famA-v4.1-flash'),
      deployments: example.deployments.filter((d: { model: string }) => d.model === 'famA-v4.1-flash'),
    };
    const file = writeJson('only-flash.json', onlyFlash);
    // A dry run says what the load would do, and writes nothing.
    const before = ok(await admin('registry', 'export'));
    const planned = ok(await admin('registry', 'load', file, '--replace', '--dry-run'));
    expect(planned).toContain(`${file} would load (dry run: nothing written)`);
    expect(planned).toContain('models:      0 added, 1 updated, 0 unchanged, 2 retired');
    expect(planned).toContain('retired models:      famA-v4.1-flash-1017, svc-embed');
    expect(ok(await admin('registry', 'export'))).toBe(before);
    const loaded = ok(await admin('registry', 'load', file, '--replace'));
    // famA-v4.1-flash-1017 and svc-embed retire (famA-v4-flash-0731 and famB-5.3-flash already were), with
    // their four deployments and famB-5.3-flash's; the file's famA-v4.1-flash entries undo earlier updates.
    expect(loaded).toContain('models:      0 added, 1 updated, 0 unchanged, 2 retired');
    expect(loaded).toContain('deployments: 0 added, 2 updated, 1 unchanged, 5 retired');
    // What retired, by name: what an operator checks after a --replace.
    expect(loaded).toContain('retired models:      famA-v4.1-flash-1017, svc-embed');
    expect(
      loaded
        .split('\n')
        .find((l) => l.includes('retired deployments:'))
        ?.split(', '),
    ).toHaveLength(5);
    expect(rows(ok(await admin('models', 'list'))).map((r) => r[0])).toEqual(['famA-v4.1-flash']);
    expect(rows(ok(await admin('deployments', 'list'))).map((r) => r[0])).toEqual([
      'famA-v4.1-flash@provider-a',
      'famA-v4.1-flash@provider-b',
      'famA-v4.1-flash@local-simulator',
    ]);
    expect(rows(ok(await admin('models', 'list', '--all')))).toHaveLength(5);
  });

  it('refuses a load that would leave no active model (an empty file given --replace), and writes nothing', async () => {
    const before = ok(await admin('registry', 'export'));
    for (const dryRun of [[], ['--dry-run']]) {
      const refused = await admin(
        'registry',
        'load',
        writeJson('empty.json', { models: [], deployments: [] }),
        '--replace',
        ...dryRun,
      );
      expect(refused).toMatchObject({ code: 2, stdout: '' });
      expect(refused.stderr).toContain('it would leave no active model, and every call would be refused');
    }
    expect(ok(await admin('registry', 'export'))).toBe(before);
  });

  it('refuses an invalid file with every bad field named, and writes nothing', async () => {
    const before = ok(await admin('registry', 'export'));
    const example = JSON.parse(readFileSync(EXAMPLE, 'utf8'));
    example.models.push({
      id: 'famC-k3',
      family: 'famC',
      kind: 'chat',
      contextWindow: 1048576,
      rates: { input: 3.85, output: 19.25 },
    });
    example.deployments[1].model = 'famZ';
    example.deployments[3].baseUrl = 'api.provider-a.example/v1';
    const refused = await admin('registry', 'load', writeJson('bad.json', example), '--replace');
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('is not a valid registry file:');
    expect(refused.stderr).toContain('deployments[1].model: unknown model "famZ"');
    expect(refused.stderr).toContain('deployments[3].baseUrl: Invalid URL');
    expect(refused.stdout).toBe('');
    expect(ok(await admin('registry', 'export'))).toBe(before);
  });

  it('exits 2 on a wrong command line, with the usage', async () => {
    expect(await admin('models', 'show')).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('missing MODEL_ID'),
    });
    expect(await admin('models', 'add')).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('--json'),
    });
    expect(await admin('models', 'list', '--bogus')).toMatchObject({ code: 2 });
    expect(await admin('registry', 'frobnicate')).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('registry load FILE [--replace]'),
    });
  });

  it('refuses an argument more or a flag the command does not use, changing nothing', async () => {
    for (const [args, message] of [
      [['models', 'retire', 'famA-v4.1-flash', 'famB-5.3-flash'], 'unexpected argument "famB-5.3-flash"'],
      [['deployments', 'retire', 'famA-v4.1-flash@provider-a', 'x'], 'unexpected argument "x"'],
      [
        ['models', 'update', 'famA-v4.1-flash', 'x', '--json', '{"rates":{"input":9}}'],
        'unexpected argument "x"',
      ],
      [['registry', 'export', 'out.json'], 'unexpected argument "out.json"'],
      [['models', 'retire', 'famA-v4.1-flash', '--all'], '"models retire" takes no --all'],
      [['models', 'list', '--model', 'famA-v4.1-flash'], '"models list" takes no --model'],
      [['registry', 'load', EXAMPLE, '--all'], '"registry load" takes no --all'],
    ] as const) {
      const run = await admin(...args);
      expect(run, args.join(' ')).toMatchObject({ code: 2, stdout: '' });
      expect(run.stderr).toContain(message);
    }
    expect(JSON.parse(ok(await admin('models', 'show', 'famA-v4.1-flash')))).toMatchObject({
      status: 'active',
      rates: { input: 0.25 },
    });
    expect(JSON.parse(ok(await admin('deployments', 'show', 'famA-v4.1-flash@provider-a'))).status).toBe(
      'active',
    );
  });
});

describe('the admin CLI with no stack and no tables', () => {
  /** No `npm start` stack to find and no table variables: only what needs neither can succeed. */
  const bare = (...args: string[]): Promise<Run> => withStackFile(join(dir, 'no-stack.json'), ...args);
  const withStackFile = (file: string, ...args: string[]): Promise<Run> =>
    new Promise((resolve) => {
      const env = childEnv({ LOCAL_STACK_FILE: file });
      execFile(process.execPath, ['bin/admin.ts', ...args], { cwd: ROOT, env }, (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout: stdout.trim(), stderr: stderr.trim() });
      });
    });

  it('prints its usage for --help, and answers a wrong command line with it, before looking for a target', async () => {
    for (const args of [['--help'], ['-h'], ['help'], ['keys', 'create', '--help']]) {
      const run = await bare(...args);
      expect(run, args.join(' ')).toMatchObject({ code: 0, stderr: '' });
      expect(run.stdout).toMatch(/^usage: npm run admin -- <command>\n {2}accounts create/);
      expect(run.stdout).toContain('registry export');
    }
    for (const args of [
      [],
      ['frobnicate'],
      ['accounts', 'delete', 'acct_x'],
      ['accounts', 'show', '--bogus'],
    ]) {
      const run = await bare(...args);
      expect(run, args.join(' ')).toMatchObject({ code: 2, stdout: '' });
      expect(run.stderr).toContain('usage: npm run admin -- <command>');
    }
    expect((await bare('accounts', 'delete', 'acct_x')).stderr).toMatch(
      /^unknown command "accounts delete acct_x"/,
    );
    // An argument more or a flag the command does not use is a wrong command line too, in both CLIs.
    for (const [args, message] of [
      [['keys', 'create', 'acct_x', '--reference', 'pay_1'], '"keys create" takes no --reference'],
      [['keys', 'list', 'acct_x', 'extra'], 'unexpected argument "extra"'],
      [['models', 'retire', 'famA', 'famB'], 'unexpected argument "famB"'],
      [['deployments', 'show', 'famA@a', '--replace'], '"deployments show" takes no --replace'],
    ] as const) {
      const run = await bare(...args);
      expect(run, args.join(' ')).toMatchObject({ code: 2, stdout: '' });
      expect(run.stderr.startsWith(message), run.stderr).toBe(true);
    }
    // A valid command does need a target, and says how to give it one.
    expect(await bare('accounts', 'show', 'acct_x')).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('No target: start the local stack (npm start)'),
    });
  });

  it('refuses (2) a stack file left by an npm start that is gone, rather than fail as unreachable (75) for ever', async () => {
    // A process that has ended: its pid names no one (npm start killed outright leaves its file behind).
    const gone = await new Promise<number>((resolve) => {
      const child = execFile(process.execPath, ['-e', ''], () => resolve(child.pid ?? 0));
    });
    const unreachable = 'http://127.0.0.1:9'; // were it used: nothing listens there
    const left = writeJson('left-stack.json', {
      pid: gone,
      url: 'http://127.0.0.1:9',
      emulators: { dynamodb: unreachable, sqs: unreachable, s3: unreachable },
      resources: { tables: { accounts: 'a', wallet: 'w', buckets: 'b', usage: 'u', registry: 'r' } },
    });
    for (const args of [
      ['accounts', 'show', 'acct_x'],
      ['models', 'list'],
    ]) {
      const run = await withStackFile(left, ...args);
      expect(run, args.join(' ')).toMatchObject({ code: 2, stdout: '' });
      expect(run.stderr).toContain(`the local stack that wrote ${left} (pid ${gone}) is no longer running`);
    }
    const torn = join(dir, 'torn-stack.json');
    writeFileSync(torn, '{"pid": 1, "url": "http://127.');
    const run = await withStackFile(torn, 'accounts', 'show', 'acct_x');
    expect(run).toMatchObject({ code: 2, stdout: '' });
    expect(run.stderr).toContain(`${torn} is unreadable`);
  });
});

describe('REGISTRY_FILE on the local host', () => {
  const file = () =>
    writeJson('local.json', {
      models: [
        {
          id: 'famA-v4.1-flash',
          family: 'famA',
          kind: 'chat',
          contextWindow: 1048576,
          rates: { input: 0.25, output: 0.8 },
        },
        {
          id: 'famA-v4.1-flash-1017',
          family: 'famA',
          kind: 'chat',
          contextWindow: 1048576,
          rates: { input: 0.3, output: 0.85 },
        },
        {
          id: 'famA-v4-flash-0731',
          family: 'famA',
          kind: 'chat',
          contextWindow: 1048576,
          rates: { input: 0.09, output: 0.15 },
          status: 'retired',
        },
      ],
      deployments: ['famA-v4.1-flash', 'famA-v4.1-flash-1017', 'famA-v4-flash-0731'].map((model) => ({
        id: `${model}@file-sim`,
        model,
        provider: 'file-sim',
        adapter: 'openai-compatible',
        baseUrl: '{{SIMULATOR_URL}}/p/file-sim/v1',
        upstreamModel: model,
        keyRefs: ['env:SIM_A_KEY_1'],
        cost: { input: 0.01, output: 0.02 },
      })),
    });

  let t: TestStack;
  let path: string;
  beforeAll(async () => {
    path = file();
    t = await startTestStack({ registryFile: path });
  });
  afterAll(() => t?.stop());

  const chat = (model: string) =>
    t.post('/chat/completions', { model, messages: [{ role: 'user', content: 'hi' }] });

  it("serves exactly the file's models, through the file's deployments", async () => {
    for (const model of ['famA-v4.1-flash', 'famA-v4.1-flash-1017']) {
      const res = await chat(model);
      expect(res.status, model).toBe(200);
      expect(res.headers.get('x-svc-provider')).toBe('file-sim');
    }
    // Retired in the file (though its deployment is active), and in the catalog but not in the file.
    for (const model of ['famA-v4-flash-0731', 'famB-5.3-flash']) {
      const res = await chat(model);
      expect(res.status, model).toBe(404);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('model_not_found');
    }
  });

  it('seeds the registry table with the file and nothing else', async () => {
    const client = new DynamoDBClient(localClientConfig(t.stack.emulators.dynamodb));
    try {
      const stored = await new DynamoRegistry(client, t.stack.resources.tables.registry).load();
      const expected = parseRegistryFileText(readFileSync(path, 'utf8'), { simulatorUrl: t.simulator.url });
      expect(toRegistryFile(stored)).toEqual(toRegistryFile(expected));
    } finally {
      client.destroy();
    }
  });

  it('retires what a persisted registry kept from an earlier run', async () => {
    const table = await registryTable();
    const client = new DynamoDBClient(localClientConfig(inject('emulators').dynamodb));
    try {
      const registry = new DynamoRegistry(client, table);
      const earlier = parseRegistryFileText(readFileSync(EXAMPLE, 'utf8'), { simulatorUrl: SIMULATOR_URL });
      await registry.put(earlier.models, earlier.deployments);
      const local = readRegistryFile(path);
      const deployments = local.deployments(SIMULATOR_URL);
      await registry.put(local.models, deployments);
      await local.retireUnlisted(inject('emulators').dynamodb, table, deployments);
      const { models } = await registry.load();
      expect(
        models
          .filter((m) => m.status === 'active')
          .map((m) => m.id)
          .sort(),
      ).toEqual(['famA-v4.1-flash', 'famA-v4.1-flash-1017']);
      expect(models.find((m) => m.id === 'svc-embed')?.status).toBe('retired');
    } finally {
      client.destroy();
    }
  });

  const start = (file: string) =>
    new Promise<Run>((resolve) => {
      execFile(
        process.execPath,
        ['bin/local.ts'],
        {
          cwd: ROOT,
          env: childEnv({
            PORT: '0',
            REGISTRY_FILE: file,
            LOCAL_STACK_FILE: join(dir, 'stack.json'),
          }),
          timeout: 20_000,
        },
        (error, stdout, stderr) =>
          resolve({ code: typeof error?.code === 'number' ? error.code : 0, stdout, stderr }),
      );
    });

  it('makes npm start exit non-zero before serving, naming the bad field', async () => {
    const bad = JSON.parse(readFileSync(path, 'utf8'));
    bad.deployments[0].baseUrl = 'localhost:8080/v1';
    const run = await start(writeJson('bad-local.json', bad));
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('deployments[0].baseUrl: Invalid URL');
    expect(run.stdout).not.toContain('gateway listening');
    expect(run.stdout).not.toContain('DynamoDB Local listening');
  });

  it('makes npm start exit non-zero before serving a file with no active model', async () => {
    const example = JSON.parse(readFileSync(EXAMPLE, 'utf8'));
    for (const m of example.models) m.status = 'retired';
    for (const registry of [{ models: [], deployments: [] }, example]) {
      const run = await start(writeJson('no-active.json', registry));
      expect(run.code).toBe(1);
      expect(run.stderr).toContain('models: no active model; every call would be refused');
      expect(run.stdout).not.toContain('gateway listening');
    }
  });
});

describe('the admin CLI’s exit status, for a script that retries', () => {
  const against = (endpoint: string, ...args: string[]): Promise<Run> =>
    new Promise((resolve) => {
      const table = `missing-${randomBytes(3).toString('hex')}`;
      const env = childEnv({
        ...LOCAL_AWS_ENV,
        ACCOUNTS_TABLE: `${table}-accounts`,
        WALLET_TABLE: `${table}-wallet`,
        BUCKETS_TABLE: `${table}-buckets`,
        USAGE_TABLE: `${table}-usage`,
        AWS_ENDPOINT_URL_DYNAMODB: endpoint,
        LOCAL_STACK_FILE: join(dir, 'no-stack.json'),
      });
      execFile(process.execPath, ['bin/admin.ts', ...args], { cwd: ROOT, env }, (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout: stdout.trim(), stderr: stderr.trim() });
      });
    });

  const withEnv = (vars: Record<string, string>, ...args: string[]): Promise<Run> =>
    new Promise((resolve) => {
      const env = childEnv({ ...LOCAL_AWS_ENV, ...vars, LOCAL_STACK_FILE: join(dir, 'no-stack.json') });
      execFile(process.execPath, ['bin/admin.ts', ...args], { cwd: ROOT, env }, (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout: stdout.trim(), stderr: stderr.trim() });
      });
    });

  it('refuses (2) a stage named by some of its tables only, never writing the local stack instead', async () => {
    const partial = await withEnv({ WALLET_TABLE: 'svc-prod-wallet' }, 'accounts', 'show', 'acct_x');
    expect(partial).toMatchObject({ code: 2, stdout: '' });
    expect(partial.stderr).toContain('missing accounts');
    const registry = await withEnv({ ACCOUNTS_TABLE: 'svc-prod-accounts' }, 'models', 'list');
    expect(registry).toMatchObject({ code: 2, stdout: '' });
    expect(registry.stderr).toContain('Set REGISTRY_TABLE too: ACCOUNTS_TABLE name a deployed stage.');
  });

  it('exits 75 when the store cannot be reached (run it again), 1 when the command cannot succeed', async () => {
    // Port 9 (discard): nothing listens on loopback.
    const unreachable = await against(
      'http://127.0.0.1:9',
      'wallet',
      'topup',
      'acct_x',
      '5',
      '--reference',
      'pay_9',
    );
    expect(unreachable).toMatchObject({ code: 75, stdout: '' });
    expect(unreachable.stderr).toContain('ECONNREFUSED');
    expect(unreachable.stderr).toContain('temporary: run it again');
    // The store answers, and the table does not exist: another run fails the same way.
    const missing = await against(inject('emulators').dynamodb, 'accounts', 'show', 'acct_x');
    expect(missing.code).toBe(1);
    expect(missing.stderr).not.toContain('temporary');
  });
});
