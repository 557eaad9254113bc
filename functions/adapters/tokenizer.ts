import { countTokens } from 'gpt-tokenizer';
import type { TokenCounter } from '#core/ports.ts';

/** User text may contain special-token spellings (`<|endoftext|>`); they count as plain text, never throw. */
const PLAIN_TEXT = { disallowedSpecial: new Set<string>() };

/**
 * BPE merges within one pre-token (a run of letters, of punctuation, …) cost time quadratic in its length:
 * 40,000 letters without a space took 0.45 s, 200,000 about 10 s — one request from any key, even an empty
 * wallet's, since the estimate comes before admission, blocking its instance. Runs of non-space characters (or
 * of whitespace) longer than this are counted in slices of this length: linear time, and at most one token more per slice
 * than the whole run would get (a slice boundary splits at most one token). Real text has no words this long.
 */
const SLICE = 256;
// Whitespace runs too: 80,000 tabs and spaces took 19 s.
const LONG_RUN = new RegExp(`\\S{${SLICE + 1},}|\\s{${SLICE + 1},}`, 'g');

const countSlices = (run: string): number => {
  let tokens = 0;
  for (let at = 0; at < run.length; ) {
    let end = Math.min(at + SLICE, run.length);
    // Never split a surrogate pair: the halves would each count as an unknown byte sequence.
    const last = run.charCodeAt(end - 1);
    if (end < run.length && last >= 0xd800 && last <= 0xdbff) end--;
    tokens += countTokens(run.slice(at, end), PLAIN_TEXT);
    at = end;
  }
  return tokens;
};

const count = (text: string): number => {
  if (text.length === 0) return 0;
  if (text.length <= SLICE) return countTokens(text, PLAIN_TEXT);
  let tokens = 0;
  let from = 0;
  for (const match of text.matchAll(LONG_RUN)) {
    if (match.index > from) tokens += countTokens(text.slice(from, match.index), PLAIN_TEXT);
    tokens += countSlices(match[0]);
    from = match.index + match[0].length;
  }
  if (from === 0) return countTokens(text, PLAIN_TEXT);
  if (from < text.length) tokens += countTokens(text.slice(from), PLAIN_TEXT);
  return tokens;
};

/**
 * The o200k_base BPE tokenizer (pure JS, loaded once per cold start). Upstream models tokenize
 * differently; these counts size estimates (holds, limit charges, context checks), never the bill
 * when the upstream reports usage.
 */
/** Texts longer than this are checked against a limit chunk by chunk. */
const CHUNK = 16_384;
/**
 * How many tokens more two chunks may count than the text they were cut from: a cut changes the pre-tokens on
 * either side of it, a token or two each. Generous, so that a sum less this per cut is still below the real count.
 */
const CUT_SLACK = 8;

/** The end of a chunk starting at `at`: after the last whitespace of its final 256 characters, if any. */
const chunkEnd = (text: string, at: number): number => {
  const end = Math.min(at + CHUNK, text.length);
  if (end === text.length) return end;
  for (let i = end; i > end - SLICE; i--) if (/\s/.test(text[i - 1] as string)) return i;
  // No whitespace: never split a surrogate pair.
  const last = text.charCodeAt(end - 1);
  return last >= 0xd800 && last <= 0xdbff ? end - 1 : end;
};

const countUpTo = (text: string, limit: number): number => {
  if (text.length <= 2 * CHUNK) return count(text);
  // Chunk by chunk, until what is counted, less what the cuts may have added, is past the limit.
  let tokens = 0;
  let cuts = 0;
  for (let at = 0; at < text.length; cuts++) {
    const end = chunkEnd(text, at);
    tokens += count(text.slice(at, end));
    at = end;
    if (tokens - cuts * CUT_SLACK > limit) return tokens - cuts * CUT_SLACK;
  }
  // Within the limit (or close to it): the exact count.
  return count(text);
};

export const o200kTokenCounter: TokenCounter = { count, countUpTo };
