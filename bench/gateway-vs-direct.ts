/**
 * `npm run bench`: what the gateway adds on top of calling the upstream directly.
 *
 * Starts the local stack (`node bin/local.ts`: gateway + upstream simulator + emulators) as a child process,
 * then runs closed-loop load against two targets with byte-identical request bodies:
 *
 * - direct:  POST {simulator}/p/sim-a/v1/chat/completions (the deployment the gateway routes the model to)
 * - gateway: POST {gateway}/v1/chat/completions
 *
 * Each scenario runs a warm-up round per target (not counted), then short measured rounds that alternate
 * between the targets in ABBA order (A B, B A, A B, …) so drift (JIT, GC, CPU contention on a small
 * machine) hits every target alike. Latencies are from `performance.now()` before dispatch to the end of the
 * body; "added" numbers are differences of the targets' percentiles (gateway p99 − direct p99), not
 * percentiles of differences.
 *
 * With --floor, two reference targets join, in front of the same simulator and measured in the same rounds: a bare
 * Node proxy (lib/bare-proxy.ts), and the same work as a Lambda handler behind the local Function URL host
 * (lib/bare-handler.ts). They are not judged. The first shows what any Node proxy adds on this machine in this
 * run; the step to the second is what the Lambda shape costs; the step from it to the gateway is the gateway's own.
 *
 * Flags: --rounds N, --round-ms N, --warmup-ms N, --gap-ms N, --quick, --scenario ID (repeatable), --floor, --help.
 * Environment: GATEWAY_ENV_<NAME>=value is passed to the stack as <NAME>=value.
 * Writes bench/results/latest.json. Exits 1 if any request failed; failed targets do not change the code.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  discardSettlements,
  measureStoreRoundTrip,
  provisionBenchAccount,
  settlementsDone,
} from './lib/accounting.ts';
import {
  findStoreJvm,
  type GatewayProcess,
  type ProcMemory,
  passThroughEnv,
  startGatewayProcess,
  type ThreadCpu,
  whenQuiet,
} from './lib/gateway-process.ts';
import { type Endpoint, openEndpoint, type RoundResult, runRound, type Target } from './lib/load.ts';
import { concat, type Distribution, distribution, distributionOf } from './lib/stats.ts';

const REPO_ROOT = fileURLToPath(new URL('..', import.meta.url));
const RESULTS_FILE = fileURLToPath(new URL('./results/latest.json', import.meta.url));

const MODEL = 'famA-v4.1-flash';
const API_KEY = 'svc_live_benchBENCHbench0000000001';
/** `npm start` seeds the demo account with the demo key; the bench makes it a volume account. */
const BENCH_ACCOUNT = 'acct_demo';
/** The deployment the gateway routes MODEL to first, and one of its keys. */
const DIRECT_PATH = '/p/sim-a/v1/chat/completions';
const DIRECT_KEY = 'sim-a-key-1';
const EXPECTED_PROVIDER = 'sim-a';
const COMPLETION_TOKENS = 16;

// ---------------------------------------------------------------------------------------------------------
// Scenarios and targets

type Focus = 'latency' | 'throughput' | 'ttfb';

interface Scenario {
  readonly id: string;
  readonly title: string;
  readonly concurrency: number;
  readonly stream: boolean;
  readonly upstreamLatencyMs: number;
  readonly focus: Focus;
}

const SCENARIOS: readonly Scenario[] = [
  {
    id: 'c1',
    title: 'latency, 1 client',
    concurrency: 1,
    stream: false,
    upstreamLatencyMs: 0,
    focus: 'latency',
  },
  {
    id: 'c16',
    title: 'latency, 16 clients',
    concurrency: 16,
    stream: false,
    upstreamLatencyMs: 0,
    focus: 'latency',
  },
  {
    id: 'c64-50ms',
    title: 'throughput, 64 clients, 50 ms upstream',
    concurrency: 64,
    stream: false,
    upstreamLatencyMs: 50,
    focus: 'throughput',
  },
  {
    id: 'c64',
    title: 'throughput, 64 clients, 0 ms upstream (CPU-bound, informational)',
    concurrency: 64,
    stream: false,
    upstreamLatencyMs: 0,
    focus: 'throughput',
  },
  {
    id: 'stream',
    title: 'streaming TTFB, 1 client',
    concurrency: 1,
    stream: true,
    upstreamLatencyMs: 0,
    focus: 'ttfb',
  },
];

/** Numbers comparing a target with the baseline (the first target). */
type Metric = 'addedP50' | 'addedP99' | 'throughputRatio' | 'addedTtfbP50';

interface Check {
  readonly scenario: string;
  readonly metric: Metric;
  readonly label: string;
  readonly max?: number;
  readonly min?: number;
  readonly unit: 'ms' | '%';
}

const CHECKS: readonly Check[] = [
  { scenario: 'c1', metric: 'addedP50', label: 'c=1: added p50 ≤ 0.7 ms', max: 0.7, unit: 'ms' },
  { scenario: 'c1', metric: 'addedP99', label: 'c=1: added p99 ≤ 2 ms', max: 2, unit: 'ms' },
  { scenario: 'c16', metric: 'addedP99', label: 'c=16: added p99 ≤ 8 ms', max: 8, unit: 'ms' },
  {
    scenario: 'c64-50ms',
    metric: 'throughputRatio',
    label: 'c=64, 50 ms upstream: throughput ≥ 95 % of direct',
    min: 0.95,
    unit: '%',
  },
  { scenario: 'stream', metric: 'addedTtfbP50', label: 'stream: added TTFB p50 ≤ 1 ms', max: 1, unit: 'ms' },
];

/**
 * The same bytes for every target. The simulator reads its controls from the message text, so they act the
 * same on both paths. Streams ask for the usage chunk because the gateway always asks its upstream for it:
 * with it in the body, the simulator does the same work on both paths.
 */
