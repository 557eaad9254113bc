import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_BASE } from '#core/endpoints.ts';
import { probeChecks } from '#core/uptime-probe.ts';
import type { Container } from '#functions/container.ts';
import { functions } from '#lib/functions.ts';
import {
  createInstanceServer,
  type InstanceServer,
  loadRoutes,
  NO_SITE,
  type Route,
} from '#local/function-host.ts';
import { functionUrlEvent, invocationContext, invokeStreaming, readBody } from '#local/function-url.ts';

/**
 * A path is routed by the stacks (lib/functions.ts), served by the local host from the same table, checked again by
 * its function (a Function URL hands a function every path), and called by the uptime probe. Each function must
 * accept every route it is given and refuse the rest; the probe must call only routed paths.
 */

/** A container that cannot be built: a request its function accepts fails past its path check, with a 500. */
const unbuilt = new Proxy({} as Container, {
  get: () => {
    throw new Error('no container in this test');
  },
});

let routes: Route[];
const servers: Server[] = [];
/** Each route's function behind a server of its own that hands it every path, as its Function URL does. */
const urls = new Map<Route, string>();

beforeAll(async () => {
  routes = await loadRoutes(unbuilt);
  for (const route of routes) {
    const server = createServer(async (req, res) => {
      const body = (await readBody(req, 1 << 20)) ?? Buffer.alloc(0);
      await invokeStreaming(
        route.handler,
        functionUrlEvent(req, body),
        invocationContext(route.name, 10_000),
        res,
      );
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    servers.push(server);
    urls.set(route, `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  }
});
afterAll(async () => {
  for (const server of servers) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

const call = async (route: Route, path: string) => {
  const res = await fetch(`${urls.get(route)}${path}`, {
    method: route.method,
    headers: { 'content-type': 'application/json' },
    ...(route.method === 'POST' ? { body: '{}' } : {}),
  });
  const body = (await res.json()) as { error: { code: string | null } };
  return { status: res.status, code: body.error.code };
};

/** A path on a route: its own, or one below it for a prefix route (`/v1/models/{id}`). */
const pathOn = (route: Route) => (route.prefix ? `${route.path}/famA-v4.1-flash` : route.path);

describe('the routes', () => {
  it('are every HTTP route of the stacks, each served by its own function', () => {
    const routed = Object.entries(functions).flatMap(([name, definition]) =>
      definition.trigger.kind === 'http'
        ? definition.trigger.routes.map((r) => `${name} ${r.method} ${r.path.replace(/\/\{\w+\}$/, '/*')}`)
        : [],
    );
    const served = routes.map((r) => `${r.name} ${r.method} ${r.path}${r.prefix ? '/*' : ''}`);
    expect(served.sort()).toEqual(routed.sort());
    expect(served).toEqual(
      expect.arrayContaining(['chat-completions POST /v1/chat/completions', 'models GET /v1/models/*']),
    );
  });

  it("are each accepted by their function, which refuses another function's path with 404 unknown_url", async () => {
    for (const route of routes) {
      // Past the path check, the function needs its container: the 500 shows it accepted the path.
      expect(await call(route, pathOn(route)), `${route.method} ${pathOn(route)}`).toEqual({
        status: 500,
        code: null,
      });
      for (const other of routes.filter((r) => r.name !== route.name)) {
        expect(await call(route, pathOn(other)), `${route.name} given ${pathOn(other)}`).toEqual({
          status: 404,
          code: 'unknown_url',
        });
      }
    }
  });

  it('are matched by the local host as the stacks route them: exact paths, one id below the models path', async () => {
    const host: InstanceServer = createInstanceServer(routes, NO_SITE, () => {});
    await new Promise<void>((resolve) => host.server.listen(0, '127.0.0.1', resolve));
    const origin = `http://127.0.0.1:${(host.server.address() as AddressInfo).port}`;
    try {
      const status = async (method: string, path: string) => {
        const res = await fetch(`${origin}${path}`, {
          method,
          headers: { 'content-type': 'application/json' },
          ...(method === 'POST' ? { body: '{}' } : {}),
        });
        const body = (await res.json()) as { error: { code: string | null } };
        // 500: handed to the function, which has no container here; 404 unknown_url: the host found no route.
        return res.status === 404 ? body.error.code : res.status;
      };
      expect(await status('POST', '/v1/chat/completions')).toBe(500);
      expect(await status('POST', '/v1/audio/speech')).toBe(500);
      expect(await status('GET', '/v1/models')).toBe(500);
      expect(await status('GET', '/v1/models/famA-v4.1-flash')).toBe(500);
      expect(await status('GET', '/v1/chat/completions')).toBe('unknown_url');
      expect(await status('POST', '/v1/models')).toBe('unknown_url');
      expect(await status('POST', '/v1/chat')).toBe('unknown_url');
      expect(await status('GET', '/v1/modelsx')).toBe('unknown_url');
      expect(await status('POST', '/v1/chat/completions/extra')).toBe('unknown_url');
    } finally {
      host.server.closeAllConnections();
      await new Promise((resolve) => host.server.close(resolve));
    }
  });

  it("are where the uptime probe calls: each check's path is routed, for its method or as a preflight", () => {
    const checks = probeChecks(() => 'svc_live_x');
    expect(checks.length).toBeGreaterThan(1);
    for (const check of checks) {
      const path = `${API_BASE}${check.path}`;
      const route = routes.find((r) => r.path === path || (r.prefix && path.startsWith(`${r.path}/`)));
      expect(route, path).toBeDefined();
      if (check.method !== 'OPTIONS') expect(route?.method).toBe(check.method);
    }
  });
});
