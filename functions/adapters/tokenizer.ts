import { clearMergeCache, countTokens, DEFAULT_MERGE_CACHE_SIZE, setMergeCacheSize } from 'gpt-tokenizer';
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

/** `end`, or one before it when a cut there would split a surrogate pair (each half counts as an unknown byte). */
const pairSafe = (text: string, end: number): number => {
  const last = text.charCodeAt(end - 1);
  return end < text.length && last >= 0xd800 && last <= 0xdbff ? end - 1 : end;
};

/** A long run's slices, in order. */
function* slicesOf(run: string): Generator<string> {
  for (let at = 0; at < run.length; ) {
    const end = pairSafe(run, Math.min(at + SLICE, run.length));
    yield run.slice(at, end);
    at = end;
  }
}

/** What the BPE is handed for `text`, in order: the text between long runs whole, each long run in slices. */
function* piecesOf(text: string): Generator<string> {
  if (text.length <= SLICE) {
    if (text.length > 0) yield text;
    return;
  }
  let from = 0;
  for (const match of text.matchAll(LONG_RUN)) {
    if (match.index > from) yield text.slice(from, match.index);
    yield* slicesOf(match[0]);
    from = match.index + match[0].length;
  }
  if (from < text.length) yield from === 0 ? text : text.slice(from);
}

/**
 * gpt-tokenizer keeps the merges of recent pre-tokens in a 100,000-entry map and evicts its oldest entry with
 * `keys().next()`, which in V8 walks past every entry deleted since the map was last compacted: once the map is
 * full, a text of many distinct words costs time quadratic in its length (2 MB of random 7-letter words took
 * 5.4 s, 4 MB 18 s, before admission and from any key). A piece this long is counted with the map off —
 * linear, about 0.5 µs a character — and the map starts again empty. Shorter pieces keep it: ordinary prompts
 * repeat their words, and counting them is about 30 % faster with it.
 */
const UNCACHED_FROM = 32_768;

/**
 * The map's keys are pre-tokens cut from the text by a regex, and in V8 a cut of 13 characters or more keeps the
 * whole string it was cut from alive: each word not seen before kept its prompt — up to a 4 MiB message — for as long
 * as the map held it, 100,000 entries in all, whatever their size (a client of any key, even an empty wallet's, could
 * send prompts made to fill it). So the map starts again empty once this many characters have been counted with it:
 * what it keeps alive is then about this much text, and the prompt of the one call counted across a reset.
 */
const CACHED_CHARS_BUDGET = 2_000_000;
let cachedChars = 0;

const countPiece = (piece: string): number => {
  if (piece.length < UNCACHED_FROM) {
    cachedChars += piece.length;
    if (cachedChars > CACHED_CHARS_BUDGET) {
      clearMergeCache();
      cachedChars = piece.length;
    }
    return countTokens(piece, PLAIN_TEXT);
  }
  setMergeCacheSize(0);
  try {
    return countTokens(piece, PLAIN_TEXT);
  } finally {
    setMergeCacheSize(DEFAULT_MERGE_CACHE_SIZE);
    cachedChars = 0;
  }
};

const count = (text: string): number => {
  let tokens = 0;
  for (const piece of piecesOf(text)) tokens += countPiece(piece);
  return tokens;
};

/** Longest piece a size check hands the BPE at once; text between long runs is cut (at whitespace) to it. */
const CHUNK = 16_384;
/**
 * How many tokens more the two sides of a cut may count than the text they were cut from: a cut changes the
 * pre-tokens on either side of it, a token or two each. Generous, so that a sum less this per cut is still below
 * the real count. (Only cuts inside a piece count: the pieces themselves are what `count` sums.)
 */
const CUT_SLACK = 8;

/** `piece` in parts of at most CHUNK characters, cut after a whitespace where one is near. */
function* partsOf(piece: string): Generator<string> {
  for (let at = 0; at < piece.length; ) {
    let end = Math.min(at + CHUNK, piece.length);
    if (end < piece.length) {
      let cut = end;
      while (cut > end - SLICE && !/\s/.test(piece[cut - 1] as string)) cut--;
      end = cut > end - SLICE ? cut : pairSafe(piece, end);
    }
    yield piece.slice(at, end);
    at = end;
  }
}

const countUpTo = (text: string, limit: number): number => {
  if (text.length <= 2 * CHUNK) return count(text);
  // What `count` would sum, piece by piece, until it is surely past the limit: long pieces are cut, and each cut
  // may add up to CUT_SLACK, which the running figure leaves out so that it never exceeds the real count.
  let tokens = 0;
  let cuts = 0;
  for (const piece of piecesOf(text)) {
    let parts = 0;
    for (const part of partsOf(piece)) {
      tokens += countPiece(part);
      if (parts++ > 0) cuts++;
      if (tokens - cuts * CUT_SLACK > limit) return tokens - cuts * CUT_SLACK;
    }
  }
  // Within the limit (or close to it): exact when nothing was cut, else counted again whole.
  return cuts === 0 ? tokens : count(text);
};

/**
 * The o200k_base BPE tokenizer (pure JS, loaded once per cold start). Upstream models tokenize
 * differently; these counts size estimates (holds, limit charges, context checks), never the bill
 * when the upstream reports usage.
 */
export const o200kTokenCounter: TokenCounter = { count, countUpTo };
