import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { type AddressInfo, connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseCpuList, storeCpuList } from '#local/emulators.ts';
import { childEnv } from '#test/child-env.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DEMO_API_KEY = 'svc_live_npmStartTestKey000000000000000001';

/** Collects a child's output, and waits for a line of it. */
const watch = (started: ChildProcess) => {
  let log = '';
  const collect = (chunk: Buffer) => {
    log += chunk.toString();
  };
  started.stdout?.on('data', collect);
  started.stderr?.on('data', collect);
  const seen = (pattern: RegExp, timeoutMs = 60_000): Promise<RegExpMatchArray> =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`timed out waiting for ${pattern}:\n${log}`)),
        timeoutMs,
      );
      const check = () => {
        const match = log.match(pattern);
        if (!match) return;
        clearTimeout(timer);
        started.stdout?.off('data', check);
        resolve(match);
      };
      started.stdout?.on('data', check);
      check();
    });
  return { seen, log: () => log };
};

let child: ChildProcess;
let watched: ReturnType<typeof watch>;
let dir: string;
const env = () => childEnv({ LOCAL_STACK_FILE: join(dir, 'stack.json') });

const waitFor = (pattern: RegExp, timeoutMs?: number) => watched.seen(pattern, timeoutMs);

const portOpen = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'svc-npm-start-'));
  child = spawn(process.execPath, ['bin/local.ts'], {
    cwd: ROOT,
    env: { ...env(), PORT: '0', DEMO_API_KEY },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  watched = watch(child);
});
afterAll(async () => {
  // SIGTERM first: a SIGKILLed stack leaves its JVM running (its own process group), as a filtered run that skips
  // the SIGTERM test below would.
  if (child.exitCode === null) {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 30_000))]);
    if (child.exitCode === null) child.kill('SIGKILL');
  }
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

