import { NodeHttpHandler } from '@smithy/node-http-handler';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from '#test/stack.ts';

/** Records the DynamoDB operation of every request the gateway's client sends. */
const operations: string[] = [];
const inner = new NodeHttpHandler();
const counting = {
  handle: (
    request: Parameters<NodeHttpHandler['handle']>[0],
    options?: Parameters<NodeHttpHandler['handle']>[1],
  ) => {
    operations.push(
      String(request.headers['x-amz-target'] ?? '')
        .split('.')
        .pop() ?? '',
    );
    return inner.handle(request, options);
  },
  updateHttpClientConfig: () => {},
  httpHandlerConfigs: () => ({}),
  destroy: () => inner.destroy(),
};

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack({ dynamodbOverrides: { requestHandler: counting } });
});
afterAll(() => t?.stop());

const chat = (stream = false) =>
  t.post('/chat/completions', {
    model: 'famA-v4.1-flash',
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 16,
    stream,
  });

describe('metering on the request path', () => {
  it('costs exactly one accounting round trip per call once key and account are cached', async () => {
    await (await chat()).text(); // loads key, account profile and registry
    operations.length = 0;
    for (let i = 0; i < 10; i++) await (await chat()).text();
    for (let i = 0; i < 10; i++) await (await chat(true)).text();
    expect(operations).toEqual(Array.from({ length: 20 }, () => 'TransactWriteItems'));
  });

  it('stays at one round trip per call when one account’s calls arrive concurrently', async () => {
    operations.length = 0;
    const statuses = await Promise.all(Array.from({ length: 16 }, async () => (await chat()).status));
    expect(statuses.every((s) => s === 200)).toBe(true);
    expect(operations).toEqual(Array.from({ length: 16 }, () => 'TransactWriteItems'));
  });
});