const requestBody = (s: Scenario): Buffer =>
  Buffer.from(
    JSON.stringify({
      model: MODEL,
      messages: [
        {
          role: 'user',
          content: `Say something short. [[sim: latency_ms=${s.upstreamLatencyMs} completion_tokens=${COMPLETION_TOKENS}]]`,
        },
      ],
      max_tokens: COMPLETION_TOKENS,
      ...(s.stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    }),
  );

/** The gateway with metering off: a second stack (`METERING=off`) on the same machine. */
const UNMETERED = 'gateway-unmetered';
/** The references of --floor: measured beside the gateways, judged against no target. */
const BARE = 'bare-proxy';
const BARE_HANDLER = 'bare-handler';
const REFERENCES: ReadonlySet<string> = new Set([BARE, BARE_HANDLER]);

const targetsFor = (
  stack: GatewayProcess,
  unmetered: GatewayProcess,
  references: readonly { readonly name: string; readonly url: string }[],
): Target[] => [
  {
    name: 'direct',
    url: `${stack.simulatorUrl}${DIRECT_PATH}`,
    headers: { authorization: `Bearer ${DIRECT_KEY}` },
  },
  {
    name: 'gateway',
    url: `${stack.gatewayUrl}/v1/chat/completions`,
    headers: { authorization: `Bearer ${API_KEY}` },
    expectHeaders: { 'x-svc-provider': EXPECTED_PROVIDER },
  },
  {
    name: UNMETERED,
    url: `${unmetered.gatewayUrl}/v1/chat/completions`,
    headers: { authorization: `Bearer ${API_KEY}` },
    expectHeaders: { 'x-svc-provider': EXPECTED_PROVIDER },
  },
  ...references.map(({ name, url }) => ({ name, url: `${url}/v1/chat/completions`, headers: {} })),
];

/**
 * Starts a reference of --floor (`bench/lib/NAME.ts`) in front of the metered stack's simulator (the direct
 * target's), in a process of its own; resolves to its URL.
 */
const startReference = async (
  name: string,
  stack: GatewayProcess,
): Promise<{ child: ChildProcess; url: string }> => {
  const script = fileURLToPath(new URL(`./lib/${name}.ts`, import.meta.url));
  const child = spawn(process.execPath, [script, `${stack.simulatorUrl}${DIRECT_PATH}`, DIRECT_KEY], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let seen = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      seen += chunk.toString('utf8');
      const found = / listening on (http:\/\/\S+)/.exec(seen);
      if (found) resolve(found[1] as string);
    });
    child.once('exit', (code) => reject(new Error(`${name} exited (${code}) before it listened`)));
  });
  child.stdout?.resume();
  return { child, url };
};

// ---------------------------------------------------------------------------------------------------------
// Settings

interface Settings {
  readonly rounds: number;
  readonly roundMs: number;
  readonly warmupMs: number;
  /** Pause after every round, so background work of one target (settlement sends) ends before the next. */
  readonly gapMs: number;
  /** Load on each gateway before the first scenario (JIT warm-up of the gateway and of DynamoDB Local's JVM). */
  readonly stackWarmupMs: number;
  readonly quick: boolean;
  /** Measure the two references too (--floor): the bare proxy and the bare handler. */
  readonly floor: boolean;
  readonly scenarios: readonly Scenario[];
}

const USAGE = `usage: npm run bench -- [options]

  --rounds N       measured rounds per target and scenario (default 6; --quick: 2)
  --round-ms N     length of a round in ms (default 1500; --quick: 500)
  --warmup-ms N    length of the warm-up round per target in ms (default 1000; --quick: 300)
  --gap-ms N       pause after each round in ms (default 100)
  --stack-warmup-ms N
                   load on each gateway before the first scenario, in ms (default 20000; --quick: 1000):
                   DynamoDB Local's JVM keeps compiling for about a minute after start
  --quick          short smoke run
  --scenario ID    run only this scenario (repeatable): ${SCENARIOS.map((s) => s.id).join(', ')}
  --floor          also measure two references in front of the same simulator, in the same rounds: a bare
                   Node proxy (bench/lib/bare-proxy.ts) and its work as a Lambda handler behind the local
                   Function URL host (bench/lib/bare-handler.ts); reported, not judged (their stack CPU is
                   the simulator's alone)
  -h, --help       this text

  GATEWAY_ENV_<NAME>=value in the environment is passed to the stack as <NAME>=value.`;

