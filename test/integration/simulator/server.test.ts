import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { Agent, createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';
import { CallLog, type SimCall } from '#sim/calls.ts';
import { startSimulator } from '#sim/server.ts';
import { isSocketError, postChat, settle, userChat } from './client.ts';
import { useSimulator } from './use-simulator.ts';

const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

const sim = useSimulator();

interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  localPort: number | undefined;
}

/** A node:http request, so connection reuse can be observed directly. */
function rawPost(url: string, body: string, agent: Agent): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: 'POST',
        agent,
        headers: { authorization: 'Bearer sk-raw', 'content-type': 'application/json' },
      },
      (res) => {
        const localPort = res.socket.localPort;
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          text += chunk;
        });
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text, localPort }),
        );
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('routing', () => {
  test('serves chat completions at /v1 as provider default and at /p/<provider>/v1 as that provider', async () => {
    await postChat(sim().url, userChat('a'), { key: 'sk-1' });
    await postChat(sim().url, userChat('b', { stream: true }), { provider: 'sim-a.v2_x', key: 'sk-2' });
    const calls = sim().calls();
    expect(calls).toEqual([
      {
        provider: 'default',
        path: '/v1/chat/completions',
        model: 'gpt-4o-mini',
        key: 'sk-1',
        stream: false,
        fault: null,
        at: expect.any(Number),
        body: userChat('a'),
      },
      {
        provider: 'sim-a.v2_x',
        path: '/v1/chat/completions',
        model: 'gpt-4o-mini',
        key: 'sk-2',
        stream: true,
        fault: null,
        at: expect.any(Number),
        body: userChat('b', { stream: true }),
      },
    ] satisfies SimCall[]);
    expect(sim().calls('sim-a.v2_x')).toHaveLength(1);
  });

  test('answers unknown routes with an OpenAI-shaped 404', async () => {
    for (const [method, path] of [
      ['POST', '/v1/unknown'],
      ['GET', '/v1/chat/completions'],
      ['POST', '/p/bad/provider/v1/chat/completions'],
    ] as const) {
      const response = await fetch(`${sim().url}${path}`, { method });
      expect(response.status).toBe(404);
      expect(await response.json()).toEqual({
        error: {
          message: `Invalid URL (${method} ${path})`,
          type: 'invalid_request_error',
          param: null,
          code: null,
        },
      });
    }
  });

  test('records a call made without a key, with key null', async () => {
    const response = await postChat(sim().url, userChat('hi'), { key: null });
    expect(response.status).toBe(401);
    expect(sim().calls().at(-1)).toMatchObject({ key: null, fault: null, model: 'gpt-4o-mini' });
  });
});

describe('the admin API', () => {
  test('GET /_sim/health reports ok', async () => {
    const response = await fetch(`${sim().url}/_sim/health`);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ ok: true });
  });

  test('GET /_sim/calls lists calls, optionally for one provider, and DELETE forgets them', async () => {
    await postChat(sim().url, userChat('a'), { provider: 'one' });
    await postChat(sim().url, userChat('b'), { provider: 'two' });
    const all = (await (await fetch(`${sim().url}/_sim/calls`)).json()) as { calls: SimCall[] };
    expect(all.calls.map((call) => call.provider)).toEqual(['one', 'two']);
    const two = (await (await fetch(`${sim().url}/_sim/calls?provider=two`)).json()) as { calls: SimCall[] };
    expect(two.calls.map((call) => call.provider)).toEqual(['two']);
    expect((await fetch(`${sim().url}/_sim/calls`, { method: 'DELETE' })).status).toBe(200);
    expect(sim().calls()).toEqual([]);
  });

  test('PUT /_sim/faults rejects a body that is not JSON', async () => {
    const response = await fetch(`${sim().url}/_sim/faults/x`, { method: 'PUT', body: '{oops' });
    expect(response.status).toBe(400);
  });
});

describe('the call log', () => {
  test('keeps only the newest calls, oldest first', () => {
    const log = new CallLog(3);
    for (let i = 0; i < 5; i++) {
      log.record({
        provider: `p${i}`,
        path: '/v1/x',
        model: 'm',
        key: null,
        stream: false,
        fault: null,
        at: i,
        body: null,
      });
    }
    expect(log.list().map((call) => call.provider)).toEqual(['p2', 'p3', 'p4']);
    expect(log.list('p3')).toHaveLength(1);
  });
});

