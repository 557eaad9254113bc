import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { UpstreamFailure } from '#core/fallback.ts';
import { createContainer } from '#functions/container.ts';
import { deployment, functionConfig } from '../../support/fixtures.ts';

/**
 * A Lambda instance's container (no environment handed in for key references) must not resolve `env:` keys:
 * the process environment there holds the function role's credentials, and a registry entry keyed
 * `env:AWS_SECRET_ACCESS_KEY` would otherwise send them to its baseUrl as a bearer token.
 */

const SECRET = 'role-credential-that-must-stay-home';
let upstream: Server;
let baseUrl: string;
const authorizations: (string | undefined)[] = [];

beforeAll(async () => {
  upstream = createServer((req, res) => {
    authorizations.push(req.headers.authorization);
    req.resume();
    res.writeHead(500, { 'content-type': 'application/json' }).end('{"error":{"message":"no"}}');
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`;
  process.env.SVC_TEST_ROLE_SECRET = SECRET;
});

beforeEach(() => {
  authorizations.length = 0;
});

afterAll(async () => {
  delete process.env.SVC_TEST_ROLE_SECRET;
  await new Promise((resolve) => upstream.close(resolve));
});

const call = (keyRef: string) => ({
  deployment: deployment({ baseUrl, keyRefs: [keyRef] }),
  keyIndex: 0,
  body: { model: 'upstream-model', messages: [{ role: 'user', content: 'hi' }] },
  publicModel: 'famA-test',
  clientWantsUsage: false,
});

describe('env: key references', () => {
  it('are refused by a Lambda instance’s container: the upstream is never called with the variable', async () => {
    const container = createContainer(functionConfig());
    try {
      const chat = container.provider('openai-compatible', 'chat');
      const failure = await chat.complete(call('env:SVC_TEST_ROLE_SECRET')).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(UpstreamFailure);
      expect((failure as UpstreamFailure).kind).toBe('auth');
      expect(authorizations).toEqual([]);
    } finally {
      await container.close();
    }
  });

  it('resolve from the environment the local host hands in', async () => {
    const container = createContainer(functionConfig(), { env: { LOCAL_KEY: 'sim-key' } });
    try {
      const chat = container.provider('openai-compatible', 'chat');
      await expect(chat.complete(call('env:LOCAL_KEY'))).rejects.toBeInstanceOf(UpstreamFailure);
      expect(authorizations).toEqual(['Bearer sim-key']);
    } finally {
      await container.close();
    }
  });
});
