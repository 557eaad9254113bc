import type { SettlementRecord } from './settlement.ts';

/**
 * Ports: what core needs from the outside world. Adapters in `functions/adapters/` implement them;
 * unit tests pass small fakes. Core never reads the clock, the environment or the network itself.
 */

export interface Clock {
  /** Epoch milliseconds. */
  now(): number;
}

/**
 * Wall-clock alarms, for a call's deadline. Deadlines are set in Date.now() terms, as Lambda's remaining time is,
 * so they keep their own port rather than the Clock, which a test may run at any time it likes.
 */
export interface Alarms {
  /** Epoch milliseconds on the wall clock deadlines are set in. */
  now(): number;
  /** Calls `fire` once `when` (epoch ms) has come; the function returned cancels it. */
  at(when: number, fire: () => void): () => void;
}

/** A uniform random number in [0, 1); injected so routing and tests can be deterministic. */
export type Random = () => number;

/** Writes an operator's warning (a log line); core names what happened, never request data. */
export type Warn = (message: string, fields: Readonly<Record<string, unknown>>) => void;

/** Waits; injected so retry backoffs cost nothing in tests. */
export type Sleep = (ms: number) => Promise<void>;

/** Counts tokens of a text with a real tokenizer; used for estimates, never for billing upstream usage. */
export interface TokenCounter {
  count(text: string): number;
  /**
   * `count(text)` when that is at most `limit`; otherwise some number above `limit`, found without counting the
   * whole text — a size check on a long text costs what the limit allows, not what the text holds.
   */
  countUpTo(text: string, limit: number): number;
}

export interface ApiKeyRecord {
  readonly accountId: string;
  /** The short public part, e.g. `svc_live_Ab12Cd34`, safe to show and log. */
  readonly prefix: string;
  readonly revoked: boolean;
}

export interface KeyStore {
  /** Looks a key up by the SHA-256 hex digest of the whole key string. */
  findByHash(hash: string): Promise<ApiKeyRecord | null>;
}

/** Where settlement records go once a response has ended (SQS in both shapes of the service). */
export interface SettlementSink {
  send(record: SettlementRecord): Promise<void>;
}

/** What the gateway measured about an uploaded audio file. */
export interface AudioInfo {
  /** One of `TRANSCRIPTION_INPUT_FORMATS` (core/audio.ts). */
  readonly format: string;
  readonly durationMs: number;
  /**
   * Whether `durationMs` is a count of the audio decoders play (MPEG, FLAC and AAC frames, WAV sample bytes) rather
   * than what the file claims (Ogg granules, WebM timestamps, a header): a provider that reports more than such a
   * count is wrong, not hearing more audio (billedAudioMs).
   */
  readonly counted: boolean;
}

/**
 * Reads an audio file's format and duration from its own bytes (a real metadata parser), so transcription is
 * billed on what was uploaded. Throws `InvalidRequestError` for unsupported or unreadable audio.
 */
export interface AudioProbe {
  probe(bytes: Uint8Array): Promise<AudioInfo>;
}
