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

export const parseSettlementRecord = (body: string): SettlementRecord =>
  settlementRecordSchema.parse(JSON.parse(body)) as SettlementRecord;
