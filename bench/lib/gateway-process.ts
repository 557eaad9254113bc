/**
 * Starts the local stack (`node bin/local.ts`) as a child process for the benchmark, finds the gateway's and
 * the simulator's URLs in its output, and stops it (SIGTERM, then SIGKILL if it hangs).
 *
 * The child is one Node process holding the gateway's HTTP server (main thread), the upstream simulator and
 * the SQS/S3 emulators (worker threads); DynamoDB Local is a JVM the child starts as its own child.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

/** Variables of the bench's environment with this prefix reach the child without it. */
export const GATEWAY_ENV_PREFIX = 'GATEWAY_ENV_';

export interface GatewayProcessOptions {
  /** Repository root (where `bin/local.ts` lives). */
  readonly cwd: string;
  /** Demo API key the stack seeds (`svc_live_` + 16–128 alphanumerics). */
  readonly apiKey: string;
  /** Environment of the child on top of the bench's own; later entries win. */
  readonly env?: Readonly<Record<string, string>>;
  readonly startTimeoutMs?: number;
}

export interface ProcMemory {
  /** Resident set size now, in KiB. */
  readonly rssKiB: number;
  /** Peak resident set size, in KiB. */
  readonly peakRssKiB: number;
}

export interface GatewayProcess {
  readonly pid: number;
  /** Gateway origin, e.g. `http://127.0.0.1:41234` (the API is under `/v1`). */
  readonly gatewayUrl: string;
  /** Simulator origin, e.g. `http://127.0.0.1:41235`. */
  readonly simulatorUrl: string;
  /** Milliseconds from spawn until the gateway printed its URL. */
  readonly startMs: number;
  /** VmRSS / VmHWM of the child process from /proc; null when unavailable (not Linux, or exited). */
  memory(): ProcMemory | null;
  /** CPU time (user + system, all threads) the child has used so far, in ms; null when unavailable. */
  cpuMs(): number | null;
  /** CPU time so far per group of the child's live threads, in ms; null when unavailable. */
  threadCpuMs(): ThreadCpu | null;
  /** The last lines the child printed (stdout and stderr), for diagnostics. */
  outputTail(): string;
  /** Whether the child is still running. */
  running(): boolean;
  /** Stops the child and waits for it to exit; safe to call more than once. */
  stop(): Promise<void>;
}

/** `GATEWAY_ENV_X=y` in `env` becomes `X=y`. */
export const passThroughEnv = (env: NodeJS.ProcessEnv): Record<string, string> => {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (
      name.startsWith(GATEWAY_ENV_PREFIX) &&
      name.length > GATEWAY_ENV_PREFIX.length &&
      value !== undefined
    ) {
      out[name.slice(GATEWAY_ENV_PREFIX.length)] = value;
    }
  }
  return out;
};

const GATEWAY_LINE = /gateway listening on (https?:\/\/\S+?)\/v1\s/;
const UPSTREAM_LINE = /upstream: simulator at (https?:\/\/\S+)/;
const TAIL_LINES = 60;

let clockTicks: number | null = null;
const ticksPerSecond = (): number => {
  if (clockTicks === null) {
    try {
      clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      clockTicks = 100;
    }
  }
  return clockTicks;
};

/** utime + stime of a /proc stat line; after the parenthesised command name, state is field 3, utime 14. */
const threadStatCpuTicks = (stat: string): number => {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
};

export const readProcMemory = (pid: number): ProcMemory | null => {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const rss = /^VmRSS:\s+(\d+) kB/m.exec(status);
    const hwm = /^VmHWM:\s+(\d+) kB/m.exec(status);
    if (!rss) return null;
    return { rssKiB: Number(rss[1]), peakRssKiB: hwm ? Number(hwm[1]) : Number.NaN };
  } catch {
    return null;
  }
};

export const readProcCpuMs = (pid: number): number | null => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const ticks = threadStatCpuTicks(stat);
    return Number.isFinite(ticks) ? (ticks * 1000) / ticksPerSecond() : null;
  } catch {
    return null;
  }
};

/** The DynamoDB Local JVM a stack process started (its child running DynamoDBLocal.jar), or null (not Linux). */
export const findStoreJvm = (stackPid: number): number | null => {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return null;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (parent !== stackPid) continue;
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes('DynamoDBLocal.jar')) return Number(entry);
    } catch {
      // The process ended while we looked.
    }
  }
  return null;
};

/**
 * Waits until process `pid` is quiet — at most `idleMs` of CPU in each of two consecutive `windowMs` windows —
 * or `maxMs` has passed; resolves to the time waited. DynamoDB Local's JVM keeps working for a second or so after
 * metered load stops (the JIT compiling what the load made hot), on the CPU the other targets also use.
 */
export const whenQuiet = async (
  pid: number,
  { windowMs = 100, idleMs = 10, maxMs = 5_000 } = {},
): Promise<number> => {
  const started = performance.now();
  let quietWindows = 0;
  let before = readProcCpuMs(pid);
  while (before !== null && quietWindows < 2 && performance.now() - started < maxMs) {
    await new Promise((resolve) => setTimeout(resolve, windowMs));
    const after = readProcCpuMs(pid);
    if (after === null) break;
    quietWindows = after - before <= idleMs ? quietWindows + 1 : 0;
    before = after;
  }
  return performance.now() - started;
};

