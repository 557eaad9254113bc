import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { storesServing } from '#local/emulators.ts';
import { childEnv } from '#test/child-env.ts';

/**
 * `npm start` with DATA_DIR keeps the wallet across restarts, but its settlement queue lives in memory: a stop
 * that ended the process with records still queued (or requests still running) served calls that were never
 * charged, and the sweeper later released their holds. These tests stop the stack the way a person does — a
 * Ctrl-C reaches the whole process group, and npm forwards a second copy — while paid calls are under way,
 * then restart it on the same DATA_DIR and read the wallet.
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DEMO_API_KEY = 'svc_live_shutdownDrainTestKey0000000000001';
const CALLS = 12;

let dir: string;
/** Each scenario has its own DATA_DIR and stack file, kept across its restart. */
const env = (scenario: string, extra: Readonly<Record<string, string>> = {}) =>
  childEnv({
    LOCAL_STACK_FILE: join(dir, scenario, 'stack.json'),
    DATA_DIR: join(dir, scenario, 'data'),
    PORT: '0',
    DEMO_API_KEY,
    ...extra,
  });

interface Started {
  readonly child: ChildProcess;
  readonly url: string;
  output(): string;
  readonly exited: Promise<number | null>;
}

/** Every stack a test started, so that a failed test leaves none running. */
const started: ChildProcess[] = [];

/** Starts `bin/local.ts` in a process group of its own, as a terminal runs a foreground job. */
const start = async (scenario: string, extra: Readonly<Record<string, string>> = {}): Promise<Started> => {
  const child = spawn(process.execPath, ['bin/local.ts'], {
    cwd: ROOT,
    env: env(scenario, extra),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  started.push(child);
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`not listening within 90 s:\n${output}`)), 90_000);
    const check = () => {
      const match = /gateway listening on (http:\/\/127\.0\.0\.1:\d+)\/v1/.exec(output);
      if (match) {
        clearTimeout(timer);
        resolve(match[1] as string);
      } else if (child.exitCode !== null) {
        clearTimeout(timer);
        reject(new Error(`exited during start-up:\n${output}`));
      }
    };
    child.stdout?.on('data', check);
    child.once('exit', check);
  });
  return { child, url, output: () => output, exited };
};

interface WalletReport {
  readonly holds: readonly { readonly requestId: string }[];
  readonly ledger: readonly {
    readonly kind: string;
    readonly reference: string;
    readonly amountUsd: string;
  }[];
}

const wallet = async (scenario: string): Promise<WalletReport> => {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['bin/admin.ts', 'wallet', 'show', 'acct_demo'],
    {
      cwd: ROOT,
      env: env(scenario),
    },
  );
  return JSON.parse(stdout) as WalletReport;
};

interface Call {
  readonly status: number;
  readonly requestId: string;
  readonly body: string;
  readonly stream: boolean;
  /** The connection ended before the whole body arrived. */
  readonly cut: boolean;
}

/**
 * A paid call that takes a while upstream (`directive` sets how); resolves once its body has ended. `onResponse`
 * runs when its response has begun (a stream's headers and first event are out).
 */
const paidCall = async (
  url: string,
  directive: string,
  stream: boolean,
  maxTokens = 20,
  onResponse: () => void = () => {},
): Promise<Call> => {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${DEMO_API_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'famA-v4.1-flash',
      max_tokens: maxTokens,
      stream,
      messages: [{ role: 'user', content: `${directive} hello` }],
    }),
  });
  const requestId = res.headers.get('x-request-id') ?? '';
  onResponse();
  let body = '';
  try {
    body = await res.text();
  } catch {
    return { status: res.status, requestId, body, stream, cut: true };
  }
  return { status: res.status, requestId, body, stream, cut: false };
};

/**
 * A paid stream of 100 tokens at 0.5 s each, far beyond any grace period here, and when its response has begun:
 * admitted is not yet under way, and on a busy machine a signal in between finds no response to cut. The token
 * count is a directive: the cap alone leaves the simulator its natural length, which for this prompt is 12 words
 * (6 s, as long as the grace period, so a late signal let the stream finish uncut).
 */
