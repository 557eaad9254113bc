import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Template } from 'aws-cdk-lib/assertions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HOLD_NOT_RELEASED } from '#core/accounting.ts';
import { PRICE_LIST_UNAVAILABLE, PRICE_SYNC_REFUSED_PREFIX } from '#core/price-sync.ts';
import { PROBE_BASE_URL_ENV, UPTIME_ROUND_FAILED } from '#core/uptime-probe.ts';
import { loadConfig } from '#functions/config.ts';
import { CORS_HEADERS } from '#http/cors.ts';
import { UNSENT_SETTLEMENT, UNSENT_SETTLEMENT_PREFIX } from '#http/unsent-settlement.ts';
import { SETTLEMENT_AGE_ALARM_SECONDS } from '#lib/data-stack.ts';
import { type FunctionDefinition, functions, timeoutOf } from '#lib/functions.ts';
import { ENTRY_METADATA } from '#lib/gateway-function.ts';
import { buckets, physicalName, queues, tables } from '#lib/resources.ts';
import { DEFAULT_SCHEDULES, SETTLEMENT_MAX_CONCURRENCY } from '#lib/stage.ts';
import { schemaErrors } from '#test/openapi-schemas.ts';

/**
 * The whole app, synthesized once by the real CLI (`cdk synth`, as `npm run synth` does) with no AWS
 * credentials and a Docker that does not exist, bundling every function with the local esbuild. Every test
 * reads the same cloud assembly.
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const STAGE = 'test';
const PREFIX = `svc-${STAGE}`;
/** Named as in registry/example.json's `secretsmanager:` references. */
const SECRETS = ['svc/provider-a/key-1', 'svc/provider-a/key-2'];
const STACKS = ['data', 'api', 'site', 'jobs'] as const;
/** Concurrency reserved for the settlement consumer (a production stage's default is 50). */
const RESERVED = 60;
type StackName = (typeof STACKS)[number];

// biome-ignore lint/suspicious/noExplicitAny: CloudFormation JSON is untyped by nature.
type Json = any;
interface Resource {
  readonly stack: StackName;
  readonly id: string;
  readonly type: string;
  readonly properties: Json;
  readonly metadata: Json;
}

const rows = functions as Readonly<Record<string, FunctionDefinition>>;
let assembly: string;
let synthSeconds: number;
const templates = {} as Record<StackName, Json>;

beforeAll(async () => {
  assembly = await mkdtemp(join(tmpdir(), 'svc-cdk-'));
  // No credentials, no AWS config, and any attempt to run Docker fails.
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([key]) => !key.startsWith('AWS_') && !key.startsWith('CDK_')),
  );
  Object.assign(env, {
    PATH: `${ROOT}node_modules/.bin:${process.env.PATH}`,
    AWS_CONFIG_FILE: '/nonexistent/aws-config',
    AWS_SHARED_CREDENTIALS_FILE: '/nonexistent/aws-credentials',
    CDK_DOCKER: '/nonexistent/docker',
    CDK_DISABLE_VERSION_CHECK: '1',
    CDK_DISABLE_CLI_TELEMETRY: 'true',
  });
  const started = performance.now();
  await promisify(execFile)(
    `${ROOT}node_modules/.bin/cdk`,
    [
      'synth',
      '--quiet',
      '--no-notices',
      '--output',
      assembly,
      '--context',
      `stage=${STAGE}`,
      '--context',
      `providerSecrets=${SECRETS.join(',')}`,
      '--context',
      'alarmEmail=ops@example.com',
      '--context',
      `settlementReservedConcurrency=${RESERVED}`,
    ],
    { cwd: ROOT, env, maxBuffer: 64 * 1024 * 1024 },
  );
  synthSeconds = (performance.now() - started) / 1000;
  for (const stack of STACKS)
    templates[stack] = JSON.parse(await readFile(join(assembly, `${PREFIX}-${stack}.template.json`), 'utf8'));
}, 300_000);

afterAll(async () => {
  if (assembly) await rm(assembly, { recursive: true, force: true });
});

const all = (type?: string): Resource[] =>
  STACKS.flatMap((stack) =>
    Object.entries(templates[stack].Resources as Record<string, Json>)
      .filter(([, r]) => type === undefined || r.Type === type)
      .map(([id, r]) => ({
        stack,
        id,
        type: r.Type,
        properties: r.Properties ?? {},
        metadata: r.Metadata ?? {},
      })),
  );

/** `stack/logicalId` of whatever a `Ref`, `Fn::GetAtt` or (cross-stack) `Fn::ImportValue` points at. */
const referencesIn = (stack: StackName, value: Json): string[] => {
  if (Array.isArray(value)) return value.flatMap((v) => referencesIn(stack, v));
  if (value === null || typeof value !== 'object') return [];
  if (typeof value.Ref === 'string' && !value.Ref.startsWith('AWS::')) return [`${stack}/${value.Ref}`];
  if (Array.isArray(value['Fn::GetAtt'])) return [`${stack}/${value['Fn::GetAtt'][0]}`];
  if (typeof value['Fn::ImportValue'] === 'string') {
    for (const producer of STACKS) {
      for (const output of Object.values((templates[producer].Outputs ?? {}) as Record<string, Json>)) {
        if (output.Export?.Name === value['Fn::ImportValue']) return referencesIn(producer, output.Value);
      }
    }
    throw new Error(`unresolved import ${value['Fn::ImportValue']}`);
  }
  return Object.values(value).flatMap((v) => referencesIn(stack, v));
};