const parseSettings = (): Settings => {
  const parse = () =>
    parseArgs({
      options: {
        rounds: { type: 'string' },
        'round-ms': { type: 'string' },
        'warmup-ms': { type: 'string' },
        'gap-ms': { type: 'string' },
        'stack-warmup-ms': { type: 'string' },
        quick: { type: 'boolean', default: false },
        floor: { type: 'boolean', default: false },
        scenario: { type: 'string', multiple: true },
        help: { type: 'boolean', short: 'h', default: false },
      },
      strict: true,
      allowPositionals: false,
    });
  let values: ReturnType<typeof parse>['values'];
  try {
    values = parse().values;
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const int = (name: string, raw: string | undefined, fallback: number, min: number): number => {
    if (raw === undefined) return fallback;
    const n = Number(raw);
    if (!Number.isInteger(n) || n < min)
      throw new UsageError(`--${name} must be an integer ≥ ${min}, got "${raw}"`);
    return n;
  };
  const quick = values.quick;
  const ids = values.scenario?.flatMap((s) => s.split(',')).map((s) => s.trim()) ?? [];
  for (const id of ids) {
    if (!SCENARIOS.some((s) => s.id === id)) {
      throw new UsageError(`unknown scenario "${id}"; one of ${SCENARIOS.map((s) => s.id).join(', ')}`);
    }
  }
  return {
    rounds: int('rounds', values.rounds, quick ? 2 : 6, 1),
    roundMs: int('round-ms', values['round-ms'], quick ? 500 : 1500, 50),
    warmupMs: int('warmup-ms', values['warmup-ms'], quick ? 300 : 1000, 0),
    gapMs: int('gap-ms', values['gap-ms'], 100, 0),
    stackWarmupMs: int('stack-warmup-ms', values['stack-warmup-ms'], quick ? 1000 : 20_000, 0),
    quick,
    floor: values.floor,
    // In the order given, so e.g. `--scenario c64 --scenario c1` shows c1 on a gateway warmed by load.
    scenarios:
      ids.length === 0
        ? SCENARIOS
        : [...new Set(ids)].map((id) => SCENARIOS.find((s) => s.id === id) as Scenario),
  };
};

class UsageError extends Error {
  override name = 'UsageError';
}

// ---------------------------------------------------------------------------------------------------------
// Running

interface TargetSummary {
  readonly name: string;
  readonly rounds: number;
  /** Successful measured requests. */
  readonly requests: number;
  readonly warmupRequests: number;
  /** Failed requests, warm-up included. */
  readonly errors: number;
  readonly errorSamples: readonly string[];
  /** Successful requests completed within the measured windows, per second of window. */
  readonly throughput: number;
  readonly latency: Distribution | null;
  readonly ttfb: Distribution | null;
  /** The gateway's admission round trip as it reported it per request (Server-Timing), ms. */
  readonly admit: Distribution | null;
  /**
   * Requests whose upstream call ran beside their admission (ADR 0011), and how long their answer waited for the
   * hold (Server-Timing admit-wait), ms.
   */
  readonly admitWait: Distribution | null;
  readonly overlapped: number;
  /** Its upstream call as it reported it (Server-Timing), non-stream scenarios, ms. */
  readonly upstream: Distribution | null;
  /** Latency beside that call and admission: the gateway's own work and the client↔gateway hops, ms. */
  readonly beside: Distribution | null;
  /**
   * Latency beyond the handler's own share (Server-Timing handler): the way in and out through the host in front of
   * it — the local Function URL host here — and the client's own work, ms.
   */
  readonly outside: Distribution | null;
  readonly meanResponseBytes: number;
  /** CPU time of the stack process (all its threads) per measured request, ms. */
  readonly stackCpuMsPerRequest: number | null;
  /** The same by thread group of the stack process (see threadGroups), ms; empty when unavailable. */
  readonly stackCpuMsPerRequestByThread: Readonly<Record<string, number>>;
  /** CPU time of this load generator per measured request, ms. */
  readonly clientCpuMsPerRequest: number;
  readonly perRound: readonly { p50: number; p99: number; ttfbP50: number | null; throughput: number }[];
}

interface Comparison {
  readonly target: string;
  readonly baseline: string;
  readonly addedP50: number;
  readonly addedP90: number;
  readonly addedP99: number;
  readonly addedMean: number;
  readonly throughputRatio: number;
  readonly addedTtfbP50: number | null;
  readonly addedTtfbP99: number | null;
  readonly addedStackCpuMsPerRequest: number | null;
  /** The same differences round by round (round i of the target against round i of the baseline). */
  readonly perRoundAddedP50: readonly number[];
  readonly perRoundAddedTtfbP50: readonly number[] | null;
  readonly perRoundThroughputRatio: readonly number[];
}

interface ScenarioResult {
  readonly scenario: Scenario;
  readonly body: string;
  readonly wallMs: number;
  /** Stack process memory right after the scenario. */
  readonly memoryAfter: ProcMemory | null;
  readonly targets: readonly TargetSummary[];
  readonly comparisons: readonly Comparison[];
}

/**
 * Names for the stack's thread groups, in the order bin/local/stack.ts starts its worker threads: the SQS/S3
 * emulators, the upstream simulator, the settlement sender, then — in a stack with CONSUMERS on — the settlement
 * consumer with the hold sweeper.
 */
const WORKER_NAMES = ['emulators', 'simulator', 'settlement', 'consumer'];

const threadGroups = (cpu: ThreadCpu): Record<string, number> => {
  const groups: Record<string, number> = { gateway: cpu.main };
  cpu.workers.forEach((ms, i) => {
    groups[WORKER_NAMES[i] ?? `worker${i + 1}`] = ms;
  });
  groups['gc/jit'] = cpu.v8Helpers;
  groups.libuv = cpu.libuv;
  groups.other = cpu.other;
  return groups;
};

const addDelta = (into: Record<string, number>, before: ThreadCpu | null, after: ThreadCpu | null): void => {
  if (before === null || after === null) return;
  const a = threadGroups(after);
  const b = threadGroups(before);
  for (const [name, ms] of Object.entries(a)) into[name] = (into[name] ?? 0) + ms - (b[name] ?? 0);
};

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

const runScenario = async (
  scenario: Scenario,
  allEndpoints: readonly Endpoint[],
  stacks: { readonly metered: GatewayProcess; readonly unmetered: GatewayProcess },
  settings: Settings,
  /** Waits until a target's background work (settlements) is done, so it cannot spill into the next round. */
  settle: (endpoint: Endpoint) => Promise<void>,
): Promise<ScenarioResult> => {
  const started = performance.now();
  const endpoints = allEndpoints;
  // CPU is read from the process that served the target (direct calls hit the metered stack's simulator).
  const stackOf = (endpoint: Endpoint) =>
    endpoint.target.name === UNMETERED ? stacks.unmetered : stacks.metered;
  const stack = stacks.metered;
  const body = requestBody(scenario);
  const round = (endpoint: Endpoint, durationMs: number) =>
    runRound(endpoint, { body, stream: scenario.stream, concurrency: scenario.concurrency, durationMs });

  const warmups: RoundResult[] = [];
  for (const endpoint of endpoints) {
    if (settings.warmupMs > 0) warmups.push(await round(endpoint, settings.warmupMs));
    await settle(endpoint);
    await sleep(settings.gapMs);
  }

  const measured: RoundResult[][] = endpoints.map(() => []);
  const stackCpu: (number | null)[] = endpoints.map(() => 0);
  const clientCpu: number[] = endpoints.map(() => 0);
  const threadCpu: Record<string, number>[] = endpoints.map(() => ({}));
  const forward = endpoints.map((_, i) => i);
  const backward = [...forward].reverse();
  for (let r = 0; r < settings.rounds; r++) {
    for (const i of r % 2 === 0 ? forward : backward) {
      const served = stackOf(endpoints[i] as Endpoint);
      const stackBefore = served.cpuMs();
      const threadsBefore = served.threadCpuMs();
      const clientBefore = process.cpuUsage();
      const result = await round(endpoints[i] as Endpoint, settings.roundMs);
      // The gap belongs to the round before it: background work the round caused is finished in it.
      await settle(endpoints[i] as Endpoint);
      await sleep(settings.gapMs);
      const stackAfter = served.cpuMs();
      addDelta(threadCpu[i] as Record<string, number>, threadsBefore, served.threadCpuMs());
      const client = process.cpuUsage(clientBefore);
      (measured[i] as RoundResult[]).push(result);
      const previous = stackCpu[i];
      stackCpu[i] =
        previous === null || previous === undefined || stackBefore === null || stackAfter === null
          ? null
          : previous + stackAfter - stackBefore;
      clientCpu[i] = (clientCpu[i] as number) + (client.user + client.system) / 1000;
    }
  }

  const targets = endpoints.map((endpoint, i): TargetSummary => {
    const rounds = measured[i] as RoundResult[];
    const warmup = warmups.filter((w) => w.target === endpoint.target.name);
    const requests = sum(rounds, (r) => r.requests);
    const cpu = stackCpu[i];
    return {
      name: endpoint.target.name,
      rounds: rounds.length,
      requests,
      warmupRequests: sum(warmup, (r) => r.requests),
      errors: sum(rounds, (r) => r.errors) + sum(warmup, (r) => r.errors),
      errorSamples: [...warmup, ...rounds].flatMap((r) => r.errorSamples).slice(0, 5),
      throughput: (sum(rounds, (r) => r.completedInWindow) * 1000) / sum(rounds, (r) => r.durationMs),
      latency: distribution(concat(rounds.map((r) => r.latency))),
      ttfb: scenario.stream ? distribution(concat(rounds.flatMap((r) => (r.ttfb ? [r.ttfb] : [])))) : null,
      admit: distribution(concat(rounds.map((r) => r.admit))),
      admitWait: distribution(concat(rounds.map((r) => r.admitWait))),
      overlapped: sum(rounds, (r) => r.admitWait.length),
      upstream: distribution(concat(rounds.map((r) => r.upstream))),
      beside: distribution(concat(rounds.map((r) => r.beside))),
      outside: distribution(concat(rounds.map((r) => r.outside))),
      meanResponseBytes: requests > 0 ? sum(rounds, (r) => r.bytes) / requests : 0,
      stackCpuMsPerRequest: cpu === null || cpu === undefined || requests === 0 ? null : cpu / requests,
      stackCpuMsPerRequestByThread: Object.fromEntries(
        Object.entries(threadCpu[i] ?? {}).map(([name, ms]) => [
          name,
          requests > 0 ? ms / requests : Number.NaN,
        ]),
      ),
      clientCpuMsPerRequest: requests > 0 ? (clientCpu[i] as number) / requests : 0,
      perRound: rounds.map((r) => {
        const latency = distributionOf(r.latency);
        const ttfb = r.ttfb ? distributionOf(r.ttfb) : null;
        return {
          p50: latency?.p50 ?? Number.NaN,
          p99: latency?.p99 ?? Number.NaN,
          ttfbP50: ttfb ? ttfb.p50 : null,
          throughput: (r.completedInWindow * 1000) / r.durationMs,
        };
      }),
    };
  });

  const baseline = targets[0] as TargetSummary;
  const comparisons = targets.slice(1).map((t): Comparison => {
    const diff = (f: (s: TargetSummary) => number | null | undefined): number => {
      const a = f(t);
      const b = f(baseline);
      return a === null || a === undefined || b === null || b === undefined ? Number.NaN : a - b;
    };
    const pairs = t.perRound.map((r, i) => [r, baseline.perRound[i]] as const);
    return {
      target: t.name,
      baseline: baseline.name,
      addedP50: diff((s) => s.latency?.p50),
      addedP90: diff((s) => s.latency?.p90),
      addedP99: diff((s) => s.latency?.p99),
      addedMean: diff((s) => s.latency?.mean),
      throughputRatio: t.throughput / baseline.throughput,
      addedTtfbP50: scenario.stream ? diff((s) => s.ttfb?.p50) : null,
      addedTtfbP99: scenario.stream ? diff((s) => s.ttfb?.p99) : null,
      addedStackCpuMsPerRequest: diff((s) => s.stackCpuMsPerRequest),
      perRoundAddedP50: pairs.map(([r, b]) => r.p50 - (b?.p50 ?? Number.NaN)),
      perRoundAddedTtfbP50: scenario.stream
        ? pairs.map(([r, b]) => (r.ttfbP50 ?? Number.NaN) - (b?.ttfbP50 ?? Number.NaN))
        : null,
      perRoundThroughputRatio: pairs.map(([r, b]) => r.throughput / (b?.throughput ?? Number.NaN)),
    };
  });

  return {
    scenario,
    body: body.toString('utf8'),
    wallMs: performance.now() - started,
    memoryAfter: stack.memory(),
    targets,
    comparisons,
  };
};

const sum = <T>(items: readonly T[], f: (item: T) => number): number =>
  items.reduce((n, item) => n + f(item), 0);

/** One request per target and mode, read with the high-level API, to fail early and show what is compared. */
const preflight = async (endpoints: readonly Endpoint[]): Promise<string[]> => {
  const lines: string[] = [];
  for (const stream of [false, true]) {
    const body = requestBody({ ...(SCENARIOS[0] as Scenario), stream });
    const seen: string[] = [];
    for (const { target, pool, path } of endpoints) {
      const response = await pool.request({
        path,
        method: 'POST',
        headers: { ...target.headers, 'content-type': 'application/json' },
        body,
        headersTimeout: 30_000,
        bodyTimeout: 30_000,
      });
      const text = await response.body.text();
      const problem =
        response.statusCode !== 200
          ? `HTTP ${response.statusCode}`
          : Object.entries(target.expectHeaders ?? {})
              .filter(([name, value]) => response.headers[name.toLowerCase()] !== value)
              .map(
                ([name, value]) =>
                  `header ${name} is ${String(response.headers[name.toLowerCase()])}, not ${value}`,
              )
              .join('; ');
      if (problem) {
        throw new Error(
          `preflight ${stream ? 'stream' : 'non-stream'} request to ${target.name} failed: ${problem}\n${text}`,
        );
      }
      const content = stream
        ? text
            .split('\n')
            .filter((l) => l.startsWith('data: {'))
            .map(
              (l) =>
                (JSON.parse(l.slice(6)) as { choices?: { delta?: { content?: string } }[] }).choices?.[0]
                  ?.delta?.content ?? '',
            )
            .join('')
        : ((JSON.parse(text) as { choices?: { message?: { content?: string } }[] }).choices?.[0]?.message
            ?.content ?? '');
      const svc = Object.entries(response.headers)
        .filter(([name]) => name.startsWith('x-svc-'))
        .map(([name, value]) => `${name}=${String(value)}`)
        .join(' ');
      seen.push(content);
      lines.push(
        `  ${stream ? 'stream    ' : 'non-stream'} ${pad(target.name, 8)} HTTP ${response.statusCode}, ${text.length} B, ` +
          `${content.split(' ').length} words${svc ? `, ${svc}` : ''}`,
      );
    }
    if (new Set(seen).size > 1)
      lines.push(`  note: the ${stream ? 'streamed' : 'non-stream'} completions differ between targets`);
  }
  return lines;
};

// ---------------------------------------------------------------------------------------------------------
// Output

const pad = (s: string, n: number) => s.padEnd(n);
const lpad = (s: string, n: number) => s.padStart(n);
const ms = (v: number | null | undefined): string =>
  v === null || v === undefined || Number.isNaN(v) ? '–' : Math.abs(v) >= 100 ? v.toFixed(1) : v.toFixed(2);
const signed = (v: number | null | undefined): string =>
  v === null || v === undefined || Number.isNaN(v) ? '–' : `${v >= 0 ? '+' : '−'}${ms(Math.abs(v))}`;
const pct = (v: number): string => (Number.isNaN(v) ? '–' : `${(v * 100).toFixed(1)} %`);
const range = (values: readonly number[], f: (v: number) => string): string =>
  values.length === 0 ? '–' : `${f(Math.min(...values))} … ${f(Math.max(...values))}`;
const mib = (m: ProcMemory | null, key: keyof ProcMemory): string =>
  m === null || Number.isNaN(m[key]) ? 'n/a' : `${(m[key] / 1024).toFixed(1)} MiB`;

const table = (header: readonly string[], rows: readonly (readonly string[])[]): string => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    `  ${cells.map((c, i) => (i === 0 ? pad(c, widths[i] as number) : lpad(c, widths[i] as number))).join('  ')}`;
  return [line(header), line(widths.map((w) => '─'.repeat(w))), ...rows.map(line)].join('\n');
};

