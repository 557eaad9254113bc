import { describe, expect, it } from 'vitest';
import { HIDDEN_SECRET_CHARS, KEY_PREFIX, publicPrefix, SECRET_LENGTH } from '#core/api-keys.ts';

const key = (secretChars: number) =>
  KEY_PREFIX + 'aB3'.repeat(Math.ceil(secretChars / 3)).slice(0, secretChars);

describe('publicPrefix', () => {
  it('shows eight characters of a generated key’s secret', () => {
    const generated = key(SECRET_LENGTH);
    expect(publicPrefix(generated)).toBe(generated.slice(0, KEY_PREFIX.length + 8));
  });

  it('shows fewer of a short operator key, so that its prefix never narrows the secret below 83 bits', () => {
    // 16 characters, the shortest key accepted: 2 shown, 14 hidden (8 shown would have left ~48 bits).
    expect(publicPrefix(key(16))).toBe(`${KEY_PREFIX}aB`);
    expect(publicPrefix(key(20))).toBe(`${KEY_PREFIX}aB3aB3`);
    expect(publicPrefix(key(22))).toBe(`${KEY_PREFIX}aB3aB3aB`);
    for (let length = 16; length <= 128; length++) {
      const shown = publicPrefix(key(length)).length - KEY_PREFIX.length;
      expect(length - shown).toBeGreaterThanOrEqual(HIDDEN_SECRET_CHARS);
      expect(shown).toBeLessThanOrEqual(8);
    }
  });
});
