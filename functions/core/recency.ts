/**
 * Sets `key` as the most recently used entry of `map`, first forgetting the least recently used one when `map`
 * already holds `max` other entries. Maps iterate in insertion order, so re-inserting a key on every use keeps
 * the least recently used first. For the per-instance memories a long-lived instance must keep bounded.
 */
export const setMostRecent = <K, V>(map: Map<K, V>, key: K, value: V, max: number): void => {
  map.delete(key);
  if (map.size >= max) {
    const oldest = map.keys().next();
    if (!oldest.done) map.delete(oldest.value);
  }
  map.set(key, value);
};