const formatScenario = (result: ScenarioResult, settings: Settings): string => {
  const { scenario: s } = result;
  const out: string[] = [];
  out.push(
    `\n■ ${s.id} — ${s.title}\n  concurrency ${s.concurrency}, ${s.stream ? 'stream' : 'non-stream'}, ` +
      `upstream latency ${s.upstreamLatencyMs} ms, ${COMPLETION_TOKENS} completion tokens; ` +
      `${settings.rounds} × ${settings.roundMs} ms per target after a ${settings.warmupMs} ms warm-up ` +
      `(${(result.wallMs / 1000).toFixed(1)} s; stack RSS after: ${mib(result.memoryAfter, 'rssKiB')})`,
  );
  const header = ['target', 'requests', 'errors', 'req/s', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms'];
  if (s.stream) header.push('TTFB p50', 'TTFB p99');
  header.push('stack CPU/req', 'client CPU/req');
  const rows = result.targets.map((t) => {
    const row = [
      t.name,
      String(t.requests),
      String(t.errors),
      t.throughput.toFixed(0),
      ms(t.latency?.p50),
      ms(t.latency?.p90),
      ms(t.latency?.p99),
      ms(t.latency?.max),
    ];
    if (s.stream) row.push(ms(t.ttfb?.p50), ms(t.ttfb?.p99));
    row.push(`${ms(t.stackCpuMsPerRequest)} ms`, `${ms(t.clientCpuMsPerRequest)} ms`);
    return row;
  });
  out.push(table(header, rows));
  for (const c of result.comparisons) {
    const head = `  ${c.target} − ${c.baseline}:`;
    if (s.focus === 'throughput') {
      out.push(
        `${head} throughput ${pct(c.throughputRatio)} of ${c.baseline} (per round ${range(c.perRoundThroughputRatio, pct)}), ` +
          `added p50 ${signed(c.addedP50)} ms, p99 ${signed(c.addedP99)} ms`,
      );
    } else if (s.focus === 'ttfb') {
      out.push(
        `${head} added TTFB p50 ${signed(c.addedTtfbP50)} ms, p99 ${signed(c.addedTtfbP99)} ms ` +
          `(per-round p50 ${range(c.perRoundAddedTtfbP50 ?? [], signed)}); ` +
          `added total stream time p50 ${signed(c.addedP50)} ms, p99 ${signed(c.addedP99)} ms`,
      );
    } else {
      out.push(
        `${head} added p50 ${signed(c.addedP50)} ms, p90 ${signed(c.addedP90)} ms, p99 ${signed(c.addedP99)} ms, ` +
          `mean ${signed(c.addedMean)} ms (per-round p50 ${range(c.perRoundAddedP50, signed)})`,
      );
    }
    out.push(
      `  ${' '.repeat(head.length - 2)} stack CPU per request ${signed(c.addedStackCpuMsPerRequest)} ms`,
    );
  }
  const direct = result.targets[0];
  for (const t of result.targets) {
    if (!t.upstream || !t.beside) continue;
    // Means add up (latency = admission's share + upstream call + the rest); percentiles do not. Where the upstream
    // call ran beside admission, admission's share is the answer's wait for the hold.
    const admission = !t.admit
      ? ''
      : t.admitWait && t.overlapped > 0
        ? `, admission ${ms(t.admit.mean)} ms beside it in ${pct(t.overlapped / t.requests)} of calls ` +
          `(the answer then waited ${ms(t.admitWait.mean)} ms for the hold)`
        : `, admission ${ms(t.admit.mean)} ms`;
    const where = `  where ${t.name}'s`;
    out.push(
      `${where} time went (means): upstream call ${ms(t.upstream.mean)} ms as it timed it ` +
        `(${direct?.name} whole call ${ms(direct?.latency?.mean)} ms)` +
        `${admission}, the rest ${ms(t.beside.mean)} ms ` +
        `(p50 ${ms(t.beside.p50)}, p90 ${ms(t.beside.p90)}: its own work and the hops to and from the client)`,
    );
    if (t.outside)
      out.push(
        `${' '.repeat(where.length - 1)} of all that, outside its handler: p50 ${ms(t.outside.p50)}, ` +
          `p90 ${ms(t.outside.p90)} ms (the way in and out through the local host, and the client)`,
      );
  }
  for (const t of result.targets) {
    const parts = Object.entries(t.stackCpuMsPerRequestByThread)
      .filter(([, v]) => v >= 0.005)
      .map(([name, v]) => `${name} ${ms(v)}`);
    if (parts.length > 0)
      out.push(`  stack CPU ms/req by thread, ${pad(`${t.name}:`, 9)} ${parts.join(', ')}`);
  }
  for (const t of result.targets) {
    if (t.errors > 0)
      out.push(`  ! ${t.name}: ${t.errors} failed requests, e.g. ${t.errorSamples.join(' | ')}`);
  }
  return out.join('\n');
};

interface CheckResult {
  readonly label: string;
  readonly scenario: string;
  readonly target: string;
  readonly value: number | null;
  readonly limit: number;
  /** REF: a --floor reference's figure, shown beside the gateways' and judged against nothing. */
  readonly status: 'PASS' | 'FAIL' | 'SKIP' | 'REF';
}

const evaluateChecks = (results: readonly ScenarioResult[], targetNames: readonly string[]): CheckResult[] =>
  CHECKS.flatMap((check): CheckResult[] => {
    const result = results.find((r) => r.scenario.id === check.scenario);
    const limit = (check.max ?? check.min) as number;
    if (!result) {
      return targetNames
        .slice(1)
        .filter((target) => !REFERENCES.has(target))
        .map((target) => ({ ...base(check), target, value: null, limit, status: 'SKIP' as const }));
    }
    // Both gateways are judged: as deployed (metering on) and unmetered (the proxy's own overhead).
    return result.comparisons.map((c) => {
      const value = c[check.metric];
      const pass =
        value !== null &&
        !Number.isNaN(value) &&
        (check.max === undefined || value <= check.max) &&
        (check.min === undefined || value >= check.min);
      return {
        ...base(check),
        target: c.target,
        value,
        limit,
        status: REFERENCES.has(c.target) ? ('REF' as const) : pass ? ('PASS' as const) : ('FAIL' as const),
      };
    });
  });

const base = (check: Check) => ({ label: check.label, scenario: check.scenario });

const STATUS_MARKS: Readonly<Record<CheckResult['status'], string>> = {
  PASS: '✔ PASS',
  FAIL: '✘ FAIL',
  SKIP: '· SKIP',
  REF: '· REF ',
};

const formatChecks = (checks: readonly CheckResult[]): string => {
  const lines = ['\nTargets'];
  for (const c of checks) {
    const unit = CHECKS.find((k) => k.label === c.label)?.unit ?? CHECKS_EXTRA.get(c.label);
    const value = c.value === null ? 'not run' : unit === '%' ? pct(c.value) : `${signed(c.value)} ms`;
    lines.push(`  ${STATUS_MARKS[c.status]}  ${pad(c.label, 52)} ${c.target}: ${value}`);
  }
  return lines.join('\n');
};

/**
 * A fresh stack is cold: V8 has not optimised the request path, and DynamoDB Local's JVM spends its first minute
 * or so compiling (C2 used ~18 s of CPU in the first 57 s of a c=1 metered run), which slows the store's
 * answers and takes CPU from everything else. AWS's DynamoDB has no such phase, so before anything is measured
 * both gateways carry closed-loop load (4 clients, admissions and settlements alike), then the metered
 * stack's settlement backlog drains and the unmetered one's queue is emptied. Not counted anywhere.
 */
const warmStacks = async (
  endpoints: readonly Endpoint[],
  durationMs: number,
  meteredFile: string,
  unmeteredFile: string,
) => {
  if (durationMs === 0) return;
  const started = performance.now();
  const body = requestBody(SCENARIOS[0] as Scenario);
  for (const endpoint of endpoints.filter((e) => e.target.name !== 'direct')) {
    await runRound(endpoint, { body, stream: false, concurrency: 4, durationMs });
  }
  await settlementsDone(meteredFile);
  await discardSettlements(unmeteredFile);
  console.log(
    `stacks warmed: ${((performance.now() - started) / 1000).toFixed(1)} s of load on each gateway`,
  );
};

// ---------------------------------------------------------------------------------------------------------
// Metering

/**
 * What admission costs the client: the gateway with metering on against the same gateway with it off, at
 * concurrency 1, compared with one admission-sized transaction round trip to the same DynamoDB Local.
 */
const meteringCost = (results: readonly ScenarioResult[], idleRoundTrip: Distribution | null) => {
  const c1 = results.find((r) => r.scenario.id === 'c1');
  const metered = c1?.targets.find((t) => t.name === 'gateway');
  const on = metered?.latency;
  const off = c1?.targets.find((t) => t.name === UNMETERED)?.latency;
  const admit = metered?.admit;
  if (!on || !off || !admit) return null;
  const added = { p50: on.p50 - off.p50, p99: on.p99 - off.p99 };
  const overlappedShare = metered.requests > 0 ? metered.overlapped / metered.requests : null;
  const label = 'metering (c=1): adds ≤ its one store round trip';
  const limit = admit.p50 + METERING_TOLERANCE_MS;
  const check: CheckResult = {
    label,
    scenario: 'c1',
    target: 'gateway',
    value: added.p50,
    limit,
    status: added.p50 <= limit ? 'PASS' : 'FAIL',
  };
  CHECKS_EXTRA.set(label, 'ms');
  return {
    check,
    figures: {
      onP50: on.p50,
      offP50: off.p50,
      addedP50: added.p50,
      addedP99: added.p99,
      admissionRoundTripP50: admit.p50,
      admissionRoundTripP99: admit.p99,
      overlappedShare,
      admissionWaitP50: metered.admitWait?.p50 ?? null,
      idleStoreRoundTripP50: idleRoundTrip?.p50 ?? null,
    },
    summary:
      `\nMetering at c=1: p50 ${ms(on.p50)} on vs ${ms(off.p50)} off → ${signed(added.p50)} ms (p99 ${signed(added.p99)} ms).` +
      `\n  Its one store round trip, as the gateway timed it (Server-Timing admit): p50 ${ms(admit.p50)}, p99 ${ms(admit.p99)}` +
      ` → metering's cost beyond that round trip: ${signed(added.p50 - admit.p50)} ms at p50.` +
      `\n  The upstream call ran beside admission in ${pct(overlappedShare ?? 0)} of calls` +
      ` (ADR 0011); their answers waited for the hold p50 ${ms(metered.admitWait?.p50)} ms.` +
      `\n  The same-sized transaction on an idle DynamoDB Local: p50 ${ms(idleRoundTrip?.p50)}; under load it also waits` +
      ` for the settlement transactions DynamoDB Local runs one at a time.`,
  };
};

/** Work metering does besides its store call (estimate, plan, headers): allowed on top of the round trip. */
const METERING_TOLERANCE_MS = 0.5;

/** Units of checks added at run time (the metering check's limit is measured, not fixed). */
const CHECKS_EXTRA = new Map<string, 'ms' | '%'>();

// ---------------------------------------------------------------------------------------------------------
// Main

let stack: GatewayProcess | null = null;
let unmeteredStack: GatewayProcess | null = null;
let referenceProcesses: ChildProcess[] = [];
let endpoints: Endpoint[] = [];
/** Where the two stacks write their stack files. */
let stackFiles: string | null = null;

const cleanup = async (): Promise<void> => {
  await Promise.allSettled(endpoints.map((e) => e.pool.destroy()));
  endpoints = [];
  for (const child of referenceProcesses) child.kill('SIGTERM');
  referenceProcesses = [];
  await Promise.allSettled([stack?.stop(), unmeteredStack?.stop()]);
  // The stacks removed their files; the directory that held them is the bench's own.
  if (stackFiles) rmSync(stackFiles, { recursive: true, force: true });
};

const onSignal = (signal: NodeJS.Signals) => {
  console.error(`\n${signal}: stopping the stack…`);
  void cleanup().finally(() => process.exit(130));
};
process.once('SIGINT', onSignal);
process.once('SIGTERM', onSignal);
// Last resort (e.g. process.exit elsewhere): the stack must not outlive the bench.
process.on('exit', () => {
  for (const child of referenceProcesses) child.kill('SIGTERM');
  for (const s of [stack, unmeteredStack]) {
    if (s?.running()) {
      try {
        process.kill(s.pid, 'SIGTERM');
      } catch {}
    }
  }
});

const main = async (): Promise<number> => {
  const settings = parseSettings();
  const childEnv = passThroughEnv(process.env);
  const perScenarioMs =
    (settings.warmupMs + settings.gapMs) * 2 + settings.rounds * 2 * (settings.roundMs + settings.gapMs);
  console.log(
    `gateway vs direct — node ${process.version}, ${os.cpus().length} CPUs (${os.cpus()[0]?.model.trim() ?? '?'}), ` +
      `load average ${os
        .loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')}`,
  );
  console.log(
    `scenarios ${settings.scenarios.map((s) => s.id).join(', ')}; ${settings.rounds} rounds × ${settings.roundMs} ms per target, ` +
      `warm-up ${settings.warmupMs} ms, gap ${settings.gapMs} ms, stack warm-up ${settings.stackWarmupMs} ms per gateway; about ${Math.ceil((perScenarioMs * settings.scenarios.length) / 1000)} s of load`,
  );
  if (Object.keys(childEnv).length > 0) {
    console.log(
      `stack environment from GATEWAY_ENV_*: ${Object.entries(childEnv)
        .map(([k, v]) => `${k}=${v}`)
        .join(' ')}`,
    );
  }

  stackFiles = mkdtempSync(join(os.tmpdir(), 'svc-bench-'));
  const meteredFile = join(stackFiles, 'metered.json');
  const unmeteredFile = join(stackFiles, 'unmetered.json');
  stack = await startGatewayProcess({
    cwd: REPO_ROOT,
    apiKey: API_KEY,
    env: { ...childEnv, LOCAL_STACK_FILE: meteredFile },
  });
  unmeteredStack = await startGatewayProcess({
    cwd: REPO_ROOT,
    apiKey: API_KEY,
    // The request path of issue 2 alone: no admission, and no settlement consumer. The consumer is a separate
    // function on AWS; here its transactions would keep a second DynamoDB Local JVM busy on the same two cores,
    // draining each round's backlog through the next rounds of every target. Records are still sent to SQS, and
    // deleted unread after each round (discardSettlements).
    env: { ...childEnv, LOCAL_STACK_FILE: unmeteredFile, METERING: 'off', CONSUMERS: 'off' },
  });
  await provisionBenchAccount(REPO_ROOT, meteredFile, BENCH_ACCOUNT);
  const memoryAtStart = stack.memory();
  console.log(
    `stack: pid ${stack.pid}, started in ${(stack.startMs / 1000).toFixed(1)} s; gateway ${stack.gatewayUrl}, ` +
      `simulator ${stack.simulatorUrl}; RSS ${mib(memoryAtStart, 'rssKiB')}`,
  );

  const references: { name: string; url: string }[] = [];
  if (settings.floor) {
    for (const name of [BARE, BARE_HANDLER]) {
      const started = await startReference(name, stack);
      referenceProcesses.push(started.child);
      references.push({ name, url: started.url });
      console.log(
        `${name} (--floor): pid ${started.child.pid}, ${started.url}, in front of ${stack.simulatorUrl}`,
      );
    }
  }
  const targets = targetsFor(stack, unmeteredStack, references);
  const connections = Math.max(...settings.scenarios.map((s) => s.concurrency));
  endpoints = targets.map((t) => openEndpoint(t, connections));
  console.log('preflight');
  for (const line of await preflight(endpoints)) console.log(line);
  await warmStacks(endpoints, settings.stackWarmupMs, meteredFile, unmeteredFile);
  // Measured warm, like the admissions it is compared with.
  const roundTrip = await measureStoreRoundTrip(meteredFile, BENCH_ACCOUNT);
  console.log(
    `accounting store: DynamoDB Local admission-sized transaction round trip p50 ${ms(roundTrip?.p50)}, p99 ${ms(roundTrip?.p99)} ` +
      `(from this process, sequential); metered stack ${meteredFile}, unmetered (METERING=off CONSUMERS=off, its settlement messages deleted unread after each round) pid ${unmeteredStack.pid}`,
  );

  const storeJvm = findStoreJvm(stack.pid);
  let storeWaitMs = 0;
  const results: ScenarioResult[] = [];
  for (const [i, scenario] of settings.scenarios.entries()) {
    process.stderr.write(`[${i + 1}/${settings.scenarios.length}] running ${scenario.id}…\n`);
    const result = await runScenario(
      scenario,
      endpoints,
      { metered: stack, unmetered: unmeteredStack },
      settings,
      // The unmetered stack runs no consumer: its round's records are deleted unread (discardSettlements says
      // why). After every round, the metered stack's DynamoDB Local must be quiet again (see whenQuiet), whatever
      // the target was.
      async (endpoint) => {
        if (endpoint.target.name === UNMETERED) await discardSettlements(unmeteredFile);
        else if (!REFERENCES.has(endpoint.target.name)) await settlementsDone(meteredFile);
        if (storeJvm !== null) storeWaitMs += await whenQuiet(storeJvm);
      },
    );
    results.push(result);
    console.log(formatScenario(result, settings));
  }

  const memoryAtEnd = stack.memory();
  const checks = evaluateChecks(
    results,
    targets.map((t) => t.name),
  );
  const errors = sum(results, (r) => sum(r.targets, (t) => t.errors));
  const metering = meteringCost(results, roundTrip);
  if (metering) checks.push(metering.check);
  console.log(formatChecks(checks));
  if (metering) console.log(metering.summary);
  console.log(
    `\nGateway process RSS (node bin/local.ts: gateway + simulator and SQS/S3 emulator worker threads; ` +
      `DynamoDB Local JVM not included): ${mib(memoryAtEnd, 'rssKiB')} at the end ` +
      `(${mib(memoryAtStart, 'rssKiB')} after start-up, peak ${mib(memoryAtEnd, 'peakRssKiB')})`,
  );
  console.log(
    storeJvm === null
      ? 'DynamoDB Local JVM not found (not Linux?): rounds did not wait for it to go quiet'
      : `Waited ${(storeWaitMs / 1000).toFixed(1)} s in all, between rounds, for the metered stack's DynamoDB Local JVM to go quiet`,
  );
  console.log(`Failed requests: ${errors}${errors > 0 ? '  ← requests failed, exit code 1' : ''}`);

  mkdirSync(fileURLToPath(new URL('./results/', import.meta.url)), { recursive: true });
  writeFileSync(
    RESULTS_FILE,
    `${JSON.stringify(
      {
        finishedAt: new Date().toISOString(),
        machine: {
          node: process.version,
          platform: `${os.platform()} ${os.release()}`,
          cpus: os.cpus().length,
          cpuModel: os.cpus()[0]?.model.trim() ?? null,
          loadavg: os.loadavg(),
        },
        settings: { ...settings, scenarios: settings.scenarios.map((s) => s.id) },
        stack: {
          pid: stack.pid,
          startMs: Math.round(stack.startMs),
          gatewayUrl: stack.gatewayUrl,
          simulatorUrl: stack.simulatorUrl,
          env: childEnv,
          memoryNote:
            'node bin/local.ts process (gateway + simulator and SQS/S3 emulator worker threads), DynamoDB Local JVM excluded',
          memoryAtStartKiB: memoryAtStart,
          memoryAtEndKiB: memoryAtEnd,
        },
        targets: targets.map((t) => ({ name: t.name, url: t.url })),
        storeRoundTrip: roundTrip,
        metering: metering?.figures ?? null,
        scenarios: results,
        checks,
        errors,
      },
      (_key, value: unknown) => (typeof value === 'number' && !Number.isFinite(value) ? null : value),
      2,
    )}\n`,
  );
  console.log(`Results written to ${RESULTS_FILE}`);
  return errors > 0 ? 1 : 0;
};

try {
  process.exitCode = await main();
} catch (error) {
  if (error instanceof UsageError) {
    console.error(`${error.message}\n\n${USAGE}`);
    process.exitCode = 2;
  } else {
    console.error(error instanceof Error ? (error.stack ?? error.message) : error);
    process.exitCode = 1;
  }
} finally {
  await cleanup();
}
