import { z } from 'zod';
import type { SettlementRecord } from '#core/settlement.ts';

/**
 * The settlement record as it travels on the queue. The consumer trusts nothing it reads: a message that
 * does not parse is poison, fails every receive, and ends up on the dead-letter queue for inspection.
 */
const count = z.number().int().nonnegative();

const usage = z.object({
  promptTokens: count,
  completionTokens: count,
  cachedPromptTokens: count,
  reasoningTokens: count,
  audioMs: count.optional(),
  characters: count.optional(),
  source: z.enum(['upstream', 'estimated', 'measured']),
});

const attempt = z.object({
  deployment: z.string(),
  provider: z.string(),
  keyIndex: count,
  outcome: z.string(),
  status: z.number().int().nullable(),
  ms: z.number(),
  detail: z.string().nullable(),
});

export const settlementRecordSchema = z.object({
  v: z.literal(1),
  id: z.string().min(1).max(128),
  requestId: z.string().min(1).max(128),
  endpoint: z.enum(['chat.completions', 'embeddings', 'audio.transcriptions', 'audio.speech']),
  accountId: z.string().min(1).nullable(),
  keyPrefix: z.string().nullable(),
  model: z.string().nullable(),
  deployment: z.string().nullable(),
  provider: z.string().nullable(),
  stream: z.boolean(),
  status: z.number().int(),
  outcome: z.enum([
    'success',
    'client_aborted',
    'stream_interrupted',
    'client_error',
    'unauthenticated',
    'rate_limited',
    'insufficient_balance',
    'overloaded',
    'upstream_error',
    'unavailable',
    'internal_error',
  ]),
  usage: usage.nullable(),
  cost: count,
  admission: z
    .object({
      hold: z.object({ id: z.string().min(1), amount: count }).nullable(),
      estimatedTokens: count,
      tokenEmissionUs: z.object({ tpm: count, tpd: count }),
      tokenTatUs: z.object({ tpm: count, tpd: count }).optional(),
      limitsGen: count.optional(),
    })
    .nullable(),
  fault: z.object({ kind: z.string(), status: z.number().int().nullable(), detail: z.string() }).nullable(),
  attempts: z.array(attempt),
  timings: z.object({
    receivedAt: count,
    firstByteMs: z.number().nullable(),
    totalMs: z.number(),
    admissionMs: z.number().nullable().optional(),
    upstreamMs: z.number().nullable().optional(),
  }),
});

/**
 * A record as a queue message's text. SQS accepts only XML's characters: JSON.stringify escapes the controls and
 * lone surrogates, but not U+FFFE and U+FFFF, which a record can carry from what a caller sent (a 404's message
 * names the model id asked for) — SQS would refuse the whole message, and with it every record sharing it. They
 * are escaped here; parsing reads them back unchanged.
 */
export const encodeSettlementRecord = (record: SettlementRecord): string =>
  JSON.stringify(record).replace(NON_XML_CHARACTERS, escapeCharacter);

const NON_XML_CHARACTERS = /[\uFFFE\uFFFF]/g;
const escapeCharacter = (character: string): string =>
  `\\u${character.charCodeAt(0).toString(16).padStart(4, '0')}`;

/**
 * One queue message carries one record (a JSON object) or several that shared it (a JSON array of them): a
 * sender serving many invocations at once packs what it has into as few messages as it can (SqsSettlementSink),
 * which divides SQS's per-message work — and its bill — by the number of records per message.
 */
export const encodeSettlementMessage = (records: readonly string[]): string =>
  records.length === 1 ? (records[0] as string) : `[${records.join(',')}]`;

/** Length of `encodeSettlementMessage` of records whose encodings add up to `bytes` (for size limits). */
export const settlementMessageLength = (bytes: number, records: number): number =>
  records <= 1 ? bytes : bytes + records + 1;

export interface SettlementMessage {
  readonly records: readonly SettlementRecord[];
  /** Entries of the message that are not settlement records (poison). */
  readonly invalid: number;
}

/**
 * Reads a message's records. A body that is not JSON throws (the whole message is poison); entries that do
 * not parse are counted rather than thrown, so the good records beside them can still be settled.
 */
export const parseSettlementMessage = (body: string): SettlementMessage =>
  settlementRecordsOf(JSON.parse(body));

/** The records of a parsed message body: one record, or an array of them. */
export const settlementRecordsOf = (json: unknown): SettlementMessage => {
  const entries: unknown[] = Array.isArray(json) ? json : [json];
  const records: SettlementRecord[] = [];
  let invalid = entries.length === 0 ? 1 : 0;
  for (const entry of entries) {
    const parsed = settlementRecordSchema.safeParse(entry);
    if (parsed.success) records.push(parsed.data as SettlementRecord);
    else invalid++;
  }
  return { records, invalid };
};