const longStream = (url: string): { call: Promise<Call>; begun: Promise<void> } => {
  const begun = Promise.withResolvers<void>();
  return {
    call: paidCall(url, '[[sim: chunk_delay_ms=500 completion_tokens=100]]', true, 100, begun.resolve),
    begun: begun.promise,
  };
};

/** Waits until the wallet holds `count` open holds: every call admitted. */
const admitted = async (scenario: string, count: number) => {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const { holds } = await wallet(scenario);
    if (holds.length >= count) return;
    if (Date.now() > deadline)
      throw new Error(`only ${holds.length} of ${count} calls were admitted in 30 s`);
  }
};

const expectComplete = (call: Call) => {
  expect(call.status).toBe(200);
  expect(call.cut).toBe(false);
  if (call.stream) expect(call.body.trimEnd().endsWith('data: [DONE]')).toBe(true);
  else expect(JSON.parse(call.body).choices[0].message.content).toEqual(expect.any(String));
};

/** Restarts the scenario's stack on its DATA_DIR and reads the wallet: one debit per call, no hold left. */
const expectChargedOnceEach = async (scenario: string, calls: readonly Call[]) => {
  const again = await start(scenario);
  try {
    const report = await wallet(scenario);
    expect(report.holds).toEqual([]);
    const debits = report.ledger.filter((entry) => entry.kind === 'debit');
    expect(debits).toHaveLength(calls.length);
    for (const call of calls) {
      expect(call.requestId).toMatch(/^req_/);
      const charged = debits.filter((entry) => entry.reference.includes(call.requestId));
      expect(charged).toHaveLength(1);
      expect(Number(charged[0]?.amountUsd)).toBeGreaterThan(0);
    }
  } finally {
    again.child.kill('SIGTERM');
    expect(await again.exited).toBe(0);
  }
};

/** Signals the stack and waits for the calls and for its exit (afterAll stops whatever a failure left running). */
const stopDuring = async (stack: Started, pending: readonly Promise<Call>[], signal: () => void) => {
  signal();
  const calls = await Promise.all(pending);
  expect(await stack.exited, stack.output()).toBe(0);
  return calls;
};

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'svc-shutdown-'));
});
afterAll(async () => {
  // SIGTERM, not SIGKILL: the stack stops its JVM (in a process group of its own) on its way out.
  const running = started.filter((child) => child.exitCode === null && child.signalCode === null);
  await Promise.all(
    running.map(
      (child) =>
        new Promise((resolve) => {
          child.once('exit', resolve);
          child.kill('SIGTERM');
        }),
    ),
  );
  rmSync(dir, { recursive: true, force: true });
});

describe.each([1, 2])(
  'npm start (GATEWAY_INSTANCES=%i) stopped while paid calls are under way',
  (instances) => {
    const scenario = `instances-${instances}`;
    let calls: Call[];

    it('finishes every call it had started, on a Ctrl-C that also reached npm, then exits 0', async () => {
      const stack = await start(scenario, { GATEWAY_INSTANCES: String(instances) });
      // Streams start at once and trickle for ~5 s; the others answer after 5 s: long enough for all of them to
      // be admitted and under way at the signal, on a loaded machine too.
      const pending = Array.from({ length: CALLS }, (_, i) =>
        i % 2 === 1
          ? paidCall(stack.url, '[[sim: chunk_delay_ms=250]]', true)
          : paidCall(stack.url, '[[sim: latency_ms=5000]]', false),
      );
      await admitted(scenario, CALLS);
      const pid = stack.child.pid as number;
      calls = await stopDuring(stack, pending, () => {
        process.kill(-pid, 'SIGINT'); // the terminal: the whole foreground group
        process.kill(pid, 'SIGINT'); // npm's forwarded copy of the same Ctrl-C
      });
      for (const call of calls) expectComplete(call);
      expect(stack.output()).toContain('SIGINT: finishing requests under way');
      expect(stack.output()).not.toMatch(/ cut|lost with it|stopping now/);
    }, 120_000);

    it('charged each of them once: after a restart on the same DATA_DIR, one debit per call, no hold left', async () => {
      await expectChargedOnceEach(scenario, calls);
    }, 120_000);
  },
);

