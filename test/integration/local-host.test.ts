import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, describe, expect, it } from 'vitest';
import { DynamoAccounts } from '#adapters/dynamo-accounts.ts';
import { localClientConfig } from '#local/emulators.ts';
import { startLocalStack } from '#local/stack.ts';
import { startSimulator } from '#sim/server.ts';
import { startTestStack } from '#test/stack.ts';

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

  it('keeps accounts and keys across restarts', async () => {
    const key = 'svc_live_persistedPERSISTED0000000001';
    const first = await startLocalStack({
      port: 0,
      dataDir,
      demoApiKey: key,
      demoBalanceUsd: 5,
      functionEnv: { LOG_LEVEL: 'silent' },
    });
    const client = new DynamoDBClient(localClientConfig(first.emulators.dynamodb));
    await new DynamoAccounts(client, first.resources.tables.accounts).createAccount({
      id: 'acct_kept',
      name: 'kept',
    });
    client.destroy();
    await first.stop();

    const second = await startLocalStack({
      port: 0,
      dataDir,
      demoBalanceUsd: 5,
      functionEnv: { LOG_LEVEL: 'silent' },
    });
    try {
      const again = new DynamoDBClient(localClientConfig(second.emulators.dynamodb));
      expect(
        await new DynamoAccounts(again, second.resources.tables.accounts).getAccount('acct_kept'),
      ).toMatchObject({ name: 'kept' });
      again.destroy();
      // The same seed top-up is not credited twice across restarts.
      const wallet = await second.container.accounting.report('acct_demo');
      expect(wallet.ledger.filter((e) => e.kind === 'credit')).toHaveLength(1);
      // The first run's demo key still works; this run printed a new one as well.
      expect((await chat(second.url, key)).status).toBe(200);
      expect((await chat(second.url, second.demoApiKey)).status).toBe(200);
    } finally {
      await second.stop();
    }
  });
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
