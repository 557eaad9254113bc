import { type AttributeValue, type DynamoDBClient, paginateQuery } from '@aws-sdk/client-dynamodb';
import type { FaultEntry } from '#core/usage-aggregates.ts';
import type { AggregateRow, UsageSource } from '#core/usage-report.ts';

/** Days queried at once: a 30-day report is 30 partitions; a few in flight keep it quick without a burst. */
const PARALLEL_DAYS = 6;

const numbersOf = (item: Record<string, AttributeValue>): Record<string, number> => {
  const counters: Record<string, number> = {};
  for (const [name, value] of Object.entries(item)) {
    if (name === 'ttl' || value.N === undefined) continue;
    counters[name] = Number(value.N);
  }
  return counters;
};

/**
 * Reads the usage table as DynamoAccounting.settle writes it: aggregate counters under `agg#<day>` (sort key
 * `<subject>#<shard>`, summed over shards here) and faults under `faults#<day>` (sort key
 * `<epoch ms, 13 digits>#<requestId>`, so a day's faults come newest first when read backwards).
 */
export class DynamoUsage implements UsageSource {
  readonly #client: DynamoDBClient;
  readonly #table: string;

  constructor(client: DynamoDBClient, table: string) {
    this.#client = client;
    this.#table = table;
  }

  async rows(days: readonly string[]): Promise<AggregateRow[]> {
    const rows: AggregateRow[] = [];
    for (let i = 0; i < days.length; i += PARALLEL_DAYS) {
      const batch = await Promise.all(days.slice(i, i + PARALLEL_DAYS).map((day) => this.#day(day)));
      for (const dayRows of batch) rows.push(...dayRows);
    }
    return rows;
  }

  async minuteRows(day: string, hour: number): Promise<AggregateRow[]> {
    // The hour's shards only (`minutes#<HH>#<shard>`), not the rest of the day's partition.
    return this.#day(day, `minutes#${String(hour).padStart(2, '0')}#`);
  }

  /** A day's rows, or those whose sort key starts with `prefix`. */
  async #day(day: string, prefix?: string): Promise<AggregateRow[]> {
    const subjects = new Map<string, Record<string, number>>();
    const pages = paginateQuery(
      { client: this.#client },
      {
        TableName: this.#table,
        KeyConditionExpression: prefix === undefined ? 'pk = :pk' : 'pk = :pk AND begins_with(sk, :prefix)',
        ExpressionAttributeValues: {
          ':pk': { S: `agg#${day}` },
          ...(prefix === undefined ? {} : { ':prefix': { S: prefix } }),
        },
      },
    );
    for await (const page of pages) {
      for (const item of page.Items ?? []) {
        const sk = item.sk?.S ?? '';
        const subject = sk.slice(0, sk.lastIndexOf('#'));
        const { pk: _pk, sk: _sk, ...rest } = item;
        const sum = subjects.get(subject) ?? {};
        for (const [name, value] of Object.entries(numbersOf(rest))) sum[name] = (sum[name] ?? 0) + value;
        subjects.set(subject, sum);
      }
    }
    return [...subjects].map(([subject, counters]) => ({ day, subject, counters }));
  }

  async recentFaults(days: readonly string[], limit: number, untilMs: number): Promise<FaultEntry[]> {
    const faults: FaultEntry[] = [];
    for (const day of days) {
      // Filtered in the query, paging on: a Limit counts the items read before the filter, so entries that are
      // not listed (caller errors logged by older code, faults after the report's moment) would otherwise take
      // the places of real ones.
      const pages = paginateQuery(
        { client: this.#client, pageSize: FAULT_PAGE },
        {
          TableName: this.#table,
          KeyConditionExpression: 'pk = :pk',
          FilterExpression: '#group <> :caller AND #at <= :until',
          ExpressionAttributeNames: { '#group': 'group', '#at': 'at' },
          ExpressionAttributeValues: {
            ':pk': { S: `faults#${day}` },
            ':caller': { S: 'agent-error' },
            ':until': { N: String(untilMs) },
          },
          ScanIndexForward: false,
        },
      );
      for await (const page of pages) {
        for (const item of page.Items ?? []) {
          if (faults.length >= limit) return faults;
          const sk = item.sk?.S ?? '';
          faults.push({
            at: Number(item.at?.N ?? 0),
            day,
            requestId: sk.slice(sk.indexOf('#') + 1),
            group: item.group?.S ?? 'platform',
            status: Number(item.status?.N ?? 500),
            // Never empty: the published schema requires a detail, and one bad item must not block the report.
            detail: item.detail?.S || 'fault',
          });
        }
        if (faults.length >= limit) return faults;
      }
    }
    return faults;
  }
}

/** Fault items read per query page. */
const FAULT_PAGE = 100;
