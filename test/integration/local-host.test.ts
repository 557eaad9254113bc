import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { Agent, request } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { DynamoAccounts } from '#adapters/dynamo-accounts.ts';
import { DynamoRegistry } from '#adapters/dynamo-registry.ts';
import { NANO_PER_USD } from '#core/pricing.ts';
import type { Deployment } from '#core/registry.ts';
import { localClientConfig } from '#local/emulators.ts';
import { GENERATED_DEMO_KEY_NAME, seed } from '#local/seed.ts';
import { type LocalStack, startLocalStack } from '#local/stack.ts';
import { startSimulator } from '#sim/server.ts';
import { drainSettlements, startTestStack, takeSettlements } from '#test/stack.ts';

const chat = (url: string, key: string) =>
  fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'famC-k3', messages: [{ role: 'user', content: 'hi' }] }),
  });

describe('UPSTREAM_BASE_URL', () => {
  it('points every deployment at the given server, with its key and model name', async () => {
    const upstream = await startSimulator();
    const t = await startTestStack({
      upstreamBaseUrl: `${upstream.url}/v1`,
      upstreamApiKey: 'sk-external',
      upstreamModel: 'llama-3-8b',
    });
    try {
      expect(t.stack.simulatorUrl).toBeNull();
      const res = await chat(t.stack.url, t.apiKey);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-svc-provider')).toBe('upstream');
      expect(((await res.json()) as { model: string }).model).toBe('famC-k3');
      expect(upstream.calls()).toEqual([
        expect.objectContaining({ provider: 'default', key: 'sk-external', model: 'llama-3-8b' }),
      ]);
      expect(t.simulator.calls()).toHaveLength(0);
    } finally {
      await t.stop();
      await upstream.close();
    }
  });
});

describe('DATA_DIR', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-data-'));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it('keeps accounts and keys across restarts, and only the last generated demo key live', async () => {
    const key = 'svc_live_persistedPERSISTED0000000001';
    const first = await startLocalStack({
      port: 0,
      dataDir,
      demoApiKey: key,
      demoBalanceNano: 5 * NANO_PER_USD,
      functionEnv: { LOG_LEVEL: 'silent' },
    });
    // One stack per DATA_DIR: a second would run a second JVM on the same store.
    await expect(startLocalStack({ port: 0, dataDir, functionEnv: { LOG_LEVEL: 'silent' } })).rejects.toThrow(
      /DATA_DIR .* is in use by another npm start/,
    );
    const client = new DynamoDBClient(localClientConfig(first.emulators.dynamodb));
    await new DynamoAccounts(client, first.resources.tables.accounts).createAccount({
      id: 'acct_kept',
      name: 'kept',
    });
    client.destroy();
    await first.stop();

    // Restarted with another DEMO_BALANCE_USD: the seed is the wallet's first top-up, not one per amount.
    const second = await startLocalStack({
      port: 0,
      dataDir,
      demoBalanceNano: 20 * NANO_PER_USD,
      functionEnv: { LOG_LEVEL: 'silent' },
    });
    try {
      const again = new DynamoDBClient(localClientConfig(second.emulators.dynamodb));
      expect(
        await new DynamoAccounts(again, second.resources.tables.accounts).getAccount('acct_kept'),
      ).toMatchObject({ name: 'kept' });
      again.destroy();
      // The seed top-up is not credited again across restarts, whatever amount the restart names; the stack
      // says what the wallet holds.
      const wallet = await second.container.accounting.report('acct_demo');
      expect(wallet.ledger.filter((e) => e.kind === 'credit')).toHaveLength(1);
      expect(second.demoBalanceNano).toBe(5 * NANO_PER_USD);
      // And says so (npm start prints it beside the balance when DEMO_BALANCE_USD was given).
      expect(first.demoFundedBefore).toBe(false);
      expect(second.demoFundedBefore).toBe(true);
      // The first run's demo key still works; this run printed a new one as well.
      expect((await chat(second.url, key)).status).toBe(200);
      expect((await chat(second.url, second.demoApiKey)).status).toBe(200);
      expect(second.revokedDemoKeys).toBe(0);
      // A next start without DEMO_API_KEY generates another key and revokes this one, the only generated key
      // still live; the DEMO_API_KEY one is the caller's and stays.
      const reseed = () =>
        seed({
          dynamodbEndpoint: second.emulators.dynamodb,
          accountsTable: second.resources.tables.accounts,
          registryTable: second.resources.tables.registry,
          models: [],
          deployments: [],
        });
      const third = await reseed();
      expect(third.revokedDemoKeys).toBe(1);
      const fourth = await reseed();
      expect(fourth.revokedDemoKeys).toBe(1);
      // The third start's key, never seen by the gateway (so not in its key cache), is refused; the newest works.
      expect((await chat(second.url, third.demoApiKey)).status).toBe(401);
      expect((await chat(second.url, fourth.demoApiKey)).status).toBe(200);
      expect((await chat(second.url, key)).status).toBe(200);
      const store = new DynamoDBClient(localClientConfig(second.emulators.dynamodb));
      const keys = await new DynamoAccounts(store, second.resources.tables.accounts).listKeys('acct_demo');
      store.destroy();
      // Exactly one live generated key, and the DEMO_API_KEY one.
      expect(
        keys
          .filter((k) => k.revokedAt === null)
          .map((k) => k.name)
          .sort(),
      ).toEqual(['demo', GENERATED_DEMO_KEY_NAME]);
    } finally {
      await second.stop();
    }
    // Two stacks started one after the other, each with its own DynamoDB Local JVM (5-10 s apiece while the rest
    // of the suite runs beside it): the default 30 s is too close.
  }, 90_000);
});