const key = (r: Resource) => `${r.stack}/${r.id}`;
const one = (found: Resource[], what: string): Resource => {
  expect(found, what).toHaveLength(1);
  return found[0] as Resource;
};

/** The function bundled from `functions/<name>.ts`. */
const functionOf = (name: string): Resource =>
  one(
    all('AWS::Lambda::Function').filter((f) => f.metadata[ENTRY_METADATA] === `functions/${name}.ts`),
    `the function of functions/${name}.ts`,
  );
const named = (type: string, property: string, value: string): Resource =>
  one(
    all(type).filter((r) => r.properties[property] === value),
    `${type} ${property}=${value}`,
  );

const tableKeys = () =>
  new Map(
    Object.values(tables).map((t) => [
      key(named('AWS::DynamoDB::GlobalTable', 'TableName', physicalName(PREFIX, t.id))),
      t.id as string,
    ]),
  );
const settlementQueue = () =>
  named('AWS::SQS::Queue', 'QueueName', physicalName(PREFIX, queues.settlement.id));
const settlementDlq = () =>
  named('AWS::SQS::Queue', 'QueueName', physicalName(PREFIX, queues.settlement.deadLetter.id));
const secretKeys = () =>
  new Set(SECRETS.map((name) => key(named('AWS::SecretsManager::Secret', 'Name', name))));
const siteBucket = () => one(all('AWS::S3::Bucket'), 'the site bucket');

/** Allow statements of the identity policies attached to a role. */
const statementsOf = (role: Resource) => {
  const attached = all('AWS::IAM::Policy').filter((p) =>
    referencesIn(p.stack, p.properties.Roles).includes(key(role)),
  );
  return [...attached.map((p) => ({ stack: p.stack, document: p.properties.PolicyDocument }))]
    .concat(
      (role.properties.Policies ?? []).map((p: Json) => ({ stack: role.stack, document: p.PolicyDocument })),
    )
    .flatMap(({ stack, document }) =>
      (document.Statement as Json[])
        .filter((s) => s.Effect === 'Allow')
        .map((s) => ({ stack, actions: [s.Action].flat() as string[], resource: s.Resource as Json })),
    );
};

/** Actions a function's role allows, per resource it names (`*` for a wildcard resource). */
const accessOf = (fn: Resource): Map<string, Set<string>> => {
  const roleKey = one(
    all('AWS::IAM::Role').filter((r) => referencesIn(fn.stack, fn.properties.Role).includes(key(r))),
    'the function role',
  );
  const access = new Map<string, Set<string>>();
  for (const statement of statementsOf(roleKey)) {
    const targets = [statement.resource].flat().some((r) => r === '*')
      ? ['*']
      : referencesIn(statement.stack, statement.resource);
    for (const target of targets) {
      const actions = access.get(target) ?? new Set<string>();
      for (const action of statement.actions) actions.add(action);
      access.set(target, actions);
    }
  }
  return access;
};

const handlerFiles = () =>
  readdirSync(`${ROOT}functions`)
    .filter((file) => file.endsWith('.ts') && file !== 'config.ts' && file !== 'container.ts')
    .filter((file) =>
      /export\s+(const|let|async\s+function|function)\s+handler\b|export\s*\{[^}]*\bhandler\b/.test(
        readFileSync(`${ROOT}functions/${file}`, 'utf8'),
      ),
    )
    .map((file) => `functions/${file}`)
    .sort();

const XRAY = ['xray:PutTraceSegments', 'xray:PutTelemetryRecords'];

