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

let child: ChildProcess;
let output = '';
let dir: string;
const env = () => childEnv({ LOCAL_STACK_FILE: join(dir, 'stack.json') });

const waitFor = (pattern: RegExp, timeoutMs = 60_000): Promise<RegExpMatchArray> =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`timed out waiting for ${pattern}:\n${output}`)),
      timeoutMs,
    );
    const check = () => {
      const match = output.match(pattern);
      if (match) {
        clearTimeout(timer);
        child.stdout?.off('data', check);
        resolve(match);
      }
    };
    child.stdout?.on('data', check);
    check();
  });

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
  child.stdout?.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
});
afterAll(() => {
  if (child.exitCode === null) child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

describe('npm start', () => {
  let gateway: string;
  let dynamoPort: number;

  it('serves the gateway on its embedded defaults and prints how to use it', async () => {
    gateway = (await waitFor(/gateway listening on (http:\/\/127\.0\.0\.1:\d+)\/v1/))[1] as string;
    dynamoPort = Number(
      (output.match(/DynamoDB Local listening on http:\/\/127\.0\.0\.1:(\d+)/) as RegExpMatchArray)[1],
    );
    expect(output).toContain('upstream: simulator at http://127.0.0.1:');
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
    expect(output).not.toContain('Unhandled');
    const res = await fetch(`${gateway}/v1/models`, { headers: { authorization: `Bearer ${DEMO_API_KEY}` } });
    expect(res.status).toBe(200);
  });

  it('stops cleanly on SIGTERM, leaving no JVM behind', async () => {
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
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
    let log = '';
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no DynamoDB Local port in:\n${log}`)), 60_000);
      starting.stdout?.on('data', (chunk: Buffer) => {
        log += chunk.toString();
        const match = log.match(/DynamoDB Local listening on http:\/\/127\.0\.0\.1:(\d+)/);
        if (match) {
          clearTimeout(timer);
          resolve(Number(match[1]));
        }
      });
    });
    // The JVM is up; tables, seed data and the gateway are not yet.
    expect(log).not.toContain('gateway listening');
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
        { cwd: ROOT, env: { ...env(), PORT: '0', ...extra }, timeout: 60_000 },
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
