import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { FaultSpec } from '#sim/faults.ts';
import { schemaErrors } from '#test/openapi-schemas.ts';
import { type RestApi, startRestApi } from '#test/rest-api.ts';
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
 * less the 10 s kept to answer and settle. Here the functions time out after 12 s, so calls have 2 s, and an
 * upstream has 5 s to answer (a stream: to send its first event).
 *
 * Through the CDN the wait is shorter: CloudFront answers 504 once its origin read timeout passes without a
 * first byte. Here it is 1 s, which leaves calls that come through it (`x-amz-cf-id`) 0.5 s to begin. So is the
 * REST API's: it closes a streamed integration silent for 5 minutes, and a non-stream call is silent until done.
 * Here that is 1.2 s, which leaves calls through it 0.6 s.
 */
let t: TestStack;
let restApi: RestApi;
beforeAll(async () => {
  t = await startTestStack({
    functionEnv: {
      ...NO_CIRCUIT_BREAKING,
      UPSTREAM_COMPLETION_TIMEOUT_MS: '5000',
      UPSTREAM_STREAM_FIRST_BYTE_TIMEOUT_MS: '5000',
      CDN_READ_TIMEOUT_MS: '1000',
      REST_API_IDLE_TIMEOUT_MS: '1200',
    },
    functionTimeoutsMs: { 'chat-completions': 12_000, embeddings: 12_000 },
  });
  restApi = await startRestApi(() => t.stack.container, { timeoutMs: 12_000 });
});

/** Headers of a request as CloudFront forwards it to the API. */
const THROUGH_CDN = () => ({
  authorization: `Bearer ${t.apiKey}`,
  'content-type': 'application/json',
  'x-amz-cf-id': 'Kx8pE2b9vJ1qWmN3aZrT5yUoL7cH4dG6fS0eR_iQhPwVbXnM==',
});
afterAll(async () => {
  await restApi?.close();
  await t?.stop();
});
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

/**
 * A call cut before what is in front of the function gives up on it: a 500 saying to stream, well before the
 * function's own deadline, its one attempt abandoned and settled uncharged.
 */
const expectCutForTheEntry = async (res: Response, elapsedMs: number): Promise<void> => {
  expect(res.status).toBe(500);
  const error = (await res.json()) as { error: { type: string; message: string } };
  expect(schemaErrors('ErrorResponse', error)).toBe('');
  expect(error.error.message).toContain('"stream": true');
  // At the entry's limit (0.5 or 0.6 s), not at once.
  expect(elapsedMs).toBeGreaterThanOrEqual(400);
  expect(elapsedMs).toBeLessThan(1_500);
  const [record] = await takeSettlements(t.stack, 1);
  expect(record).toMatchObject({
    outcome: 'upstream_error',
    status: 500,
    cost: 0,
    fault: { kind: 'deadline' },
  });
  expect(record?.attempts).toMatchObject([{ outcome: 'timeout', detail: "cut at the call's deadline" }]);
};

/** Every simulated deployment answers too late for the call's deadline, though within its own timeouts. */
const slowEverywhere = (fault: FaultSpec) => {
  for (const id of ['sim-a', 'sim-b']) t.simulator.setFaults(id, fault);
};

describe("a call at its function's deadline", () => {
  it.each([
    ['a non-stream chat call', '/chat/completions', chat(), { latencyMs: 4_000 }],
    [
      'a stream before its first event',
      '/chat/completions',
      chat({ stream: true }),
      { firstByteDelayMs: 4_000 },
    ],
    ['an embeddings call', '/embeddings', { model: 'svc-embed', input: 'hello' }, { latencyMs: 4_000 }],
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
      // Cut at 2 s, before the attempt would have ended (4 s), and not sooner.
      expect(elapsed).toBeGreaterThanOrEqual(1_800);
      expect(elapsed).toBeLessThan(3_500);
      const [record] = await takeSettlements(t.stack, 1);
      expect(record).toMatchObject({
        outcome: 'upstream_error',
        status: 500,
        cost: 0,
      });
      // Its hold is released by this record's settlement, not left to the sweeper.
      expect(record?.admission?.hold?.amount).toBeGreaterThan(0);
      // Filed as the call's deadline, not as a provider's failure: the usage report counts it as the platform's.
      expect(record?.fault).toMatchObject({ kind: 'deadline' });
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

  it('through the CDN: stops before the CDN gives up, and says how to make a long call', async () => {
    slowEverywhere({ latencyMs: 4_000 });
    const started = Date.now();
    const res = await t.post('/chat/completions', chat(), THROUGH_CDN());
    // Cut at 0.5 s, long before the function's own deadline (2 s).
    await expectCutForTheEntry(res, Date.now() - started);
  });

  it('through the REST API: stops before its idle timeout closes a silent call, uncharged', async () => {
    slowEverywhere({ latencyMs: 4_000 });
    const started = Date.now();
    const res = await fetch(`${restApi.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${t.apiKey}`, 'Content-Type': 'application/json' },
      body: JSON.stringify(chat()),
    });
    // Cut at 0.6 s, long before the function's own deadline (2 s).
    await expectCutForTheEntry(res, Date.now() - started);
  });

  it('through the REST API: a Function URL call has no such wait, and one that begins in time is served', async () => {
    slowEverywhere({ latencyMs: 900 });
    // The same call by the Function URL: bound by the function's deadline alone (2 s).
    const direct = await t.post('/chat/completions', chat());
    expect(direct.status).toBe(200);
    slowEverywhere({ latencyMs: 200 });
    const res = await fetch(`${restApi.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${t.apiKey}`, 'Content-Type': 'application/json' },
      body: JSON.stringify(chat()),
    });
    expect(res.status).toBe(200);
    const records = await takeSettlements(t.stack, 2);
    expect(records.map((r) => r.outcome)).toEqual(['success', 'success']);
  });

  it('through the CDN: lets a stream that has begun run past that wait', async () => {
    // First event at once, then a dozen 90 ms apart: about 1 s, past the CDN's 0.5 s, within the 2 s.
    slowEverywhere({ chunkDelayMs: 90 });
    const res = await t.post(
      '/chat/completions',
      chat({
        stream: true,
        max_tokens: 8,
        messages: [{ role: 'user', content: 'hi [[sim: completion_tokens=8]]' }],
      }),
      THROUGH_CDN(),
    );
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    const [record] = await takeSettlements(t.stack, 1);
    expect(record).toMatchObject({ outcome: 'success' });
    expect(record?.timings.totalMs).toBeGreaterThan(500);
  });
});
