import { BatchWriteItemCommand, DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { marshall } from '@aws-sdk/util-dynamodb';
import { DynamoRegistry } from '#adapters/dynamo-registry.ts';
import type { UsageReport } from '#core/usage-report.ts';
import type { UsageReportEvent } from '#functions/usage-report.ts';
import { localClientConfig } from '#local/emulators.ts';
import type { TestStack } from './stack.ts';

/** GETs `/usage.json` from the stack's site root, as a browser or a monitoring script would. */
export const fetchUsage = async (t: TestStack): Promise<{ response: Response; report: UsageReport }> => {
  const response = await fetch(`${t.stack.url}/usage.json`);
  if (response.status !== 200) throw new Error(`/usage.json answered ${response.status}`);
  return { response, report: (await response.json()) as UsageReport };
};

/**
 * The schedule's tick at `time`, as EventBridge Scheduler delivers it (its default notification): the report it
 * publishes is as of that time (the gateway's clock in these tests is driven by hand). A bare `{ time }` would be an
 * operator's replay, returned and not published.
 */
export const tickAt = (time: number): UsageReportEvent => ({
  source: 'aws.scheduler',
  'detail-type': 'Scheduled Event',
  time: new Date(time).toISOString(),
});

/**
 * Publishes the report (as of `time`) until the settlement consumer has settled `requests` calls, and
 * returns it as served over HTTP.
 */
export const settledReport = async (
  t: TestStack,
  requests: number,
  time?: number,
  timeoutMs = 20_000,
  /** Faults the report must show too: a faulted call's settlement can land after the successful ones. */
  faults = 0,
): Promise<{ response: Response; report: UsageReport }> => {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    await t.stack.usageReport(time === undefined ? {} : tickAt(time));
    const fetched = await fetchUsage(t);
    if (fetched.report.totals.requests >= requests && fetched.report.recent_faults.length >= faults)
      return fetched;
    if (Date.now() > deadline)
      throw new Error(`only ${fetched.report.totals.requests} of ${requests} calls settled`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
};

/**
 * Empties the stack's model registry (an operator's bad deploy), runs `during`, and puts every model and
 * deployment back. The gateway's registry snapshot is refreshed on both sides, so calls in `during` see an
 * empty registry and calls after it see the full one again.
 */
export const withEmptyRegistry = async <T>(t: TestStack, during: () => Promise<T>): Promise<T> => {
  const client = new DynamoDBClient(localClientConfig(t.stack.emulators.dynamodb));
  const table = t.stack.resources.tables.registry;
  const registry = new DynamoRegistry(client, table);
  const { models, deployments } = await registry.load();
  const keys = [
    ...models.map((m) => ({ pk: `model#${m.id}`, sk: 'model' })),
    ...deployments.map((d) => ({ pk: `model#${d.model}`, sk: `deployment#${d.id}` })),
  ];
  try {
    for (let i = 0; i < keys.length; i += 25) {
      await client.send(
        new BatchWriteItemCommand({
          RequestItems: {
            [table]: keys.slice(i, i + 25).map((key) => ({ DeleteRequest: { Key: marshall(key) } })),
          },
        }),
      );
    }
    await refreshUntil(t, (size) => size === 0);
    return await during();
  } finally {
    await registry.put(models, deployments);
    await refreshUntil(t, (size) => size === models.length);
    client.destroy();
  }
};

/** A refresh already in flight may have read the table before it changed: refresh until it shows. */
const refreshUntil = async (t: TestStack, done: (models: number) => boolean): Promise<void> => {
  for (let i = 0; i < 20; i++) {
    if (done((await t.stack.container.registry.refresh()).models.size)) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error('the registry snapshot did not change');
};