/**
 * CPU time by thread group. Node names the main thread `MainThread` and every worker thread `WorkerThread`;
 * workers are listed in the order they were started (by thread id). `V8Worker` threads run GC and compiler
 * jobs of all isolates; `libuv-worker` threads run the libuv thread pool (fs, dns, crypto).
 */
export interface ThreadCpu {
  readonly main: number;
  readonly workers: readonly number[];
  readonly v8Helpers: number;
  readonly libuv: number;
  readonly other: number;
}

export const readThreadCpuMs = (pid: number): ThreadCpu | null => {
  try {
    const tids = readdirSync(`/proc/${pid}/task`)
      .map(Number)
      .sort((a, b) => a - b);
    const toMs = 1000 / ticksPerSecond();
    let main = 0;
    let v8Helpers = 0;
    let libuv = 0;
    let other = 0;
    const workers: number[] = [];
    for (const tid of tids) {
      let comm: string;
      let ms: number;
      try {
        comm = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
        ms = threadStatCpuTicks(readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8')) * toMs;
      } catch {
        continue; // the thread ended meanwhile
      }
      if (comm === 'MainThread') main += ms;
      else if (comm === 'WorkerThread') workers.push(ms);
      else if (comm === 'V8Worker') v8Helpers += ms;
      else if (comm === 'libuv-worker') libuv += ms;
      else other += ms;
    }
    return { main, workers, v8Helpers, libuv, other };
  } catch {
    return null;
  }
};

export const startGatewayProcess = async (options: GatewayProcessOptions): Promise<GatewayProcess> => {
  const inherited: Record<string, string> = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (value !== undefined && !name.startsWith(GATEWAY_ENV_PREFIX)) inherited[name] = value;
  }
  const started = performance.now();
  const child: ChildProcess = spawn(process.execPath, ['--max-semi-space-size=32', 'bin/local.ts'], {
    cwd: options.cwd,
    env: { ...inherited, PORT: '0', DEMO_API_KEY: options.apiKey, LOG_LEVEL: 'silent', ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });

  // Output is always drained (a full pipe would block the child); only a tail is kept.
  const tail: string[] = [];
  const partial = { stdout: '', stderr: '' };
  const found: { gateway: string | null; simulator: string | null } = { gateway: null, simulator: null };
  let onLine: (() => void) | null = null;
  const consume = (stream: 'stdout' | 'stderr') => (chunk: Buffer) => {
    const lines = (partial[stream] + chunk.toString('utf8')).split('\n');
    partial[stream] = lines.pop() ?? '';
    for (const line of lines) {
      tail.push(line);
      if (tail.length > TAIL_LINES) tail.shift();
      found.gateway ??= GATEWAY_LINE.exec(line)?.[1] ?? null;
      found.simulator ??= UPSTREAM_LINE.exec(line)?.[1] ?? null;
    }
    onLine?.();
  };
  child.stdout?.on('data', consume('stdout'));
  child.stderr?.on('data', consume('stderr'));
  const outputTail = () => tail.join('\n');

  let stopping: Promise<void> | null = null;
  const running = () => child.exitCode === null && child.signalCode === null;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      if (!running()) return;
      child.kill('SIGTERM');
      const timeout = (ms: number) =>
        new Promise<'timeout'>((resolve) => setTimeout(resolve, ms, 'timeout').unref());
      if ((await Promise.race([exited.then(() => 'exited' as const), timeout(15_000)])) === 'timeout') {
        child.kill('SIGKILL');
        await Promise.race([exited, timeout(5_000)]);
      }
    })();
    return stopping;
  };

  const startTimeoutMs = options.startTimeoutMs ?? 90_000;
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`the stack did not report its URLs within ${startTimeoutMs} ms`)),
        startTimeoutMs,
      );
      const settle = (error?: Error) => {
        clearTimeout(timer);
        onLine = null;
        child.off('exit', onExit);
        child.off('error', onError);
        if (error) reject(error);
        else resolve();
      };
      const onExit = (code: number | null, signal: string | null) =>
        settle(new Error(`the stack exited during start-up (code ${code}, signal ${signal})`));
      const onError = (error: Error) => settle(error);
      onLine = () => {
        if (found.gateway !== null && found.simulator !== null) settle();
      };
      child.once('exit', onExit);
      child.once('error', onError);
    });
  } catch (error) {
    await stop();
    const message = error instanceof Error ? error.message : String(error);
    throw new Error(`${message}\n--- output of node bin/local.ts ---\n${outputTail()}`);
  }

  const { gateway, simulator } = found;
  const pid = child.pid;
  if (gateway === null || simulator === null || pid === undefined) {
    await stop();
    throw new Error('the stack started without reporting its URLs');
  }
  return {
    pid,
    gatewayUrl: gateway,
    simulatorUrl: simulator,
    startMs: performance.now() - started,
    memory: () => readProcMemory(pid),
    cpuMs: () => readProcCpuMs(pid),
    threadCpuMs: () => readThreadCpuMs(pid),
    outputTail,
    running,
    stop,
  };
};
