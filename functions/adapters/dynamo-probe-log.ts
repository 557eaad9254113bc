import { type DynamoDBClient, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import type { ProbeLog } from '#core/uptime-probe.ts';
import type { AggregateIncrement } from '#core/usage-aggregates.ts';
// The probe's items live as long as the settlement consumer's aggregates: the report reads 30 days.
import { USAGE_TTL_SECONDS } from './dynamo-accounting.ts';

/**
 * Files the uptime probe's failed checks beside the settled calls' minute counters: `agg#<day>` /
 * `minutes#<HH>#probe`, an item of the probe's own (the settlement consumer's shards are `#0`–`#7`; the report sums
 * whatever follows the subject). The counters are *set*, not added to: a round is its minute's one measurement (a
 * second round in the minute that fails replaces the first's). The report adds up a subject's items, which is right
 * for `pf`'s bits only because this is the one item that carries them.
 */
export class DynamoProbeLog implements ProbeLog {
  readonly #client: DynamoDBClient;
  readonly #table: string;

  constructor(client: DynamoDBClient, table: string) {
    this.#client = client;
    this.#table = table;
  }

  async recordFailures(increment: AggregateIncrement): Promise<void> {
    const entries = Object.entries(increment.counters);
    const expires = Math.floor(Date.parse(`${increment.day}T00:00:00Z`) / 1000) + USAGE_TTL_SECONDS;
    await this.#client.send(
      new UpdateItemCommand({
        TableName: this.#table,
        Key: { pk: { S: `agg#${increment.day}` }, sk: { S: `${increment.subject}#probe` } },
        UpdateExpression: `SET ${entries.map((_, i) => `#c${i} = :c${i}`).join(', ')}, #ttl = if_not_exists(#ttl, :ttl)`,
        ExpressionAttributeNames: {
          ...Object.fromEntries(entries.map(([name], i) => [`#c${i}`, name])),
          '#ttl': 'ttl',
        },
        ExpressionAttributeValues: {
          ...Object.fromEntries(entries.map(([, value], i) => [`:c${i}`, { N: String(value) }])),
          ':ttl': { N: String(expires) },
        },
      }),
    );
  }
}