describe('npm start', () => {
  let gateway: string;
  let dynamoPort: number;

  it('serves the gateway on its embedded defaults and prints how to use it', async () => {
    gateway = (await waitFor(/gateway listening on (http:\/\/127\.0\.0\.1:\d+)\/v1/))[1] as string;
    dynamoPort = Number(
      (watched.log().match(/DynamoDB Local listening on http:\/\/127\.0\.0\.1:(\d+)/) as RegExpMatchArray)[1],
    );
    expect(watched.log()).toContain('upstream: simulator at http://127.0.0.1:');
    const res = await fetch(`${gateway}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${DEMO_API_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'famA-v4.1-flash', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(200);
    expect(await portOpen(dynamoPort)).toBe(true);
  });

  it('confines DynamoDB Local to the upper half of the CPUs (Linux with taskset)', async (ctx) => {
    if (process.platform !== 'linux' || !existsSync('/usr/bin/taskset')) ctx.skip();
    const cpusOf = (statusFile: string) =>
      parseCpuList(/^Cpus_allowed_list:\s*(.+)$/m.exec(readFileSync(statusFile, 'utf8'))?.[1] ?? '');
    const expected = storeCpuList(cpusOf('/proc/self/status'));
    if (!expected) ctx.skip();
    const { stdout } = await promisify(execFile)('ps', ['-eo', 'pid,args']);
    const jvm = stdout.split('\n').find((line) => line.includes(`-port ${dynamoPort}`));
    const pid = Number(jvm?.trim().split(/\s+/)[0]);
    // Every thread, including those the JVM started after launch.
    const tasks = readdirSync(`/proc/${pid}/task`);
    expect(tasks.length).toBeGreaterThan(5);
    for (const task of tasks) expect(cpusOf(`/proc/${pid}/task/${task}/status`).join(',')).toBe(expected);
  });

  it('runs DynamoDB Local with its telemetry off (nothing phones home from a developer machine)', async () => {
    const { stdout } = await promisify(execFile)('ps', ['-eo', 'args']);
    const jvm = stdout.split('\n').find((line) => line.includes(`-port ${dynamoPort}`));
    expect(jvm).toContain('DynamoDBLocal.jar');
    expect(jvm?.split(/\s+/)).toContain('-disableTelemetry');
  });

  it('lets the admin CLI manage that stack’s keys', async () => {
    const admin = (...args: string[]) =>
      promisify(execFile)(process.execPath, ['bin/admin.ts', ...args], { cwd: ROOT, env: env() });
    const { stdout } = await admin('keys', 'list', 'acct_demo');
    const keys = JSON.parse(stdout) as { prefix: string; revokedAt: string | null }[];
    expect(keys).toEqual([expect.objectContaining({ prefix: DEMO_API_KEY.slice(0, 17), revokedAt: null })]);
    expect(stdout).not.toContain(DEMO_API_KEY);
  });

  it('survives clients that hang up before their response starts', async () => {
    const { port } = new URL(gateway);
    /** Sends a whole request, then closes the connection before anything can have come back. */
    const hangUp = (authorization: string, content: string, stream = false) =>
      new Promise<void>((resolve, reject) => {
        const body = JSON.stringify({
          model: 'famA-v4.1-flash',
          messages: [{ role: 'user', content }],
          stream,
        });
        const socket = connect(Number(port), '127.0.0.1', () => {
          socket.end(
            `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
              `Authorization: ${authorization}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
          );
          socket.destroy();
          resolve();
        });
        socket.once('error', reject);
      });
    // While the key is looked up (an unknown key is never cached), and while the upstream's first byte is awaited.
    for (let i = 0; i < 3; i++) await hangUp('Bearer svc_live_doesNotExist000000000000009', 'hi');
    await hangUp(`Bearer ${DEMO_API_KEY}`, '[[sim: first_byte_delay_ms=300]] hi', true);
    await hangUp(`Bearer ${DEMO_API_KEY}`, '[[sim: latency_ms=300]] hi');
    await new Promise((resolve) => setTimeout(resolve, 800));
    expect(child.exitCode).toBeNull();
    expect(watched.log()).not.toContain('Unhandled');
    const res = await fetch(`${gateway}/v1/models`, { headers: { authorization: `Bearer ${DEMO_API_KEY}` } });
    expect(res.status).toBe(200);
  });

  it('stops cleanly on SIGTERM, leaving no JVM behind', async () => {
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    // It says when it is done, so a person at the terminal knows the wait is over.
    expect(watched.log()).toMatch(/SIGTERM: finishing requests under way[^\n]*\n(?:[^\n]*\n)*stopped\n/);
    expect(await portOpen(dynamoPort)).toBe(false);
    const { stdout } = await promisify(execFile)('ps', ['-eo', 'args']);
    expect(stdout).not.toContain(`-port ${dynamoPort}`);
    expect(existsSync(join(dir, 'stack.json'))).toBe(false);
  });

  it.each([
    ['1e3', 'an exponent is not an amount a person types'],
    ['0.5', 'under the 1 USD minimum top-up'],
    ['5000000.000000001', 'past the wallet ceiling by one nano-dollar'],
    ['12.3456789012', 'finer than a nano-dollar'],
  ])('refuses DEMO_BALANCE_USD=%s before starting anything (%s)', async (amount) => {
    const { code, stderr } = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        ['bin/local.ts'],
        { cwd: ROOT, env: { ...env(), PORT: '0', DEMO_BALANCE_USD: amount }, timeout: 30_000 },
        (error, _stdout, stderr) => resolve({ code: error ? (error.code as number | null) : 0, stderr }),
      );
    });
    expect(code).toBe(1);
    expect(stderr).toContain(`DEMO_BALANCE_USD must be`);
    expect(stderr).toContain(`got "${amount}"`);
    expect(stderr).not.toContain('DynamoDB Local listening');
  });

  it('leaves no JVM behind when interrupted while still starting', async () => {
    const starting = spawn(process.execPath, ['bin/local.ts'], {
      cwd: ROOT,
      env: { ...env(), LOCAL_STACK_FILE: join(dir, 'starting.json'), PORT: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const { seen, log } = watch(starting);
    const port = Number((await seen(/DynamoDB Local listening on http:\/\/127\.0\.0\.1:(\d+)/))[1]);
    // The JVM is up; tables, seed data and the gateway are not yet.
    expect(log()).not.toContain('gateway listening');
    const exited = new Promise<number | null>((resolve) => starting.once('exit', (code) => resolve(code)));
    starting.kill('SIGINT');
    expect(await exited).toBe(130);
    // The JVM gets SIGTERM from the exiting process; give it a moment to go.
    for (let i = 0; i < 50 && (await portOpen(port)); i++) await new Promise((r) => setTimeout(r, 100));
    expect(await portOpen(port)).toBe(false);
    const { stdout } = await promisify(execFile)('ps', ['-eo', 'args']);
    expect(stdout).not.toContain(`-port ${port}`);
  });
});

describe('npm start with a configuration that cannot work', () => {
  const refused = (extra: Record<string, string>) =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        ['bin/local.ts'],
        // Below the test's own timeout: an npm start that does not refuse is stopped by this, not left running
        // orphaned when the test gives up on it.
        { cwd: ROOT, env: { ...env(), PORT: '0', ...extra }, timeout: 20_000 },
        (error, stdout, stderr) =>
          resolve({ code: error ? (error.code as number | null) : 0, stdout, stderr }),
      );
    });

  it.each(['http://exa mple/v1', 'http://', 'ftp://example.com/v1'])(
    'refuses UPSTREAM_BASE_URL=%s before starting anything (every call would fail)',
    async (url) => {
      const { code, stderr } = await refused({ UPSTREAM_BASE_URL: url });
      expect(code).toBe(1);
      expect(stderr).toContain('UPSTREAM_BASE_URL must be an http(s) URL');
    },
  );

  it.each([
    'http://user:s3cr3t-pw@127.0.0.1:9/v1',
    'http://127.0.0.1:9/v1?key=s3cr3t-pw',
    'http://s3cr3t-pw@exa mple/v1',
    'http://s3cr3t\npw@exa mple/v1',
    // A bare `?` or `#` parses to nothing, and would still cut every path appended to the URL.
    'http://127.0.0.1:9/v1?',
    'http://127.0.0.1:9/v1#',
  ])(
    'refuses UPSTREAM_BASE_URL=%j without printing its credentials or query, pointing at UPSTREAM_API_KEY',
    async (url) => {
      const { code, stdout, stderr } = await refused({ UPSTREAM_BASE_URL: url });
      expect(code).toBe(1);
      expect(stderr).toMatch(
        /UPSTREAM_BASE_URL must (not carry credentials, a query or a fragment: give the key in UPSTREAM_API_KEY|be an http\(s\) URL)/,
      );
      expect(stdout + stderr).not.toMatch(/s3cr3t|pw@/);
    },
  );

  it('refuses what the registry would refuse of the deployments it would seed, before serving 503s', async () => {
    // A key over plain http to another machine: the stored deployments would be skipped, every call a 503.
    const lan = await refused({ UPSTREAM_BASE_URL: 'http://10.0.0.5:9/v1', UPSTREAM_API_KEY: 'sk-lan-key' });
    expect(lan.code).toBe(1);
    expect(lan.stderr).toContain(
      'UPSTREAM_BASE_URL, UPSTREAM_API_KEY and UPSTREAM_MODEL cannot serve: baseUrl: a deployment with keys is called over https',
    );
    expect(lan.stderr).not.toContain('sk-lan-key');
    const model = await refused({ UPSTREAM_BASE_URL: 'http://127.0.0.1:9/v1', UPSTREAM_MODEL: 'llama\t3' });
    expect(model.code).toBe(1);
    expect(model.stderr).toContain('upstreamModel: no control characters');
  });

  it.each([
    ['LOG_LEVEL', 'verbose', 'LOG_LEVEL must be one of debug, info, warn, error, silent'],
    ['MAX_JSON_BODY_BYTES', '99999999', 'MAX_JSON_BODY_BYTES must be an integer from 1024 to 4194304'],
  ])('refuses %s=%s as the functions would, before starting anything', async (name, value, said) => {
    const { code, stdout, stderr } = await refused({ [name]: value });
    expect(code).toBe(1);
    expect(stderr).toContain(`npm start: Environment variable ${said}`);
    expect(stdout).not.toContain('DynamoDB Local listening');
  });

  it('refuses a HOLD_TTL_MS shorter than the longest call and its settlement, as the stacks do', async () => {
    // The sweeper would release a running call's hold: its cost would land as debt, not against what it held.
    const { code, stderr } = await refused({ HOLD_TTL_MS: '600000' });
    expect(code).toBe(1);
    expect(stderr).toContain(
      'HOLD_TTL_MS must be at least 1800000 (the longest HTTP function timeout, 900 s',
    );
  });

  it('refuses a port another process listens on before starting anything, saying how to pick another, also when its instances would share it (SO_REUSEPORT)', async () => {
    const taken = createServer();
    await new Promise<void>((resolve) =>
      taken.listen({ port: 0, host: '127.0.0.1', reusePort: true }, resolve),
    );
    const { port } = taken.address() as AddressInfo;
    try {
      for (const instances of ['1', '2']) {
        const { code, stdout, stderr } = await refused({ PORT: String(port), GATEWAY_INSTANCES: instances });
        expect(code).not.toBe(0);
        expect(stderr).toContain(`port ${port} on 127.0.0.1 is in use`);
        expect(stderr).toContain('set PORT');
        // Refused before anything started: the simulator (started after the emulators) never said it listens.
        expect(stdout).not.toContain('upstream simulator listening');
      }
    } finally {
      await new Promise((resolve) => taken.close(resolve));
    }
  }, 90_000);
});

describe('npm start run by npm, as a service manager runs it', () => {
  /** `npm start` itself (npm, a shell, then node), not node alone: what `timeout`, systemd or CI signal. */
  const npmStart = (file: string) => {
    const cli = process.env.npm_execpath;
    const [command, args] =
      cli?.endsWith('.js') === true ? [process.execPath, [cli, 'start']] : ['npm', ['start']];
    const started = spawn(command, args as string[], {
      cwd: ROOT,
      env: { ...env(), LOCAL_STACK_FILE: file, PORT: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const { seen, log } = watch(started);
    return { child: started, seen: (pattern: RegExp) => seen(pattern, 90_000), log };
  };

  it('stops the gateway and its JVM on a SIGTERM sent to npm alone, and leaves another stack its stack file', async () => {
    const file = join(dir, 'service.json');
    // The node processes, by the pids their stack files name: a failure here must not leave them (and their JVMs)
    // running, as npm alone cannot stop them when the signal does not reach them.
    const stacks: number[] = [];
    const stackPid = () => (JSON.parse(readFileSync(file, 'utf8')) as { pid: number }).pid;
    try {
      await service(file, stacks, stackPid);
    } finally {
      for (const pid of stacks) {
        try {
          process.kill(pid, 'SIGTERM');
        } catch {
          // Gone already.
        }
      }
    }
  }, 240_000);

  const service = async (file: string, stacks: number[], stackPid: () => number) => {
    const first = npmStart(file);
    const dynamo = Number((await first.seen(/DynamoDB Local listening on http:\/\/127\.0\.0\.1:(\d+)/))[1]);
    const url = (await first.seen(/gateway listening on (http:\/\/127\.0\.0\.1:\d+)\/v1/))[1] as string;
    stacks.push(stackPid());
    // A second stack in the same checkout takes the stack file over, and says so.
    const second = npmStart(file);
    await second.seen(/gateway listening on/);
    stacks.push(stackPid());
    await second.seen(new RegExp(`no longer the one still running at ${url.replace(/[.]/g, '\\.')}`));
    const secondUrl = (JSON.parse(readFileSync(file, 'utf8')) as { url: string }).url;
    expect(secondUrl).not.toBe(url);

    // npm's pid only, not its process group: npm passes the signal on, and the shell it ran must not swallow it.
    const exited = new Promise<number | null>((resolve) => first.child.once('exit', (code) => resolve(code)));
    first.child.kill('SIGTERM');
    expect(await exited).toBe(0);
    for (let i = 0; i < 50 && (await portOpen(dynamo)); i++) await new Promise((r) => setTimeout(r, 100));
    expect(await portOpen(dynamo)).toBe(false);
    expect(await portOpen(Number(new URL(url).port))).toBe(false);
    const { stdout } = await promisify(execFile)('ps', ['-eo', 'args']);
    expect(stdout).not.toContain(`-port ${dynamo}`);
    expect(first.log()).toContain('SIGTERM: finishing requests under way');
    // The stack that stopped left the file of the one still running.
    expect((JSON.parse(readFileSync(file, 'utf8')) as { url: string }).url).toBe(secondUrl);

    const secondExited = new Promise<number | null>((resolve) =>
      second.child.once('exit', (code) => resolve(code)),
    );
    second.child.kill('SIGTERM');
    expect(await secondExited).toBe(0);
    expect(existsSync(file)).toBe(false);
  };
});
