import type { TokenCounter } from './ports.ts';

/**
 * A token counter that remembers the counts of texts it has seen, within a budget of characters; when it is full,
 * the texts not used since they were last passed over go first (second chance, "CLOCK": close to least recently
 * used, without a write to the map on every hit).
 *
 * Why: the prompt estimate runs the BPE over every message of every call (≈0.07 ms per 1,000 characters here; a
 * 16,000-character prompt takes ~1 ms, and it holds the instance's thread). Much of what callers send has been
 * counted before: a multi-turn chat sends its whole history again with each turn, and an application sends the
 * same system prompt with every call. A hit costs a hash lookup of the text instead.
 *
 * A hit only flags its entry. Keeping exact least-recently-used order meant deleting and re-inserting the text on
 * every hit, and V8 reallocates a map's table as deletions pile up (a small map's at every delete): a long-lived
 * map's new tables outlive young collections. In one sampling heap profile of the gateway (16 clients on
 * loopback) they were a third of the bytes it promoted to the old generation, which major collections then pause
 * for.
 *
 * The texts are kept as the keys (a hash of them would cost as much as the lookup it saves); they stay in this
 * instance's memory only, and no more than `budgetChars` of them (plus a per-entry allowance for the map's own
 * memory). A text longer than the budget is counted and not kept.
 */
export const cachedTokenCounter = (counter: TokenCounter, budgetChars: number): TokenCounter => {
  // Insertion order is the clock's order: the first key is the next one passed over.
  const counts = new Map<string, Entry>();
  let used = 0;

  const remember = (text: string, tokens: number): void => {
    const cost = text.length + ENTRY_OVERHEAD_CHARS;
    if (cost > budgetChars) return;
    // Room first, so that the newcomer is not itself passed over. Each pass clears a flag or frees an entry, so
    // this ends within two rounds of the map.
    while (used + cost > budgetChars) {
      const [oldest, entry] = counts.entries().next().value as [string, Entry];
      counts.delete(oldest);
      if (entry.used) {
        entry.used = false;
        counts.set(oldest, entry);
      } else used -= oldest.length + ENTRY_OVERHEAD_CHARS;
    }
    counts.set(text, { tokens, used: false });
    used += cost;
  };

  /** The remembered count of `text`, flagged as used; undefined when it is not remembered. */
  const recall = (text: string): number | undefined => {
    const entry = counts.get(text);
    if (entry === undefined) return undefined;
    entry.used = true;
    return entry.tokens;
  };

  return {
    count(text) {
      const known = recall(text);
      if (known !== undefined) return known;
      const tokens = counter.count(text);
      remember(text, tokens);
      return tokens;
    },
    countUpTo(text, limit) {
      const known = recall(text);
      if (known !== undefined) return known;
      const tokens = counter.countUpTo(text, limit);
      // Within the limit the figure is the exact count; beyond it, only a bound, which `count` must not return.
      if (tokens <= limit) remember(text, tokens);
      return tokens;
    },
  };
};

interface Entry {
  readonly tokens: number;
  /** Hit since the clock last passed over it. */
  used: boolean;
}

/** What an entry costs beyond its text, in characters: the map's slot, the entry, the string's header. */
const ENTRY_OVERHEAD_CHARS = 64;