describe('DATA_DIR left marked in use by a process that is gone', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-data-'));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it.each([
    ['with another start time', ` 1`],
    ['written before start times were kept', ''],
  ])(
    'is taken over when the pid it names is reused by another process, this one included (%s)',
    async (_, rest) => {
      // A container killed mid-run leaves its pid file; the next container's npm start often gets the same pid.
      writeFileSync(join(dataDir, 'in-use.pid'), `${process.pid}${rest}`);
      const stack = await startLocalStack({ port: 0, dataDir, functionEnv: { LOG_LEVEL: 'silent' } });
      try {
        expect(readFileSync(join(dataDir, 'in-use.pid'), 'utf8').split(' ')[0]).toBe(String(process.pid));
        // And while it runs, the directory is this stack's.
        await expect(
          startLocalStack({ port: 0, dataDir, functionEnv: { LOG_LEVEL: 'silent' } }),
        ).rejects.toThrow(/is in use by another npm start/);
      } finally {
        await stack.stop();
      }
    },
  );
});

describe('DATA_DIR kept while the way of starting changes', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-data-'));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  const statuses = async (stack: LocalStack, model: string) => {
    const client = new DynamoDBClient(localClientConfig(stack.emulators.dynamodb));
    try {
      const { deployments } = await new DynamoRegistry(client, stack.resources.tables.registry).load();
      return Object.fromEntries(deployments.filter((d) => d.model === model).map((d) => [d.id, d.status]));
    } finally {
      client.destroy();
    }
  };

  it("retires the former way's seeded deployments, and keeps what the operator added", async () => {
    const options = { port: 0, dataDir, functionEnv: { LOG_LEVEL: 'silent' } };
    const first = await startLocalStack(options);
    const client = new DynamoDBClient(localClientConfig(first.emulators.dynamodb));
    const registry = new DynamoRegistry(client, first.resources.tables.registry);
    const [flash] = (await registry.load()).deployments.filter((d) => d.id === 'famA-v4.1-flash@sim-b');
    await registry.addDeployment({ ...(flash as Deployment), id: 'famA-v4.1-flash@mine', provider: 'mine' });
    client.destroy();
    await first.stop();

    const upstream = await startSimulator();
    try {
      const second = await startLocalStack({ ...options, upstreamBaseUrl: `${upstream.url}/v1` });
      try {
        expect(await statuses(second, 'famA-v4.1-flash')).toEqual({
          'famA-v4.1-flash@sim-a': 'retired',
          'famA-v4.1-flash@sim-b': 'retired',
          'famA-v4.1-flash@upstream': 'active',
          'famA-v4.1-flash@mine': 'active',
        });
      } finally {
        await second.stop();
      }
    } finally {
      await upstream.close();
    }

    const third = await startLocalStack(options);
    try {
      expect(await statuses(third, 'famA-v4.1-flash')).toEqual({
        'famA-v4.1-flash@sim-a': 'active',
        'famA-v4.1-flash@sim-b': 'active',
        'famA-v4.1-flash@upstream': 'retired',
        'famA-v4.1-flash@mine': 'active',
      });
    } finally {
      await third.stop();
    }
    // Three stacks one after the other, each with its own JVM: 26.6 s of the default 30 s in a passing full run,
    // over it in the next.
  }, 120_000);
});

describe('the local Function URL', () => {
  it('answers unknown paths with an OpenAI-shaped 404', async () => {
    const t = await startTestStack();
    try {
      const res = await fetch(`${t.stack.url}/v1/nope`);
      expect(res.status).toBe(404);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('unknown_url');
    } finally {
      await t.stop();
    }
  });
});

describe('several gateway instances (GATEWAY_INSTANCES)', () => {
  it('share the port: connections spread over the instances, every call is served, metered and settled', async () => {
    const t = await startTestStack({ instances: 2 });
    // One connection per request, so the kernel spreads them over the instances' listeners.
    const dispatcher = new Agent({ pipelining: 0, connections: 32 });
    try {
      await drainSettlements(t.stack);
      const responses = await Promise.all(
        Array.from({ length: 32 }, async () => {
          const res = await request(`${t.stack.url}/v1/chat/completions`, {
            method: 'POST',
            headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' },
            body: JSON.stringify({
              model: 'famA-v4.1-flash',
              messages: [{ role: 'user', content: 'hi' }],
              max_tokens: 8,
            }),
            dispatcher,
          });
          await res.body.dump();
          return { status: res.statusCode, requestId: String(res.headers['x-request-id']) };
        }),
      );
      expect(responses.map((r) => r.status)).toEqual(Array(32).fill(200));
      const ids = new Set(responses.map((r) => r.requestId));
      // Each instance has its own connections: both served some (all 32 on one would be a 1-in-2³¹ fluke).
      const served = await t.stack.servedByInstance();
      expect(served).toHaveLength(2);
      expect(served.every((n) => n > 0)).toBe(true);
      // Every call's settlement record reached the queue, through the one sender thread both instances share.
      const records = await takeSettlements(t.stack, 32);
      expect(new Set(records.map((r) => r.requestId))).toEqual(ids);
      // …and every call was admitted against the account: each holds its worst case until settled.
      const holds = (await t.stack.container.accounting.report('acct_demo')).holds;
      expect(holds.filter((h) => ids.has(h.requestId))).toHaveLength(32);
      // The site root is served by every instance too.
      const pages = await Promise.all(
        Array.from({ length: 8 }, async () => {
          const res = await request(`${t.stack.url}/`, { dispatcher });
          await res.body.dump();
          return { status: res.statusCode };
        }),
      );
      expect(pages.map((p) => p.status)).toEqual(Array(8).fill(200));
    } finally {
      await dispatcher.close();
      await t.stop();
    }
  });
});
