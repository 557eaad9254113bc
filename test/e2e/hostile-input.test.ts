import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { MAX_JSON_DEPTH } from '#http/lambda.ts';
import { schemaErrors } from '#test/openapi-schemas.ts';
import { drainSettlements, startTestStack, type TestStack, takeSettlementsOf } from '#test/stack.ts';

/**
 * Requests built to hurt: each must be refused as the caller's own error — a bounded 400 or 404, recorded as a
 * client error, its settlement record sent — never a 500 counted against the platform, an oversized record the
 * queue refuses, or an instance kept busy.
 */
let t: TestStack;
beforeAll(async () => {
  t = await startTestStack();
});
afterAll(() => t?.stop());
beforeEach(() => drainSettlements(t.stack));

/** `{"a":{"a":…{}}}` nested `depth` levels. */
const nested = (depth: number): string => `${'{"a":'.repeat(depth - 1)}{}${'}'.repeat(depth - 1)}`;

const chatWith = (extra: string): string =>
  `{"model":"famA-v4.1-flash","messages":[{"role":"user","content":"hi"}],${extra}}`;

const errorOf = async (res: Response) => {
  const body = (await res.json()) as {
    error: { code: string | null; message: string; param: string | null };
  };
  expect(schemaErrors('ErrorResponse', body)).toBe('');
  return body.error;
};

describe('hostile request bodies', () => {
  it.each([
    [
      'tool parameters',
      (depth: number) =>
        `"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":${nested(depth)}}}}]`,
    ],
    [
      'a response schema',
      (depth: number) =>
        `"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":${nested(depth)}}}`,
    ],
  ])('refuses %s nested thousands of levels deep with a 400, as the caller’s error', async (_, part) => {
    const res = await t.post('/chat/completions', chatWith(part(5_000)));
    expect(res.status).toBe(400);
    expect((await errorOf(res)).message).toContain(`more than ${MAX_JSON_DEPTH} levels deep`);
    const [record] = await takeSettlementsOf(t.stack, [res.headers.get('x-request-id')]);
    expect(record).toMatchObject({ outcome: 'client_error', status: 400 });
  });

  it('still takes nesting as deep as real schemas go', async () => {
    const schema = `"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":${nested(20)}}}`;
    expect((await t.post('/chat/completions', chatWith(schema))).status).toBe(200);
  });

  it('lists a few of 150,000 unknown parameters, and the call is still recorded', async () => {
    const names = Array.from({ length: 150_000 }, (_, i) => `"p${i}_${'x'.repeat(8)}":1`).join(',');
    const res = await t.post('/chat/completions', chatWith(names));
    expect(res.status).toBe(400);
    const error = await errorOf(res);
    expect(error.code).toBe('unsupported_parameter');
    expect(error.message).toContain('and 149990 more');
    expect(error.message.length).toBeLessThan(1_000);
    const [record] = await takeSettlementsOf(t.stack, [res.headers.get('x-request-id')]);
    expect(record).toMatchObject({ outcome: 'client_error', status: 400 });
    expect(record?.fault?.detail.length).toBeLessThanOrEqual(1_001);
  });

  it('echoes an absurdly long model id only in part', async () => {
    const model = 'm'.repeat(100_000);
    const res = await t.post('/chat/completions', { model, messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(404);
    expect((await errorOf(res)).message.length).toBeLessThan(400);
    const [record] = await takeSettlementsOf(t.stack, [res.headers.get('x-request-id')]);
    expect(record).toMatchObject({ status: 404 });
  });
});
