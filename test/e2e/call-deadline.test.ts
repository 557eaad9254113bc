import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { schemaErrors } from '#test/openapi-schemas.ts';
import {
  drainSettlements,
  NO_CIRCUIT_BREAKING,
  startTestStack,
  type TestStack,
  takeSettlements,
} from '#test/stack.ts';

/**
 * A call's upstream attempts, each within its own timeout, can add up past the end of the function's invocation
 * (6 × 180 s against chat's 900 s). Lambda kills an invocation there: the client would get no OpenAI answer and
 * the call no settlement. The gateway stops routing at the call's deadline instead — the function's timeout
 * less the 10 s kept to answer and settle. Here the functions time out after 11 s, so calls have 1 s; the
 * test stack gives a non-stream upstream 3 s to answer and a stream 1.5 s for its first event.
 */
let t: TestStack;
beforeAll(async () => {
  t = await startTestStack({
    functionEnv: NO_CIRCUIT_BREAKING,
    functionTimeoutsMs: { 'chat-completions': 11_000, embeddings: 11_000 },
  });
});
afterAll(() => t?.stop());
beforeEach(() => drainSettlements(t.stack));
afterEach(() => {
  t.simulator.resetFaults();
  t.simulator.clearCalls();
});

const chat = (extra: Record<string, unknown> = {}) => ({
  model: 'famA-v4.1-flash',
  messages: [{ role: 'user', content: 'hello' }],
  ...extra,
});

/** Every simulated deployment answers too late for the call's deadline, though within its own timeouts. */
const slowEverywhere = (fault: { latencyMs?: number; firstByteDelayMs?: number }) => {
  for (const id of ['sim-a', 'sim-b']) t.simulator.setFaults(id, fault);
};

describe("a call at its function's deadline", () => {
  it.each([
    ['a non-stream chat call', '/chat/completions', chat(), { latencyMs: 2_500 }],
    [
      'a stream before its first event',
      '/chat/completions',
      chat({ stream: true }),
      { firstByteDelayMs: 3_000 },
    ],
    ['an embeddings call', '/embeddings', { model: 'svc-embed', input: 'hello' }, { latencyMs: 2_500 }],
  ])(
    '%s: abandons the attempt under way, tries no other, answers 500 and settles uncharged',
    async (_, path, payload, fault) => {
      slowEverywhere(fault);
      const started = Date.now();
      const res = await t.post(path, payload);
      const elapsed = Date.now() - started;
      expect(res.status).toBe(500);
      const error = (await res.json()) as { error: { type: string; message: string } };
      expect(schemaErrors('ErrorResponse', error)).toBe('');
      expect(error.error.type).toBe('server_error');
      expect(error.error.message).toContain('longest time a call may take');
      // Cut at 1 s: before the attempt would have ended (2.5 s; a stream's first-event timeout at 1.5 s).
      expect(elapsed).toBeLessThan(2_400);
      const [record] = await takeSettlements(t.stack, 1);
      expect(record).toMatchObject({
        outcome: 'upstream_error',
        status: 500,
        cost: 0,
      });
      // Its hold is released by this record's settlement, not left to the sweeper.
      expect(record?.admission?.hold?.amount).toBeGreaterThan(0);
      expect(record?.fault).toMatchObject({ kind: 'timeout' });
      expect(record?.attempts).toHaveLength(1);
      expect(record?.attempts[0]).toMatchObject({ outcome: 'timeout', detail: "cut at the call's deadline" });
      const called = ['sim-a', 'sim-b'].flatMap((id) => t.simulator.calls(id));
      expect(called).toHaveLength(1);
    },
  );

  it('leaves a call that ends within its deadline alone', async () => {
    slowEverywhere({ latencyMs: 300 });
    const res = await t.post('/chat/completions', chat());
    expect(res.status).toBe(200);
    const [record] = await takeSettlements(t.stack, 1);
    expect(record).toMatchObject({ outcome: 'success' });
    expect(record?.cost).toBeGreaterThan(0);
  });
});
