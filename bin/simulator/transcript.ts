/**
 * Deterministic transcripts: the words "heard" in an audio file, timed evenly over its duration and
 * grouped into Whisper-style segments.
 *
 * The words come from the completion vocabulary (see text.ts), seeded by a hash of the file's bytes, so
 * the same upload always transcribes to the same text and a longer recording yields more words
 * ({@link WORDS_PER_SECOND}, a typical speaking rate).
 */
import { encode } from 'gpt-tokenizer';
import { generateWords, mulberry32 } from '#sim/text.ts';

/** Words per second of audio. */
export const WORDS_PER_SECOND = 2.5;
/** Most words in one segment. */
export const WORDS_PER_SEGMENT = 12;
/** Whisper decodes in 30-second windows; a segment's `seek` is its window's offset in 10 ms frames. */
const WINDOW_SECONDS = 30;
const FRAMES_PER_SECOND = 100;

/** A word with its timing (the `words` of a `verbose_json` transcription). */
export interface TranscriptWord {
  word: string;
  start: number;
  end: number;
}

/** A segment with every field of OpenAI's `TranscriptionSegment`. */
export interface TranscriptSegment {
  id: number;
  seek: number;
  start: number;
  end: number;
  /** The segment's words with a leading space, as Whisper writes them. */
  text: string;
  /** o200k token ids of `text`. */
  tokens: number[];
  temperature: number;
  avg_logprob: number;
  compression_ratio: number;
  no_speech_prob: number;
}

/** A whole transcript. */
export interface Transcript {
  /** The words joined by spaces, capitalised, with a final period. */
  text: string;
  words: TranscriptWord[];
  segments: TranscriptSegment[];
}

/** Words in a recording of `durationSeconds`: at least one, however short the audio. */
export function transcriptWordCount(durationSeconds: number): number {
  return Math.max(1, Math.round(durationSeconds * WORDS_PER_SECOND));
}

/**
 * Builds the transcript of a recording whose bytes hash to `hash`. Words are spread evenly over the
 * duration; segments are consecutive groups of up to {@link WORDS_PER_SEGMENT} words, and the segment
 * texts concatenate (after trimming) to `text`.
 */
export function buildTranscript(hash: number, durationSeconds: number, temperature: number): Transcript {
  const count = transcriptWordCount(durationSeconds);
  const spoken = generateWords(hash, count);
  const first = spoken[0] as string;
  spoken[0] = first.charAt(0).toUpperCase() + first.slice(1);
  const step = durationSeconds / count;
  const words = spoken.map((word, i) => ({
    word,
    start: round2(i * step),
    end: i === count - 1 ? round2(durationSeconds) : round2((i + 1) * step),
  }));

  // Segment statistics are noise, but deterministic noise in Whisper's usual ranges.
  const random = mulberry32(hash ^ 0x5eed);
  const segments: TranscriptSegment[] = [];
  for (let from = 0; from < count; from += WORDS_PER_SEGMENT) {
    const group = words.slice(from, from + WORDS_PER_SEGMENT);
    const last = from + group.length === count;
    const text = ` ${group.map((w) => w.word).join(' ')}${last ? '.' : ''}`;
    const start = (group[0] as TranscriptWord).start;
    segments.push({
      id: segments.length,
      seek: Math.floor(start / WINDOW_SECONDS) * WINDOW_SECONDS * FRAMES_PER_SECOND,
      start,
      end: (group[group.length - 1] as TranscriptWord).end,
      text,
      tokens: encode(text),
      temperature,
      avg_logprob: round6(-0.15 - random() * 0.2),
      compression_ratio: round6(1.1 + random() * 0.5),
      no_speech_prob: round6(0.001 + random() * 0.05),
    });
  }
  return { text: `${spoken.join(' ')}.`, words, segments };
}

function round2(value: number): number {
  return Math.round(value * 100) / 100;
}

function round6(value: number): number {
  return Math.round(value * 1e6) / 1e6;
}
