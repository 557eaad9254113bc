/**
 * `settlements replay FILE`: settles the records the gateway could not send to the queue (it logs each whole, as
 * "settlement record not sent"). Replaying is safe however often it is done: a record settles once (its id).
 */
import { settlementRecordsOf } from '#adapters/settlement-codec.ts';
import type { SettleOutcome } from '#core/accounting.ts';
import type { SettlementRecord } from '#core/settlement.ts';

/** How many unreadable lines a summary names: enough to find the pattern, not a file's worth. */
const LINES_NAMED = 5;

export interface ReplaySummary {
  settled: number;
  duplicates: number;
  /** Lines that hold something other than settlement records: not JSON, or a value of no record's shape. */
  invalid: number;
  /** The first LINES_NAMED lines (1-based) holding such an entry. */
  invalidLines: number[];
  /** `<record id>: <why>` for each record not settled (replaying the file again retries them). */
  failed: string[];
}

export interface ReplayPorts {
  /** Whether the account exists. */
  readonly accountExists: (accountId: string) => Promise<boolean>;
  readonly settle: (record: SettlementRecord) => Promise<SettleOutcome>;
}

/**
 * The settlement records in a replay file, one JSON value per line: the gateway's "settlement record not sent" log
 * line (its `record`), a record, or a queue message body (a record or an array of them). Blank lines are skipped;
 * a line holding anything else is invalid (an array's valid records are still read).
 */
export const readReplayFile = (
  text: string,
): { records: { record: SettlementRecord; line: number }[]; invalid: number; invalidLines: number[] } => {
  const records: { record: SettlementRecord; line: number }[] = [];
  let invalid = 0;
  const invalidLines: number[] = [];
  text.split('\n').forEach((content, index) => {
    if (content.trim() === '') return;
    const line = index + 1;
    let value: unknown;
    try {
      value = JSON.parse(content);
    } catch {
      value = undefined;
    }
    const logged = (value as { record?: unknown } | null | undefined)?.record;
    const parsed = value === undefined ? { records: [], invalid: 1 } : settlementRecordsOf(logged ?? value);
    for (const record of parsed.records) records.push({ record, line });
    if (parsed.invalid === 0) return;
    invalid++;
    if (invalidLines.length < LINES_NAMED) invalidLines.push(line);
  });
  return { records, invalid, invalidLines };
};

/**
 * Settles every record of a replay file whose account exists. A record naming no account is failed, not settled:
 * settlement answers a wallet it cannot charge by recording the cost as owed (the consumer must never drop a real
 * charge), which for an account id that names nothing — a typo, a record edited by hand — would make up a wallet.
 * Records are settled in file order; one failing does not stop the others.
 */
export const replaySettlements = async (text: string, ports: ReplayPorts): Promise<ReplaySummary> => {
  const { records, invalid, invalidLines } = readReplayFile(text);
  const summary: ReplaySummary = { settled: 0, duplicates: 0, invalid, invalidLines, failed: [] };
  const known = new Map<string, Promise<boolean>>();
  const exists = (accountId: string) => {
    let answer = known.get(accountId);
    if (!answer) {
      answer = ports.accountExists(accountId);
      known.set(accountId, answer);
    }
    return answer;
  };
  for (const { record, line } of records) {
    try {
      if (record.accountId !== null && !(await exists(record.accountId))) {
        summary.failed.push(`${record.id}: no account ${record.accountId} (line ${line})`);
        continue;
      }
      if ((await ports.settle(record)) === 'duplicate') summary.duplicates++;
      else summary.settled++;
    } catch (error) {
      summary.failed.push(
        `${record.id}: ${error instanceof Error ? error.message : String(error)} (line ${line})`,
      );
    }
  }
  return summary;
};

/**
 * Why a replay did not do all the file asked, for stderr (the run then exits non-zero), or null when it did. A file
 * read as nothing — a text log export, whose lines carry a time before the JSON — must not pass as "nothing to do".
 */
export const replayProblem = (summary: ReplaySummary): string | null => {
  const problems: string[] = [];
  if (summary.invalid > 0) {
    const more = summary.invalid > summary.invalidLines.length ? ', …' : '';
    problems.push(
      `${plural(summary.invalid, 'line', 'lines')} unreadable ` +
        `(${summary.invalid === 1 ? 'line' : 'lines'} ${summary.invalidLines.join(', ')}${more}): ` +
        'each line must be one JSON value holding a settlement record — a "settlement record not sent" log line, a ' +
        'record or a queue message body — with nothing before it (a text export of the logs puts the time first: ' +
        'export them as JSON)',
    );
  }
  if (summary.failed.length > 0)
    problems.push(`${plural(summary.failed.length, 'record', 'records')} not settled (see "failed")`);
  if (problems.length === 0) return null;
  return `${problems.join('\n')}\nWhat was settled stands; replaying the file again settles only the rest.`;
};

const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;