describe('the CDK app', () => {
  it('synthesizes all four stacks with no AWS credentials and no Docker', () => {
    console.info(
      `cdk synth: 4 stacks, ${Object.keys(rows).length} functions bundled in ${synthSeconds.toFixed(1)} s`,
    );
    for (const stack of STACKS) expect(templates[stack].Resources).toBeDefined();
  });

  it('wires every handler file in functions/ to exactly one function, and no function to anything else', () => {
    const wired = all('AWS::Lambda::Function')
      .map((f) => f.metadata[ENTRY_METADATA] as string | undefined)
      .filter((entry) => entry !== undefined)
      .sort();
    // An orphan handler (a file without a row in lib/functions.ts) fails here.
    expect(wired).toEqual(handlerFiles());
  });

  it('gives the endpoints that stream as long as they need (chat, speech) Lambda’s longest run, 15 minutes', () => {
    for (const name of ['chat-completions', 'audio-speech'])
      expect(functionOf(name).properties.Timeout, name).toBe(900);
  });

  it('runs every function on Node.js 24, arm64, with JSON logs, X-Ray tracing and source maps', () => {
    for (const name of Object.keys(rows)) {
      const fn = functionOf(name).properties;
      expect(fn.Runtime, name).toBe('nodejs24.x');
      expect(fn.Architectures, name).toEqual(['arm64']);
      expect(fn.LoggingConfig.LogFormat, name).toBe('JSON');
      expect(fn.TracingConfig, name).toEqual({ Mode: 'Active' });
      expect(fn.Environment.Variables.NODE_OPTIONS, name).toContain('--enable-source-maps');
      expect(fn.Timeout, name).toBe(timeoutOf(rows[name] as FunctionDefinition));
      const logGroup = one(
        all('AWS::Logs::LogGroup').filter(
          (g) => g.properties.LogGroupName === `/aws/lambda/${PREFIX}-${name}`,
        ),
        `${name}'s log group`,
      );
      expect(logGroup.properties.RetentionInDays, name).toBe(30);
    }
  });

  it('ships every function as a source-mapped ESM bundle that loads on Node 24 and exports its handler', async () => {
    const bundles = Object.keys(rows).map((name) => {
      const dir = join(assembly, functionOf(name).metadata['aws:asset:path']);
      expect(existsSync(join(dir, 'index.mjs.map')), `${name}'s source map`).toBe(true);
      return join(dir, 'index.mjs');
    });
    // A plain Node process, as Lambda's: the runtime provides the `awslambda` global before the import.
    const script = `
      globalThis.awslambda = { streamifyResponse: (fn) => fn, HttpResponseStream: { from: (s) => s } };
      const kinds = [];
      for (const file of ${JSON.stringify(bundles)}) kinds.push(typeof (await import(file)).handler);
      console.log(JSON.stringify(kinds));`;
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], {
      maxBuffer: 16 * 1024 * 1024,
    });
    expect(JSON.parse(stdout)).toEqual(bundles.map(() => 'function'));
  });

  it('gives every function the environment config.ts reads, and only that', () => {
    for (const name of Object.keys(rows)) {
      const definition = rows[name] as FunctionDefinition;
      const variables = functionOf(name).properties.Environment.Variables as Record<string, Json>;
      // Deploy-time values (table names, the queue URL) are references here; any string stands in for them.
      const env = Object.fromEntries(
        Object.entries(variables).map(([k, v]) => [k, typeof v === 'string' ? v : `resolved-${k}`]),
      );
      const read = new Set<string>();
      const watched = new Proxy(env, {
        get: (target, property: string) => {
          read.add(property);
          return target[property];
        },
      });
      expect(() => loadConfig(watched), name).not.toThrow();
      const allowed = new Set([
        ...read,
        'NODE_OPTIONS',
        ...Object.keys(definition.uses.buckets ?? {}).map((b) => buckets[b as keyof typeof buckets].envVar),
        // Read by the uptime probe's handler itself, not config.ts (no other function has a public URL to call).
        ...(definition.uses.publicApi ? [PROBE_BASE_URL_ENV] : []),
      ]);
      expect(
        Object.keys(variables).filter((k) => !allowed.has(k)),
        `${name} sets variables nothing reads`,
      ).toEqual([]);
    }
  });

  it('grants each function exactly the tables, queues, buckets and secrets its row declares', () => {
    const tablesByKey = tableKeys();
    const queue = key(settlementQueue());
    const secrets = secretKeys();
    const bucket = key(siteBucket());
    for (const name of Object.keys(rows)) {
      const definition = rows[name] as FunctionDefinition;
      const fn = functionOf(name);
      const access = accessOf(fn);
      const touched = [...access.keys()];

      const declaredTables = definition.uses.tables ?? {};
      const grantedTables = new Map(
        touched.filter((k) => tablesByKey.has(k)).map((k) => [tablesByKey.get(k) as string, access.get(k)]),
      );
      expect([...grantedTables.keys()].sort(), `${name}'s tables`).toEqual(
        Object.keys(declaredTables).sort(),
      );
      for (const [table, actions] of grantedTables) {
        // Exactly the row's actions: no scan of the key hashes, no delete of ledger entries, unless declared.
        const declared = declaredTables[table as keyof typeof declaredTables] ?? [];
        expect([...(actions ?? [])].sort(), `${name} on ${table}`).toEqual(
          declared.map((a) => `dynamodb:${a}`).sort(),
        );
      }

      const onQueue = access.get(queue) ?? new Set();
      expect(onQueue.has('sqs:SendMessage'), `${name} sends to the queue`).toBe(
        definition.uses.sendsTo?.includes('settlement') ?? false,
      );
      const consumes = definition.trigger.kind === 'queue';
      expect(onQueue.has('sqs:ReceiveMessage') && onQueue.has('sqs:DeleteMessage'), `${name} consumes`).toBe(
        consumes,
      );

      const grantedSecrets = touched.filter((k) => secrets.has(k));
      expect(grantedSecrets.sort(), `${name}'s secrets`).toEqual(
        definition.uses.providerSecrets ? [...secrets].sort() : [],
      );
      for (const secret of grantedSecrets)
        expect(access.get(secret)?.has('secretsmanager:GetSecretValue')).toBe(true);

      expect(touched.includes(bucket), `${name} on the site bucket`).toBe(
        definition.uses.buckets?.site !== undefined,
      );

      // Nothing else: its own log group, and X-Ray on `*`.
      const logGroup = key(
        one(
          all('AWS::Logs::LogGroup').filter(
            (g) => g.properties.LogGroupName === `/aws/lambda/${PREFIX}-${name}`,
          ),
          'log group',
        ),
      );
      const known = new Set([...tablesByKey.keys(), queue, ...secrets, bucket, logGroup, '*']);
      expect(
        touched.filter((k) => !known.has(k)),
        `${name} reaches resources it does not declare`,
      ).toEqual([]);
      expect([...(access.get(logGroup) ?? [])].sort()).toEqual(['logs:CreateLogStream', 'logs:PutLogEvents']);
    }
  });

  it('lets a writer of the site bucket put only the objects its row names (usage-report: usage.json)', () => {
    for (const name of Object.keys(rows)) {
      const definition = rows[name] as FunctionDefinition;
      if (definition.uses.buckets?.site === undefined) continue;
      const fn = functionOf(name);
      const roleKey = one(
        all('AWS::IAM::Role').filter((r) => referencesIn(fn.stack, fn.properties.Role).includes(key(r))),
        'the function role',
      );
      const puts = statementsOf(roleKey).filter((st) => st.actions.some((a) => a.startsWith('s3:PutObject')));
      expect(puts.length, `${name} puts objects`).toBeGreaterThan(0);
      const objects = (definition.uses as { bucketObjects?: { site?: string } }).bucketObjects?.site ?? '*';
      for (const statement of puts) {
        const text = JSON.stringify(statement.resource);
        expect(text, `${name}'s object resource`).toContain(`/${objects}`);
      }
    }
    expect((rows['usage-report'] as FunctionDefinition).uses).toMatchObject({
      bucketObjects: { site: 'usage.json' },
    });
    // It reads the report online before writing (an older report never replaces a newer one).
    const reportRole = one(
      all('AWS::IAM::Role').filter((r) =>
        referencesIn(functionOf('usage-report').stack, functionOf('usage-report').properties.Role).includes(
          key(r),
        ),
      ),
      'the usage-report role',
    );
    expect(statementsOf(reportRole).flatMap((st) => st.actions)).toContain('s3:GetObject*');
  });

  it('grants no * action anywhere, and * resources only to X-Ray', () => {
    const statements = all('AWS::IAM::Role').flatMap((role) =>
      statementsOf(role).map((s) => ({ role, ...s })),
    );
    expect(statements.length).toBeGreaterThan(0);
    for (const { role, actions, resource } of statements) {
      for (const action of actions)
        expect(action === '*' || action.endsWith(':*'), `${role.id}: ${action}`).toBe(false);
      if ([resource].flat().includes('*'))
        expect(XRAY, `${role.id} on *: ${actions}`).toEqual(expect.arrayContaining(actions));
    }
    // AWSLambdaBasicExecutionRole allows log writes on `*`; only CDK's own custom-resource providers keep it.
    const managed = all('AWS::IAM::Role').filter((r) => r.properties.ManagedPolicyArns !== undefined);
    for (const role of managed)
      expect(role.id, 'a role with managed policies').toMatch(
        /^Custom(S3AutoDeleteObjects|CDKBucketDeployment)/,
      );
  });

  it('streams every HTTP function through its Function URL', () => {
    for (const [name, definition] of Object.entries(rows)) {
      if (definition.trigger.kind !== 'http') continue;
      const fn = functionOf(name);
      const url = one(
        all('AWS::Lambda::Url').filter((u) =>
          referencesIn(u.stack, u.properties.TargetFunctionArn).includes(key(fn)),
        ),
        `${name}'s Function URL`,
      );
      expect(url.properties.InvokeMode, name).toBe('RESPONSE_STREAM');
      expect(url.properties.AuthType, name).toBe('NONE');
    }
  });

  it('streams every HTTP route through API Gateway, CORS preflights (OPTIONS) to the same function, and routes nothing else', () => {
    const resources = new Map(all('AWS::ApiGateway::Resource').map((r) => [key(r), r]));
    const pathOf = (resourceKey: string): string => {
      const resource = resources.get(resourceKey);
      if (!resource) return '';
      const parent = referencesIn(resource.stack, resource.properties.ParentId)[0] as string;
      return `${pathOf(parent)}/${resource.properties.PathPart}`;
    };
    const methods = all('AWS::ApiGateway::Method').map((m) => ({
      route: `${m.properties.HttpMethod} ${pathOf(referencesIn(m.stack, m.properties.ResourceId)[0] as string)}`,
      method: m,
    }));
    const expected: string[] = [];
    for (const [name, definition] of Object.entries(rows)) {
      if (definition.trigger.kind !== 'http') continue;
      const fn = functionOf(name);
      const preflights = [...new Set(definition.trigger.routes.map((r) => r.path))].map((path) => ({
        method: 'OPTIONS',
        path,
      }));
      for (const route of [...definition.trigger.routes, ...preflights]) {
        const wanted = `${route.method} ${route.path}`;
        expected.push(wanted);
        const method = one(
          methods.filter((m) => m.route === wanted).map((m) => m.method),
          wanted,
        );
        const integration = method.properties.Integration;
        expect(integration.Type, wanted).toBe('AWS_PROXY');
        expect(integration.ResponseTransferMode, wanted).toBe('STREAM');
        expect(JSON.stringify(integration.Uri), wanted).toContain('/response-streaming-invocations');
        expect(referencesIn(method.stack, integration.Uri), wanted).toContain(key(fn));
        expect(integration.TimeoutInMillis, wanted).toBe(timeoutOf(definition) * 1000);
      }
    }
    expect(methods.map((m) => m.route).sort()).toEqual(expected.sort());
  });

  it("answers API Gateway's own errors OpenAI-shaped, as valid JSON whatever path the client sent", () => {
    const responses = all('AWS::ApiGateway::GatewayResponse');
    expect(responses.map((r) => r.properties.ResponseType).sort()).toEqual([
      'DEFAULT_4XX',
      'DEFAULT_5XX',
      'MISSING_AUTHENTICATION_TOKEN',
      'REQUEST_TOO_LARGE',
      'THROTTLED',
    ]);
    // The two a client's SDK acts on by their code, as it would on ours (core/errors.ts).
    const codeOf = (type: string) => {
      const response = one(
        responses.filter((r) => r.properties.ResponseType === type),
        type,
      );
      const template = response.properties.ResponseTemplates['application/json'] as string;
      const body = JSON.parse(template.replaceAll('$context.error.messageString', '"m"')) as {
        error: { code: string; type: string };
      };
      return { status: response.properties.StatusCode, ...body.error };
    };
    expect(codeOf('THROTTLED')).toMatchObject({
      status: '429',
      code: 'rate_limit_exceeded',
      type: 'requests',
    });
    expect(codeOf('REQUEST_TOO_LARGE')).toMatchObject({ status: '413', code: 'request_too_large' });
    for (const response of responses) {
      const template = response.properties.ResponseTemplates['application/json'] as string;
      // What API Gateway substitutes: its own words, a quoted message, and the client's path, unescaped.
      const rendered = template
        .replaceAll('$context.httpMethod', 'POST')
        .replaceAll('$context.error.messageString', '"Missing Authentication Token"')
        .replaceAll('$context.path', '/v1/a"b\\c');
      const body = JSON.parse(rendered) as { error: Record<string, unknown> };
      expect(schemaErrors('ErrorResponse', body), response.properties.ResponseType).toBe('');
      // A browser client reads them as it reads the functions' own errors: the same CORS headers, as literals.
      const headers = response.properties.ResponseParameters as Record<string, string>;
      for (const [name, value] of Object.entries(CORS_HEADERS))
        expect(headers[`gatewayresponse.header.${name}`], `${response.properties.ResponseType} ${name}`).toBe(
          `'${value}'`,
        );
    }
  });

  it('consumes the settlement queue with partial batch failures, within its visibility timeout, redriving to the DLQ after 5 receives', () => {
    const queue = settlementQueue();
    const dlq = settlementDlq();
    const consumer = functionOf('settlement');
    const mapping = one(
      all('AWS::Lambda::EventSourceMapping').filter((m) =>
        referencesIn(m.stack, m.properties.EventSourceArn).includes(key(queue)),
      ),
      'the settlement event source',
    );
    expect(referencesIn(mapping.stack, mapping.properties.FunctionName)).toEqual([key(consumer)]);
    expect(mapping.properties.FunctionResponseTypes).toEqual(['ReportBatchItemFailures']);
    expect(mapping.properties.ScalingConfig).toEqual({ MaximumConcurrency: SETTLEMENT_MAX_CONCURRENCY });
    // Its own share of the region's concurrency: a surge of streams cannot throttle settlements into the DLQ.
    expect(consumer.properties.ReservedConcurrentExecutions).toBe(RESERVED);
    for (const name of Object.keys(rows))
      if (name !== 'settlement')
        expect(functionOf(name).properties.ReservedConcurrentExecutions, name).toBeUndefined();
    expect(queue.properties.VisibilityTimeout).toBeGreaterThanOrEqual(6 * consumer.properties.Timeout);
    expect(queue.properties.RedrivePolicy.maxReceiveCount).toBe(5);
    expect(referencesIn(queue.stack, queue.properties.RedrivePolicy.deadLetterTargetArn)).toEqual([key(dlq)]);
  });

  it('runs every scheduled function on EventBridge Scheduler with the stage schedule', () => {
    for (const [name, definition] of Object.entries(rows)) {
      if (definition.trigger.kind !== 'schedule') continue;
      const fn = functionOf(name);
      const schedule = one(
        all('AWS::Scheduler::Schedule').filter((s) =>
          referencesIn(s.stack, s.properties.Target.Arn).includes(key(fn)),
        ),
        `${name}'s schedule`,
      );
      expect(schedule.properties.ScheduleExpression).toBe(DEFAULT_SCHEDULES[definition.trigger.schedule]);
      expect(schedule.properties.State).toBe('ENABLED');
      // One run per tick: neither the scheduler nor Lambda's async invocation retries a failed run.
      expect(schedule.properties.Target.RetryPolicy).toMatchObject({ MaximumRetryAttempts: 0 });
      const invokeConfig = one(
        all('AWS::Lambda::EventInvokeConfig').filter((c) =>
          referencesIn(c.stack, c.properties.FunctionName).includes(key(fn)),
        ),
        `${name}'s async invoke config`,
      );
      expect(invokeConfig.properties.MaximumRetryAttempts).toBe(0);
    }
  });

  it('points the uptime probe at the API through the CDN, the base URL clients and the status page use', () => {
    const distribution = one(all('AWS::CloudFront::Distribution'), 'the distribution');
    for (const [name, definition] of Object.entries(rows)) {
      const fn = functionOf(name);
      const url = fn.properties.Environment.Variables[PROBE_BASE_URL_ENV];
      if (!definition.uses.publicApi) {
        expect(url, name).toBeUndefined();
        continue;
      }
      // `https://` + the distribution's domain name + `/v1`.
      const [separator, parts] = url['Fn::Join'];
      expect(separator).toBe('');
      expect(parts[0]).toBe('https://');
      expect(parts.at(-1)).toBe('/v1');
      expect(referencesIn(fn.stack, parts.slice(1, -1))).toEqual([key(distribution)]);
    }
    expect(Object.values(rows).filter((d) => d.uses.publicApi)).toHaveLength(1);
  });

  it('alarms on DLQ depth and queue age, every function’s errors and throttles, and the API’s and Function URLs’ 5xx rates, to the alarm topic', () => {
    const topic = key(one(all('AWS::SNS::Topic'), 'the alarm topic'));
    const alarms = all('AWS::CloudWatch::Alarm');
    for (const alarm of alarms)
      expect(referencesIn(alarm.stack, alarm.properties.AlarmActions), alarm.id).toEqual([topic]);
    const on = (metric: string, dimension: Resource) =>
      alarms.filter(
        (a) =>
          a.properties.MetricName === metric &&
          referencesIn(a.stack, a.properties.Dimensions).includes(key(dimension)),
      );

    const dlqAlarm = one(
      on('ApproximateNumberOfMessagesVisible', settlementDlq()),
      'the DLQ alarm',
    ).properties;
    expect(dlqAlarm).toMatchObject({ Threshold: 1, ComparisonOperator: 'GreaterThanOrEqualToThreshold' });
    // The warning before the DLQ, well within the hold TTL: settlements waiting on a throttled or failing consumer.
    const ageAlarm = one(
      on('ApproximateAgeOfOldestMessage', settlementQueue()),
      'the queue age alarm',
    ).properties;
    expect(ageAlarm).toMatchObject({ Threshold: SETTLEMENT_AGE_ALARM_SECONDS, Statistic: 'Maximum' });
    const consumerEnv = functionOf('settlement').properties.Environment.Variables as Record<string, unknown>;
    const { holdTtlMs } = loadConfig(
      Object.fromEntries(Object.entries(consumerEnv).map(([k, v]) => [k, typeof v === 'string' ? v : 'ref'])),
    );
    expect(SETTLEMENT_AGE_ALARM_SECONDS * 1000).toBeLessThan(holdTtlMs / 2);

    // Function URL traffic bypasses the REST API: its own 5xx rate, per HTTP function.
    for (const [name, definition] of Object.entries(rows)) {
      if (definition.trigger.kind !== 'http') continue;
      const urlAlarm = one(
        alarms.filter((a) =>
          a.properties.Metrics?.some(
            (m: Json) =>
              m.MetricStat?.Metric.MetricName === 'Url5xxCount' &&
              referencesIn(a.stack, m.MetricStat.Metric.Dimensions).includes(key(functionOf(name))),
          ),
        ),
        `${name}'s Function URL 5xx alarm`,
      ).properties;
      expect(urlAlarm).toMatchObject({ Threshold: 0.05, EvaluationPeriods: 2 });
      const expression = (urlAlarm.Metrics as Json[]).find((m) => m.Expression)?.Expression as string;
      const ids = Object.fromEntries(
        (urlAlarm.Metrics as Json[])
          .filter((m) => m.MetricStat)
          .map((m) => [m.MetricStat.Metric.MetricName, m.Id]),
      );
      expect(expression).toBe(`${ids.Url5xxCount} / ${ids.UrlRequestCount}`);
    }

    for (const name of Object.keys(rows)) {
      for (const metric of ['Errors', 'Throttles']) {
        const alarm = one(on(metric, functionOf(name)), `${name} ${metric}`).properties;
        expect(alarm).toMatchObject({ Namespace: 'AWS/Lambda', Threshold: 1, Statistic: 'Sum' });
      }
    }

    const api = one(all('AWS::ApiGateway::RestApi'), 'the REST API');
    const apiAlarm = one(
      alarms.filter((a) => a.properties.MetricName === '5XXError'),
      'the API 5xx alarm',
    ).properties;
    expect(apiAlarm).toMatchObject({ Namespace: 'AWS/ApiGateway', Statistic: 'Average', Threshold: 0.05 });
    const dimension = (name: string) => (apiAlarm.Dimensions as Json[]).find((d) => d.Name === name)?.Value;
    expect(dimension('ApiName')).toBe(api.properties.Name);
    expect(referencesIn('api', dimension('Stage'))).toEqual([
      key(one(all('AWS::ApiGateway::Stage'), 'the API stage')),
    ]);
  });

  it('alarms on the first settlement record an HTTP function logged instead of sending (a charge to replay)', () => {
    const topic = key(one(all('AWS::SNS::Topic'), 'the alarm topic'));
    const senders = Object.entries(rows).filter(([, d]) => d.uses.sendsTo?.includes('settlement'));
    expect(senders.map(([name]) => name).sort()).toEqual(
      ['audio-speech', 'audio-transcriptions', 'chat-completions', 'embeddings'].sort(),
    );
    for (const [name] of senders) {
      const group = one(
        all('AWS::Logs::LogGroup').filter(
          (g) => g.properties.LogGroupName === `/aws/lambda/${PREFIX}-${name}`,
        ),
        `${name}'s log group`,
      );
      const filter = one(
        all('AWS::Logs::MetricFilter').filter((f) =>
          referencesIn(f.stack, f.properties.LogGroupName).includes(key(group)),
        ),
        `${name}'s unsent-settlement filter`,
      ).properties;
      // Both log lines of a record that may not have reached the queue begin with the pattern's prefix.
      const prefix = /^\{ \$\.message = "(.*)\*" \}$/.exec(filter.FilterPattern)?.[1];
      expect(prefix, filter.FilterPattern).toBe(UNSENT_SETTLEMENT_PREFIX);
      for (const message of Object.values(UNSENT_SETTLEMENT))
        expect(message.startsWith(prefix as string)).toBe(true);
      const transformation = (filter.MetricTransformations as Json[])[0];
      const alarm = one(
        all('AWS::CloudWatch::Alarm').filter(
          (a) =>
            a.properties.MetricName === transformation.MetricName &&
            a.properties.Namespace === transformation.MetricNamespace,
        ),
        `${name}'s unsent-settlement alarm`,
      );
      expect(alarm.properties).toMatchObject({ Threshold: 1, Statistic: 'Sum', Period: 300 });
      expect(referencesIn(alarm.stack, alarm.properties.AlarmActions)).toEqual([topic]);
    }
  });

  it('alarms on the log lines a function declares: a refused price sync, unread price lists, failed uptime rounds, holds not released', () => {
    const topic = key(one(all('AWS::SNS::Topic'), 'the alarm topic'));
    const declared = Object.entries(rows).flatMap(([name, d]) =>
      (d.logAlarms ?? []).map((a) => ({ name, ...a })),
    );
    expect(declared.map((a) => `${a.name} ${a.prefix}`).sort()).toEqual([
      `hold-sweeper ${HOLD_NOT_RELEASED}`,
      `price-sync ${PRICE_LIST_UNAVAILABLE}`,
      `price-sync ${PRICE_SYNC_REFUSED_PREFIX}`,
      `uptime-probe ${UPTIME_ROUND_FAILED}`,
    ]);
    // A hold left held through 3 of 4 sweeps, a price list unread through 3 of 4 syncs: no one-off blip. Their
    // period is one run of their schedule (here the defaults: 5 minutes, an hour).
    const runMinutes: Record<string, number> = { 'hold-sweeper': 5, 'price-sync': 60 };
    expect(declared.find((a) => a.id === 'holds-not-released')).toMatchObject({
      threshold: 1,
      periodMinutes: 'run',
      datapointsToAlarm: 3,
      evaluationPeriods: 4,
    });
    expect(declared.find((a) => a.id === 'unread-price-lists')).toMatchObject({
      periodMinutes: 'run',
      datapointsToAlarm: 3,
      evaluationPeriods: 4,
    });
    // A refused sync at once; a failed probe round in 3 of the last 5 minutes, as the incident rule asks of a check.
    expect(declared.find((a) => a.id === 'refused-prices')).toMatchObject({ threshold: 1 });
    expect(declared.find((a) => a.name === 'uptime-probe')).toMatchObject({
      threshold: 1,
      periodMinutes: 1,
      datapointsToAlarm: 3,
      evaluationPeriods: 5,
    });
    for (const alarm of declared) {
      const group = one(
        all('AWS::Logs::LogGroup').filter(
          (g) => g.properties.LogGroupName === `/aws/lambda/${PREFIX}-${alarm.name}`,
        ),
        `${alarm.name}'s log group`,
      );
      const filter = one(
        all('AWS::Logs::MetricFilter').filter(
          (f) =>
            referencesIn(f.stack, f.properties.LogGroupName).includes(key(group)) &&
            f.properties.FilterPattern === `{ $.message = "${alarm.prefix}*" }`,
        ),
        `${alarm.name}'s ${alarm.id} filter`,
      ).properties;
      const transformation = (filter.MetricTransformations as Json[])[0];
      const found = one(
        all('AWS::CloudWatch::Alarm').filter(
          (a) =>
            a.properties.MetricName === transformation.MetricName &&
            a.properties.Namespace === transformation.MetricNamespace,
        ),
        `${alarm.name}'s ${alarm.id} alarm`,
      );
      expect(found.properties).toMatchObject({
        Threshold: alarm.threshold,
        Statistic: 'Sum',
        Period:
          60 *
          (alarm.periodMinutes === 'run' ? (runMinutes[alarm.name] as number) : (alarm.periodMinutes ?? 5)),
        EvaluationPeriods: alarm.evaluationPeriods ?? 1,
        DatapointsToAlarm: alarm.datapointsToAlarm ?? 1,
      });
      expect(referencesIn(found.stack, found.properties.AlarmActions)).toEqual([topic]);
    }
  });

  it('serves /v1/* from the API and the status page and /usage.json from the private bucket through OAC', () => {
    const site = Template.fromJSON(templates.site);
    site.hasResourceProperties('AWS::S3::Bucket', {
      PublicAccessBlockConfiguration: {
        BlockPublicAcls: true,
        BlockPublicPolicy: true,
        IgnorePublicAcls: true,
        RestrictPublicBuckets: true,
      },
    });
    const policy = one(all('AWS::S3::BucketPolicy'), 'the bucket policy').properties.PolicyDocument
      .Statement as Json[];
    expect(policy).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } }),
        expect.objectContaining({
          Effect: 'Allow',
          Action: 's3:GetObject',
          Principal: { Service: 'cloudfront.amazonaws.com' },
          Condition: { StringEquals: { 'AWS:SourceArn': expect.anything() } },
        }),
      ]),
    );

    const config = one(all('AWS::CloudFront::Distribution'), 'the distribution').properties
      .DistributionConfig;
    const origin = (id: string) => (config.Origins as Json[]).find((o) => o.Id === id);
    expect(config.DefaultRootObject).toBe('index.html');
    const bucketOrigin = origin(config.DefaultCacheBehavior.TargetOriginId);
    expect(referencesIn('site', bucketOrigin.DomainName)).toEqual([key(siteBucket())]);
    expect(bucketOrigin.OriginAccessControlId).toBeDefined();

    const behavior = (path: string) => (config.CacheBehaviors as Json[]).find((b) => b.PathPattern === path);
    const api = behavior('/v1/*');
    expect(referencesIn('site', origin(api.TargetOriginId).DomainName)).toContain(
      key(one(all('AWS::ApiGateway::RestApi'), 'the REST API')),
    );
    expect(api.AllowedMethods).toEqual(expect.arrayContaining(['GET', 'POST']));
    expect(api.CachePolicyId).toBe('4135ea2d-6df8-44a3-9df3-4b5a84be39ad'); // Managed-CachingDisabled
    // Every request body reaches the functions base64, its bytes whole: uploads, and compressed bodies of any type.
    expect(one(all('AWS::ApiGateway::RestApi'), 'the REST API').properties.BinaryMediaTypes).toEqual(['*/*']);
    expect(api.OriginRequestPolicyId).toBe('b689b0a8-53d0-40ab-baf2-68738e2966ac'); // AllViewerExceptHostHeader
    expect(api.ViewerProtocolPolicy).toBe('https-only');
    expect(behavior('/usage.json').TargetOriginId).toBe(config.DefaultCacheBehavior.TargetOriginId);
    // The status page and usage.json carry security headers (HSTS, nosniff, no framing); the API's own are its
    // functions', CORS included, untouched.
    const SECURITY_HEADERS = '67f7725c-6f97-4210-82d7-5512b31e9d03'; // Managed-SecurityHeadersPolicy
    expect(config.DefaultCacheBehavior.ResponseHeadersPolicyId).toBe(SECURITY_HEADERS);
    expect(behavior('/usage.json').ResponseHeadersPolicyId).toBe(SECURITY_HEADERS);
    expect(api.ResponseHeadersPolicyId).toBeUndefined();

    // The HTTP functions know how long CloudFront waits for them, to end a call before it answers 504 itself.
    const readTimeoutSeconds = origin(api.TargetOriginId).CustomOriginConfig.OriginReadTimeout as number;
    expect(readTimeoutSeconds).toBe(60);
    for (const name of Object.keys(rows)) {
      const variables = functionOf(name).properties.Environment.Variables as Record<string, Json>;
      const http = (rows[name] as FunctionDefinition).trigger.kind === 'http';
      expect(variables.CDN_READ_TIMEOUT_MS, name).toBe(http ? String(readTimeoutSeconds * 1000) : undefined);
      // And how long the regional REST API lets a call stay silent before its first byte (5 minutes).
      expect(variables.REST_API_IDLE_TIMEOUT_MS, name).toBe(http ? '300000' : undefined);
    }
  });
});