describe('npm start stopped with a call outlasting SHUTDOWN_GRACE_MS', () => {
  const scenario = 'cut';
  let calls: Call[];

  it('cuts that call after the grace period and still finishes the short one', async () => {
    const stack = await start(scenario, { SHUTDOWN_GRACE_MS: '6000' });
    const long = longStream(stack.url);
    const pending = [
      // Under way at the signal (it answers after 4 s), and done within the grace period.
      paidCall(stack.url, '[[sim: latency_ms=4000]]', false),
      long.call,
    ];
    await admitted(scenario, 2);
    await long.begun;
    calls = await stopDuring(stack, pending, () => stack.child.kill('SIGTERM'));
    expectComplete(calls[0] as Call);
    expect(calls[1]).toMatchObject({ status: 200, cut: true });
    expect(stack.output()).toContain(
      '1 request still running after 6000 ms was cut and settled as client_aborted',
    );
    expect(stack.output()).not.toMatch(/lost with it/);
  }, 120_000);

  it('charged both once, the cut one as the client_aborted call it became', async () => {
    await expectChargedOnceEach(scenario, calls);
  }, 120_000);
});

describe('npm start stopped with SHUTDOWN_GRACE_MS=0', () => {
  const scenario = 'no-grace';
  let calls: Call[];

  it('cuts the call under way at once, and still has it settled rather than dropped unrecorded', async () => {
    const stack = await start(scenario, { SHUTDOWN_GRACE_MS: '0' });
    const long = longStream(stack.url);
    const pending = [long.call];
    await admitted(scenario, 1);
    await long.begun;
    calls = await stopDuring(stack, pending, () => stack.child.kill('SIGTERM'));
    expect(calls[0]).toMatchObject({ status: 200, cut: true });
    expect(stack.output()).toContain(
      '1 request still running after 0 ms was cut and settled as client_aborted',
    );
    expect(stack.output()).not.toMatch(/lost with it/);
  }, 120_000);

  it('charged it once, as the client_aborted call it became', async () => {
    await expectChargedOnceEach(scenario, calls);
  }, 120_000);
});

describe('npm start killed with SIGKILL (no exit hook runs)', () => {
  const scenario = 'killed';

  it('takes its JVM with it (the pipe to its stdin closes), and the next npm start serves the DATA_DIR whole', async () => {
    const dbPath = join(dir, scenario, 'data', 'dynamodb');
    const first = await start(scenario);
    const [jvm] = storesServing(dbPath);
    expect(jvm).toBeGreaterThan(0);
    process.kill(first.child.pid as number, 'SIGKILL');
    await first.exited;
    // The JVM runs in a process group of its own and is stopped from the exit hook, which SIGKILL skips: it goes
    // because its standard input, a pipe from the host, has closed.
    const gone = Date.now() + 15_000;
    while (storesServing(dbPath).length > 0 && Date.now() < gone)
      await new Promise((resolve) => setTimeout(resolve, 100));
    expect(storesServing(dbPath)).toEqual([]);

    const second = await start(scenario);
    try {
      expect(second.output()).not.toContain('stopping DynamoDB Local left running on this DATA_DIR');
      expect(storesServing(dbPath)).toHaveLength(1);
      // The store it serves is the DATA_DIR's, whole: the demo wallet is still there.
      expect((await wallet(scenario)).ledger.filter((e) => e.kind === 'credit')).toHaveLength(1);
    } finally {
      second.child.kill('SIGTERM');
      expect(await second.exited).toBe(0);
    }
    expect(storesServing(dbPath)).toEqual([]);
  }, 120_000);
});

describe('npm start whose DynamoDB Local is killed under it', () => {
  const scenario = 'store-killed';

  it('stops, saying which part died, instead of answering every call with a 503', async () => {
    const dbPath = join(dir, scenario, 'data', 'dynamodb');
    const stack = await start(scenario);
    const [jvm] = storesServing(dbPath);
    expect(jvm).toBeGreaterThan(0);
    // The OOM killer's way: no warning, no exit hook.
    process.kill(jvm as number, 'SIGKILL');
    expect(await stack.exited).toBe(1);
    expect(stack.output()).toContain('npm start: DynamoDB Local exited (SIGKILL); stopping');
  }, 120_000);
});
