import { DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emissionUs, statusOf, TIER_LIMITS } from '#core/limits.ts';
import { usdToNano } from '#core/pricing.ts';
import { localClientConfig } from '#local/emulators.ts';
import { newAccount } from '#test/billing.ts';
import { manualClock } from '#test/fixtures.ts';
import { startTestStack, type TestStack, takeSettlements } from '#test/stack.ts';

/** A DynamoDB request handler that can be switched off, to take the accounting store away mid-test. */
const switchableHandler = () => {
  const inner = new NodeHttpHandler();
  let down = false;
  return {
    setDown: (value: boolean) => {
      down = value;
    },
    handler: {
      handle: (
        request: Parameters<NodeHttpHandler['handle']>[0],
        options?: Parameters<NodeHttpHandler['handle']>[1],
      ) =>
        down
          ? Promise.reject(
              Object.assign(new Error('connect ECONNREFUSED 127.0.0.1 (injected)'), { code: 'ECONNREFUSED' }),
            )
          : inner.handle(request, options),
      updateHttpClientConfig: () => {},
      httpHandlerConfigs: () => ({}),
      destroy: () => inner.destroy(),
    },
  };
};

const clock = manualClock(Date.UTC(2026, 10, 22, 12));
const store = switchableHandler();
let t: TestStack;
beforeAll(async () => {
  t = await startTestStack({
    clock,
    // Tier and key changes show on the next request, so the test need not wait out a cache.
    functionEnv: { ACCOUNT_CACHE_TTL_MS: '0', KEY_CACHE_TTL_MS: '0' },
    dynamodbOverrides: { requestHandler: store.handler, maxAttempts: 1 },
  });
});
afterAll(() => t?.stop());

/** A fresh account with a key; funded (hence trusted) when `usd` is given, on the test's clock. */
const account = (usd?: number) => newAccount(t, usd ? { usd, at: clock.now() } : {});
const chat = (key: string, body: Record<string, unknown>) =>
  t.post(
    '/chat/completions',
    { messages: [{ role: 'user', content: 'hi' }], ...body },
    {
      authorization: `Bearer ${key}`,
      'content-type': 'application/json',
    },
  );
const bucket = async (accountId: string) => {
  const client = new DynamoDBClient(localClientConfig(t.stack.emulators.dynamodb));
  const { Item } = await client.send(
    new GetItemCommand({
      TableName: t.stack.resources.tables.buckets,
      Key: { pk: { S: `acct#${accountId}` }, sk: { S: 'limits' } },
      ConsistentRead: true,
    }),
  );
  client.destroy();
  return { rpm: Number(Item?.rpm?.N), tpm: Number(Item?.tpm?.N) };
};