describe('connections', () => {
  test('keeps connections alive so a client pool can reuse them', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const body = JSON.stringify(userChat('reuse'));
      const first = await rawPost(`${sim().url}/v1/chat/completions`, body, agent);
      const second = await rawPost(`${sim().url}/v1/chat/completions`, body, agent);
      expect(first.status).toBe(200);
      expect(first.headers.connection).toBe('keep-alive');
      expect(second.localPort).toBe(first.localPort);
    } finally {
      agent.destroy();
    }
  });

  test('close() resolves promptly despite idle keep-alive connections and requests stuck in latency', async () => {
    const other = await startSimulator();
    const agent = new Agent({ keepAlive: true });
    try {
      await rawPost(`${other.url}/v1/chat/completions`, JSON.stringify(userChat('idle')), agent);
      const stuck = settle(
        postChat(other.url, userChat('slow'), { headers: { 'x-sim-latency-ms': '30000' } }),
      );
      while (other.calls().length < 2) await new Promise((resolve) => setTimeout(resolve, 5));
      const started = performance.now();
      await other.close();
      expect(performance.now() - started).toBeLessThan(1000);
      expect(isSocketError((await stuck).error)).toBe(true);
      await other.close();
    } finally {
      agent.destroy();
    }
  });
});

describe('the CLI', () => {
  async function waitForExit(child: ChildProcess, timeoutMs: number): Promise<number | null> {
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    try {
      if (child.exitCode !== null) return child.exitCode;
      const [code] = (await once(child, 'exit')) as [number | null];
      return code;
    } finally {
      clearTimeout(timer);
    }
  }

  test('prints its URL, serves requests and exits cleanly on SIGTERM', async () => {
    const child = spawn(process.execPath, ['bin/upstream-simulator.ts', '--port', '0', '--latency-ms', '1'], {
      cwd: REPO_ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      let output = '';
      child.stdout?.setEncoding('utf8');
      while (!output.includes('\n')) {
        const [chunk] = (await once(child.stdout ?? child, 'data')) as [string];
        output += chunk;
      }
      const match = /^upstream simulator listening on (http:\/\/127\.0\.0\.1:\d+)\n$/.exec(output);
      expect(match).not.toBeNull();
      const response = await fetch(`${match?.[1]}/_sim/health`);
      expect(response.status).toBe(200);
      child.kill('SIGTERM');
      expect(await waitForExit(child, 5000)).toBe(0);
    } finally {
      child.kill('SIGKILL');
    }
  });

  test('refuses a bad option or a port in use in one line, not a stack trace', async () => {
    const run = (...args: string[]) =>
      new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
        execFile(
          process.execPath,
          ['bin/upstream-simulator.ts', ...args],
          { cwd: REPO_ROOT, timeout: 10_000 },
          (error, stdout, stderr) =>
            resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, stdout, stderr }),
        );
      });
    const help = await run('--help');
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^usage: npm run simulator -- \[--port 8790\]/);
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    try {
      const port = String((taken.address() as AddressInfo).port);
      for (const [args, said] of [
        [['--port', 'abc'], '--port must be a non-negative integer, got abc'],
        [['--colour'], "Unknown option '--colour'"],
        [['--port', port], 'EADDRINUSE'],
      ] as const) {
        const refused = await run(...args);
        expect(refused.code, args.join(' ')).toBe(2);
        expect(refused.stderr).toContain(`upstream simulator: `);
        expect(refused.stderr).toContain(said);
        expect(refused.stderr).not.toMatch(/^\s+at /m);
      }
    } finally {
      taken.close();
    }
  });

  test('has no side effects when imported as a module', async () => {
    const child = spawn(
      process.execPath,
      ['--input-type=module', '-e', "await import('./bin/upstream-simulator.ts'); console.log('imported');"],
      { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let output = '';
    child.stdout?.setEncoding('utf8');
    child.stdout?.on('data', (chunk: string) => {
      output += chunk;
    });
    // Exiting on its own proves no server was started (it would keep the process alive).
    expect(await waitForExit(child, 5000)).toBe(0);
    expect(output).toBe('imported\n');
  });
});
