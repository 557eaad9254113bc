import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DynamoDBClient, QueryCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localClientConfig } from '#local/emulators.ts';
import { createInstanceServer, NO_SITE } from '#local/function-host.ts';
import { installLambdaGlobals, type StreamingHandler } from '#local/lambda-runtime.ts';
import { startTestStack, type TestStack } from '#test/stack.ts';

/**
 * The uptime probe (ADR 0008) against the running local host: a gateway that answers passes every check and files
 * nothing; a port nothing answers, and a front door that answers 502 as API Gateway does when a function cannot
 * start, fail every check, the failures land in the usage table's minute counters, and the usage report turns
 * them into downtime although no call was settled.
 */

const MIN = 60_000;
/** Three whole minutes, ten minutes ago: past minutes, as a schedule's ticks are by the time a report reads them. */
const T = Math.floor(Date.now() / MIN) * MIN - 10 * MIN;
const iso = (ms: number) => new Date(ms).toISOString();

let t: TestStack;
let dynamo: DynamoDBClient;
let refused: string;
let badGateway: Server;
let badGatewayUrl: string;

/** A URL on loopback that nothing listens on (a port taken and given back). */
const deadUrl = async (): Promise<string> => {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}/v1`;
};

/** The probe's items of the usage table for `day`: the `pc<MM>` and `pf<MM>` counters they hold. */
const probeCounters = async (day: string): Promise<Record<string, number>> => {
  const { Items = [] } = await dynamo.send(
    new QueryCommand({
      TableName: t.stack.resources.tables.usage,
      KeyConditionExpression: 'pk = :pk',
      ExpressionAttributeValues: { ':pk': { S: `agg#${day}` } },
    }),
  );
  const counters: Record<string, number> = {};
  for (const item of Items.filter((i) => i.sk?.S?.endsWith('#probe')))
    for (const [name, value] of Object.entries(item))
      if (/^p[cf]\d\d$/.test(name)) counters[`${item.sk?.S}.${name}`] = Number(value.N);
  return counters;
};

beforeAll(async () => {
  t = await startTestStack();
  dynamo = new DynamoDBClient(localClientConfig(t.stack.emulators.dynamodb));
  refused = await deadUrl();
  // What API Gateway answers when the function behind it fails to start.
  badGateway = createServer((_req, res) => {
    res.writeHead(502, { 'content-type': 'application/json' });
    res.end('{"message":"Internal server error"}');
  });
  await new Promise<void>((resolve) => badGateway.listen(0, '127.0.0.1', resolve));
  badGatewayUrl = `http://127.0.0.1:${(badGateway.address() as AddressInfo).port}/v1`;
}, 120_000);

afterAll(async () => {
  badGateway?.close();
  dynamo?.destroy();
  await t?.stop();
});

describe('the uptime probe', () => {
  it('finds the running gateway answering every check, and files nothing', async () => {
    const summary = await t.stack.uptimeProbe({ at: T - 5 * MIN });
    expect(summary).toEqual({ at: iso(T - 5 * MIN), checks: 5, failed: 0, failures: [] });
    expect(await probeCounters(iso(T - 5 * MIN).slice(0, 10))).toEqual({});
  });

  it('fails every check of a platform that answers nothing or answers 502, and files each round in its minute', async () => {
    const silent = await t.stack.uptimeProbe({ at: T, baseUrl: refused });
    expect(silent).toMatchObject({ at: iso(T), checks: 5, failed: 5 });
    expect(new Set(silent.failures.map((f) => f.reason))).toEqual(new Set(['no answer (ECONNREFUSED)']));
    const broken = await t.stack.uptimeProbe({ at: T + MIN, baseUrl: badGatewayUrl });
    expect(broken.failures).toEqual([
      { index: 0, check: 'preflight /chat/completions', reason: 'answered 502, not 204' },
      { index: 1, check: 'preflight /embeddings', reason: 'answered 502, not 204' },
      { index: 2, check: 'preflight /audio/transcriptions', reason: 'answered 502, not 204' },
      { index: 3, check: 'preflight /audio/speech', reason: 'answered 502, not 204' },
      { index: 4, check: 'key lookup', reason: 'answered 502, not 401' },
    ]);
    // A second failing round in the same minute replaces the first's counters (sets, not adds).
    await t.stack.uptimeProbe({ at: T + MIN + 30_000, baseUrl: badGatewayUrl });
    await t.stack.uptimeProbe({ at: T + 2 * MIN, baseUrl: refused });
    await t.stack.uptimeProbe({ at: T + 3 * MIN, baseUrl: refused });

    const counters: Record<string, number> = {};
    for (const day of new Set([T, T + 3 * MIN].map((ms) => iso(ms).slice(0, 10))))
      Object.assign(counters, await probeCounters(day));
    const expected: Record<string, number> = {};
    for (const at of [T, T + MIN, T + 2 * MIN, T + 3 * MIN]) {
      const item = `minutes#${iso(at).slice(11, 13)}#probe`;
      expected[`${item}.pc${iso(at).slice(14, 16)}`] = 5;
      expected[`${item}.pf${iso(at).slice(14, 16)}`] = 0b11111;
    }
    expect(counters).toEqual(expected);
  });

  it('turns those rounds into downtime in the usage report, from the third, though no call was settled', async () => {
    const { report } = await t.stack.usageReport({ time: iso(T + 9 * MIN) });
    expect(report?.incidents).toEqual([
      {
        name: 'Service unreachable: every uptime check failed',
        severity: 'MAJOR',
        status: 'RESOLVED',
        start: iso(T + 2 * MIN),
        end: iso(T + 4 * MIN),
        downtime_minutes: 2,
      },
    ]);
    expect(report?.totals).toMatchObject({ requests: 0, downtime_minutes: 2 });
    expect(report?.error_funnel).toEqual([]);
    expect(report?.recent_faults).toEqual([]);
  });

  it('fails the preflight of a function that cannot start, as every call to it fails', async () => {
    // The chat function with a container that cannot be built (a cold start missing its configuration), behind
    // the local Function URL host.
    // middy's streaming mode reads the runtime's globals when a handler is built (the stack has installed them).
    installLambdaGlobals();
    const { createHandler: createChatHandler } = await import('#functions/chat-completions.ts');
    const cannotStart = createChatHandler(() => {
      throw new Error('Missing required environment variable ACCOUNTS_TABLE');
    });
    const host = createInstanceServer(
      [
        {
          method: 'POST',
          path: '/v1/chat/completions',
          name: 'chat-completions',
          timeoutMs: 10_000,
          handler: cannotStart as unknown as StreamingHandler,
        },
      ],
      NO_SITE,
      () => {},
    );
    await new Promise<void>((resolve) => host.server.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(host.server.address() as AddressInfo).port}/v1`;
      const summary = await t.stack.uptimeProbe({ at: T - 20 * MIN, baseUrl: url });
      const chat = summary.failures.find((f) => f.check === 'preflight /chat/completions');
      expect(chat?.reason).toMatch(/^answered 5\d\d, not 204$/);
      const call = await fetch(`${url}/chat/completions`, { method: 'POST', body: '{}' });
      expect(call.status).toBeGreaterThanOrEqual(500);
    } finally {
      host.server.closeAllConnections();
      await new Promise((resolve) => host.server.close(resolve));
    }
  });
});