describe('rate limits (GCRA, injected clock)', () => {
  it('admit a burst up to the tier limit, then refuse with a correct Retry-After and headers that match the store', async () => {
    const { id, key } = await account(); // unverified: 30 requests per minute
    const limits = TIER_LIMITS.unverified;
    for (let i = 1; i <= limits.rpm; i++) {
      const res = await chat(key, { model: 'svc-free-famA', max_tokens: 8 });
      expect(res.status, `request ${i}`).toBe(200);
      const stored = await bucket(id);
      const nowUs = clock.now() * 1000;
      expect(res.headers.get('x-ratelimit-limit-requests')).toBe('30');
      expect(Number(res.headers.get('x-ratelimit-remaining-requests'))).toBe(
        statusOf('rpm', limits.rpm, stored.rpm, nowUs).remaining,
      );
      expect(Number(res.headers.get('x-ratelimit-remaining-requests'))).toBe(limits.rpm - i);
      expect(Number(res.headers.get('x-ratelimit-remaining-tokens'))).toBe(
        statusOf('tpm', limits.tpm, stored.tpm, nowUs).remaining,
      );
      expect(res.headers.get('x-ratelimit-limit-tokens')).toBe('100000');
    }
    const refused = await chat(key, { model: 'svc-free-famA', max_tokens: 8 });
    expect(refused.status).toBe(429);
    // 30 per minute drains one request every 2 s.
    expect(refused.headers.get('retry-after')).toBe('2');
    expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    const body = (await refused.json()) as { error: { type: string; code: string; message: string } };
    expect(body.error).toMatchObject({ type: 'requests', code: 'rate_limit_exceeded' });
    expect(body.error.message).toMatch(/requests per minute.*Limit 30/);
    clock.advance(1_999);
    expect((await chat(key, { model: 'svc-free-famA', max_tokens: 8 })).status).toBe(429);
    clock.advance(1);
    expect((await chat(key, { model: 'svc-free-famA', max_tokens: 8 })).status).toBe(200);
  });

  it('refuse on tokens per minute with type tokens, counting the completion cap', async () => {
    const { key } = await account();
    // Each call charges its prompt estimate plus 40 000 completion tokens against 100 000 TPM.
    expect((await chat(key, { model: 'svc-free-famA', max_tokens: 40_000 })).status).toBe(200);
    expect((await chat(key, { model: 'svc-free-famA', max_tokens: 40_000 })).status).toBe(200);
    const refused = await chat(key, { model: 'svc-free-famA', max_tokens: 40_000 });
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as { error: { type: string } }).error.type).toBe('tokens');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    // Waiting cures this one: the SDKs may retry it, after the time it gives.
    expect(refused.headers.get('x-should-retry')).toBeNull();
  });

  it('refuse a request larger than the limit itself without a retry time: waiting cannot make it fit', async () => {
    const { key } = await account();
    // 100 000 TPM: a 100 001-token completion cap never fits, however long the client waits.
    const refused = await chat(key, { model: 'svc-free-famA', max_tokens: 100_001 });
    expect(refused.status).toBe(429);
    const body = (await refused.json()) as { error: { type: string; message: string } };
    expect(body.error.type).toBe('tokens');
    expect(body.error.message).toMatch(/^Request too large for tokens per minute/);
    expect(refused.headers.get('retry-after')).toBeNull();
    expect(refused.headers.get('retry-after-ms')).toBeNull();
    expect(refused.headers.get('x-should-retry')).toBe('false');
    expect(refused.headers.get('x-ratelimit-limit-tokens')).toBe('100000');
    // The official SDK, which retries a 429 unless told not to, asks once and reports the refusal.
    let calls = 0;
    const sdk = new OpenAI({
      baseURL: t.baseURL,
      apiKey: key,
      maxRetries: 2,
      fetch: (input, init) => {
        calls++;
        return fetch(input, init);
      },
    });
    const error = await sdk.chat.completions
      .create({ model: 'svc-free-famA', messages: [{ role: 'user', content: 'hi' }], max_tokens: 100_001 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    expect(calls).toBe(1);
  });

  it('count per account across all its keys', async () => {
    const { id, key } = await account();
    const { key: second } = await t.stack.container.accounts.createKey(id);
    const first = await chat(key, { model: 'svc-free-famA', max_tokens: 8 });
    const other = await chat(second, { model: 'svc-free-famA', max_tokens: 8 });
    expect(Number(other.headers.get('x-ratelimit-remaining-requests'))).toBe(
      Number(first.headers.get('x-ratelimit-remaining-requests')) - 1,
    );
  });
});

describe('tiers', () => {
  it('rise to the trusted limits with the first top-up, and stay there', async () => {
    const { id, key } = await account();
    expect(
      (await chat(key, { model: 'svc-free-famA', max_tokens: 8 })).headers.get('x-ratelimit-limit-requests'),
    ).toBe('30');
    await t.stack.container.accounting.topUp({
      accountId: id,
      amount: usdToNano(1),
      reference: `first-${id}`,
      at: clock.now(),
    });
    const trusted = await chat(key, { model: 'svc-free-famA', max_tokens: 8 });
    expect(trusted.headers.get('x-ratelimit-limit-requests')).toBe('1000');
    expect(trusted.headers.get('x-ratelimit-limit-tokens')).toBe('2000000');
    // A paid call draws on the new balance; the tier does not change back.
    expect((await chat(key, { model: 'famA-v4.1-flash', max_tokens: 8 })).status).toBe(200);
    expect(
      (await chat(key, { model: 'svc-free-famA', max_tokens: 8 })).headers.get('x-ratelimit-limit-requests'),
    ).toBe('1000');
    expect((await t.stack.container.accounts.getAccount(id))?.tier).toBe('trusted');
  });

  it('follow a volume account’s custom quota', async () => {
    const { id, key } = await account(1);
    await t.stack.container.accounting.setQuota(id, { rpm: 5000 }, clock.now());
    expect(
      (await chat(key, { model: 'svc-free-famA', max_tokens: 8 })).headers.get('x-ratelimit-limit-requests'),
    ).toBe('5000');
  });
});

