import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { newAccount } from '#test/billing.ts';
import {
  drainSettlements,
  NO_CIRCUIT_BREAKING,
  startTestStack,
  type TestStack,
  takeSettlementsOf,
} from '#test/stack.ts';

/**
 * Admission beside the upstream call (ADR 0011), through the running stack: once an instance remembers an
 * account, the account's calls start upstream before DynamoDB has answered their admission, and the answer waits
 * for the hold. A call the store then refuses gets its refusal, its upstream call cancelled, nothing held and
 * nothing charged.
 */

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack({ functionEnv: NO_CIRCUIT_BREAKING });
});
afterAll(() => t?.stop());
beforeEach(async () => {
  await drainSettlements(t.stack);
  t.simulator.clearCalls();
});

/** famC-k3 is the catalog's dearest output (19.25 USD per 1M tokens): a large max_tokens is a large hold. */
const chat = (key: string, extra: Record<string, unknown>, content = 'hello') =>
  t.post(
    '/chat/completions',
    { model: 'famC-k3', messages: [{ role: 'user', content }], ...extra },
    { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
  );

const timing = (res: Response, name: string): number | null => {
  const match = new RegExp(`(?:^|,\\s*)${name};dur=([\\d.]+)`).exec(res.headers.get('server-timing') ?? '');
  return match ? Number(match[1]) : null;
};

describe('admission beside the upstream call', () => {
  it('overlaps only once the instance remembers the account, and answers after the hold either way', async () => {
    const { id, key } = await newAccount(t, { usd: 5 });
    const first = await chat(key, { max_tokens: 16 });
    expect(first.status).toBe(200);
    // Nothing remembered of the account yet: the store first, then the upstream.
    expect(timing(first, 'admit')).not.toBeNull();
    expect(timing(first, 'admit-wait')).toBeNull();
    // The handler's own share covers both, one after the other (each entry is rounded to 0.01 ms).
    expect(timing(first, 'handler')).toBeGreaterThanOrEqual(
      (timing(first, 'admit') ?? Number.NaN) + (timing(first, 'upstream') ?? Number.NaN) - 0.02,
    );

    const second = await chat(key, { max_tokens: 16 });
    expect(second.status).toBe(200);
    await second.json();
    // The upstream ran beside the admission: the header says how long its answer then waited for the hold.
    expect(timing(second, 'admit-wait')).toEqual(expect.any(Number));
    const report = await t.stack.container.accounting.report(id);
    expect(report.holds.map((h) => h.requestId).sort()).toEqual(
      [first.headers.get('x-request-id'), second.headers.get('x-request-id')].sort(),
    );
  });

  it('refuses a call the wallet cannot cover though its upstream call had begun: 402, cancelled, nothing held or charged', async () => {
    const { id, key } = await newAccount(t, { usd: 1 });
    const warm = await chat(key, { max_tokens: 1_000 });
    expect(warm.status).toBe(200);
    await warm.json();
    t.simulator.clearCalls();
    const before = await t.stack.container.accounting.report(id);

    // 100,000 tokens at 19.25 USD per 1M: a 1.93 USD hold against less than 1 USD available. The upstream would
    // take 5 s to answer; the store refuses long before.
    const refused = await chat(key, { max_tokens: 100_000 }, '[[sim: latency_ms=5000]] hello');
    expect(refused.status).toBe(402);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('insufficient_balance');
    const requestId = refused.headers.get('x-request-id');

    // The upstream call had begun: the instance expected the call to pass.
    expect(t.simulator.calls().map((c) => c.model)).toHaveLength(1);
    const [record] = await takeSettlementsOf(t.stack, [requestId]);
    expect(record).toMatchObject({
      outcome: 'insufficient_balance',
      status: 402,
      cost: 0,
      admission: null,
      deployment: null,
    });
    expect(record?.attempts).toMatchObject([{ outcome: 'cancelled' }]);
    const after = await t.stack.container.accounting.report(id);
    expect(after.balance).toBe(before.balance);
    expect(after.available).toBe(before.available);
    expect(after.holds.map((h) => h.requestId)).toEqual(before.holds.map((h) => h.requestId));
    expect(after.ledger).toHaveLength(before.ledger.length);

    // The refusal leaves the account doubted: its next call waits for the store, and starts nothing upstream.
    t.simulator.clearCalls();
    const again = await chat(key, { max_tokens: 100_000 });
    expect(again.status).toBe(402);
    expect(t.simulator.calls()).toHaveLength(0);
  });

  it('closes a stream it had opened for a call then refused, and the client gets the refusal, not the stream', async () => {
    const { key } = await newAccount(t, { usd: 1 });
    const warm = await chat(key, { max_tokens: 1_000, stream: true });
    expect(warm.status).toBe(200);
    await warm.text();
    const refused = await chat(
      key,
      { max_tokens: 100_000, stream: true },
      '[[sim: chunk_delay_ms=200]] hello',
    );
    expect(refused.status).toBe(402);
    expect(refused.headers.get('content-type')).toContain('application/json');
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('insufficient_balance');
    // The refused stream had gone upstream beside its admission.
    expect(t.simulator.calls().filter((c) => c.stream)).toHaveLength(2);
    const [record] = await takeSettlementsOf(t.stack, [refused.headers.get('x-request-id')]);
    expect(record).toMatchObject({ outcome: 'insufficient_balance', status: 402, cost: 0 });
  });
});
