/**
 * Deterministic completion text.
 *
 * Every word in {@link VOCABULARY} is a single o200k_base token both on its own and with a leading space,
 * and the o200k pre-tokenizer splits space-separated lowercase words into separate pieces. A completion
 * made of N vocabulary words joined by single spaces is therefore exactly N tokens, so a gateway relaying
 * the text can count tokens exactly and compare them with the reported usage.
 */

// biome-ignore format: a compact word list reads better than one word per line
/** 256 common lowercase English words, each exactly one o200k token with and without a leading space. */
export const VOCABULARY: readonly string[] = Object.freeze([
  'the', 'of', 'and', 'to', 'in', 'is', 'it', 'you', 'that', 'he', 'was', 'for', 'on', 'are', 'with', 'as',
  'his', 'they', 'be', 'at', 'one', 'have', 'this', 'from', 'or', 'had', 'by', 'not', 'word', 'but',
  'what', 'some', 'we', 'can', 'out', 'other', 'were', 'all', 'there', 'when', 'up', 'use', 'your', 'how',
  'said', 'an', 'each', 'she', 'which', 'do', 'their', 'time', 'if', 'will', 'way', 'about', 'many',
  'then', 'them', 'write', 'would', 'like', 'so', 'these', 'her', 'long', 'make', 'thing', 'see', 'him',
  'two', 'has', 'look', 'more', 'day', 'could', 'go', 'come', 'did', 'number', 'sound', 'no', 'most',
  'people', 'my', 'over', 'know', 'water', 'than', 'call', 'first', 'who', 'may', 'down', 'side', 'been',
  'now', 'find', 'any', 'new', 'work', 'part', 'take', 'get', 'place', 'made', 'live', 'where', 'after',
  'back', 'little', 'only', 'round', 'man', 'year', 'came', 'show', 'every', 'good', 'me', 'give', 'our',
  'under', 'name', 'very', 'through', 'just', 'form', 'sentence', 'great', 'think', 'say', 'help', 'low',
  'line', 'turn', 'cause', 'much', 'mean', 'before', 'move', 'right', 'boy', 'old', 'too', 'same', 'tell',
  'does', 'set', 'three', 'want', 'air', 'well', 'also', 'play', 'small', 'end', 'put', 'home', 'read',
  'hand', 'large', 'add', 'even', 'land', 'here', 'must', 'big', 'high', 'such', 'follow', 'act', 'why',
  'ask', 'men', 'change', 'went', 'light', 'kind', 'off', 'need', 'house', 'picture', 'try', 'us', 'again',
  'animal', 'point', 'mother', 'world', 'near', 'build', 'earth', 'father', 'head', 'stand', 'own', 'page',
  'should', 'country', 'found', 'answer', 'school', 'grow', 'study', 'still', 'learn', 'plant', 'cover',
  'food', 'sun', 'four', 'between', 'state', 'keep', 'eye', 'never', 'last', 'let', 'thought', 'city',
  'tree', 'cross', 'farm', 'hard', 'start', 'might', 'story', 'far', 'sea', 'draw', 'left', 'late', 'run',
  'while', 'press', 'close', 'night', 'real', 'life', 'few', 'north', 'open', 'next', 'white', 'children',
  'begin', 'got', 'walk', 'example', 'paper', 'group', 'always', 'music', 'those', 'both',
]);

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

/**
 * 32-bit FNV-1a over the UTF-16 code units of `text`. Pass a previous result as `state` to keep hashing,
 * which lets callers hash a long shared prefix once and extend it per choice.
 */
export function fnv1a(text: string, state: number = FNV_OFFSET): number {
  let hash = state;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, FNV_PRIME);
  }
  return hash >>> 0;
}

/**
 * 32-bit FNV-1a over raw bytes (e.g. an uploaded audio file). One multiply per byte keeps a 25 MB upload
 * well under 100 ms, and the result is stable for identical bytes whatever their file name.
 */
export function fnv1aBytes(bytes: Uint8Array, state: number = FNV_OFFSET): number {
  let hash = state;
  for (let i = 0; i < bytes.length; i++) {
    hash ^= bytes[i] as number;
    hash = Math.imul(hash, FNV_PRIME);
  }
  return hash >>> 0;
}

/** mulberry32: a tiny, fast, seedable PRNG returning floats in [0, 1). */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Natural completion length for a given seed hash: 8 to 31 words. */
export function naturalWordCount(hash: number): number {
  return 8 + (hash % 24);
}

/**
 * Returns `count` vocabulary words drawn from a PRNG seeded with `hash`. The same hash always yields the
 * same sequence, and a shorter count yields a prefix of a longer one (so `max_tokens` truncates cleanly).
 */
export function generateWords(hash: number, count: number): string[] {
  const random = mulberry32(hash);
  const words = new Array<string>(count);
  for (let i = 0; i < count; i++) {
    // The vocabulary has 256 entries, so the index is always in range.
    words[i] = VOCABULARY[(random() * VOCABULARY.length) | 0] as string;
  }
  return words;
}