describe('the wallet at admission', () => {
  it('refuses 402 with the balance, the required amount and the largest affordable max_tokens', async () => {
    const { id, key } = await account(1);
    // famC-k3: 3.85 / 19.25 USD per 1M tokens; 60 000 completion tokens cost about 1.155 USD.
    const refused = await chat(key, { model: 'famC-k3', max_tokens: 60_000 });
    expect(refused.status).toBe(402);
    const { error } = (await refused.json()) as {
      error: {
        type: string;
        code: string;
        balance_usd: number;
        available_usd: number;
        required_usd: number;
        max_affordable_max_tokens: number;
      };
    };
    expect(error).toMatchObject({
      type: 'insufficient_balance',
      code: 'insufficient_balance',
      balance_usd: 1,
      available_usd: 1,
    });
    expect(error.required_usd).toBeGreaterThan(1);
    expect(error.max_affordable_max_tokens).toBeGreaterThan(50_000);
    expect(
      (await chat(key, { model: 'famC-k3', max_tokens: error.max_affordable_max_tokens + 1 })).status,
    ).toBe(402);
    expect((await chat(key, { model: 'famC-k3', max_tokens: error.max_affordable_max_tokens })).status).toBe(
      200,
    );
    const wallet = await t.stack.container.accounting.report(id);
    expect(wallet.holds).toHaveLength(1);
    expect(wallet.available).toBeGreaterThanOrEqual(0);
  });

  it('holds and bills nothing on the free model', async () => {
    const { id, key } = await account(1);
    await takeSettlements(t.stack, Number.POSITIVE_INFINITY, 300);
    expect((await chat(key, { model: 'svc-free-famA' })).status).toBe(200);
    expect((await t.stack.container.accounting.report(id)).holds).toHaveLength(0);
    const [record] = (await takeSettlements(t.stack, 1)).filter((r) => r.accountId === id);
    expect(record).toMatchObject({ cost: 0, admission: { hold: null } });
  });

  it('admits at most N of many concurrent calls on a wallet that covers exactly N', async () => {
    // A slow upstream keeps every admitted call's hold open while the others arrive.
    const body = {
      model: 'famC-k3',
      max_tokens: 20_000,
      messages: [{ role: 'user', content: 'x [[sim: latency_ms=150]]' }],
    };
    // The refusal on an empty wallet states the exact hold; fund exactly N of them — three, or as many as the
    // 1 USD minimum top-up takes.
    const { id, key } = await account();
    const required = ((await (await chat(key, body)).json()) as { error: { required_usd: number } }).error
      .required_usd;
    const n = Math.max(3, Math.ceil(1 / required));
    expect(n).toBeLessThan(12);
    await t.stack.container.accounting.topUp({
      accountId: id,
      amount: n * usdToNano(required),
      reference: `exact-${id}`,
      at: clock.now(),
    });
    const statuses = (await Promise.all(Array.from({ length: 12 }, () => chat(key, body)))).map(
      (r) => r.status,
    );
    expect(statuses.filter((s) => s === 200)).toHaveLength(n);
    expect(statuses.filter((s) => s === 402)).toHaveLength(12 - n);
    const wallet = await t.stack.container.accounting.report(id);
    expect(wallet.available).toBeGreaterThanOrEqual(0);
    expect(wallet.available).toBe(wallet.balance - wallet.holds.reduce((sum, h) => sum + h.amount, 0));
  });
});

describe('failing closed', () => {
  it('refuses with 503 when the accounting store is unreachable, and never calls the upstream unmetered', async () => {
    const { key } = await account(1);
    expect((await chat(key, { model: 'famA-v4.1-flash', max_tokens: 8 })).status).toBe(200);
    t.simulator.clearCalls();
    store.setDown(true);
    try {
      const res = await chat(key, { model: 'famA-v4.1-flash', max_tokens: 8 });
      expect(res.status).toBe(503);
      expect(((await res.json()) as { error: { type: string } }).error.type).toBe('service_unavailable');
      expect(t.simulator.calls()).toHaveLength(0);
    } finally {
      store.setDown(false);
    }
  });
});

describe('emission intervals', () => {
  it('are what settlement is told to correct the token buckets with', async () => {
    const { key } = await account(1);
    await takeSettlements(t.stack, Number.POSITIVE_INFINITY, 300);
    const res = await chat(key, { model: 'famA-v4.1-flash', max_tokens: 8 });
    const record = (await takeSettlements(t.stack, 1)).find(
      (r) => r.requestId === res.headers.get('x-request-id'),
    );
    expect(record?.admission?.tokenEmissionUs).toEqual({
      tpm: emissionUs('tpm', TIER_LIMITS.trusted.tpm),
      tpd: emissionUs('tpd', TIER_LIMITS.trusted.tpd),
    });
    // With the buckets' TATs after admission (the bound on a refund: the call's charge reaches at least the
    // estimate's worth past its arrival) and the generation of the limits admitted under (the first top-up's).
    const receivedUs = (record?.timings.receivedAt ?? 0) * 1000;
    const estimated = record?.admission?.estimatedTokens ?? 0;
    expect(record?.admission?.tokenTatUs?.tpm).toBeGreaterThanOrEqual(
      receivedUs + estimated * emissionUs('tpm', TIER_LIMITS.trusted.tpm),
    );
    expect(record?.admission?.tokenTatUs?.tpd).toBeGreaterThanOrEqual(
      receivedUs + estimated * emissionUs('tpd', TIER_LIMITS.trusted.tpd),
    );
    expect(record?.admission?.limitsGen).toBe(1);
  });
});
