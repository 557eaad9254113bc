/**
 * API key format: `svc_live_` followed by a base62 secret. Only the SHA-256 of the whole key is
 * stored; the first characters form a public prefix so people can tell keys apart in listings.
 */

export const KEY_PREFIX = 'svc_live_';
/** Length of generated secrets: 40 base62 characters ≈ 238 bits. */
export const SECRET_LENGTH = 40;
/** Characters of the secret kept in the public prefix, at most. */
export const PUBLIC_PREFIX_CHARS = 8;
/**
 * Characters of the secret a public prefix always leaves out: 14 base62 characters ≈ 83 bits. Whoever can read a
 * key item sees its prefix beside the hash; a 16-character operator key showing 8 would leave ~48 bits to guess.
 */
export const HIDDEN_SECRET_CHARS = 14;

// Generated keys have 40 characters; shorter operator-chosen keys (e.g. DEMO_API_KEY) must still have 16.
const KEY_PATTERN = /^svc_live_[A-Za-z0-9]{16,128}$/;

/** The key from an `Authorization` header value, or null when it is missing or not a bearer key. */
export const bearerKey = (authorization: string | undefined): string | null => {
  if (!authorization) return null;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  return match?.[1] ?? null;
};

export const isWellFormedKey = (key: string): boolean => KEY_PATTERN.test(key);

/** `svc_live_` and the first characters of the secret: 8 of a generated key, fewer of a short operator key. */
export const publicPrefix = (key: string): string => {
  const secretChars = key.length - KEY_PREFIX.length;
  const shown = Math.max(0, Math.min(PUBLIC_PREFIX_CHARS, secretChars - HIDDEN_SECRET_CHARS));
  return key.slice(0, KEY_PREFIX.length + shown);
};
