import { describe, expect, it } from 'vitest';
import { Authenticator } from '#core/authenticator.ts';
import { AuthenticationError } from '#core/errors.ts';
import type { ApiKeyRecord } from '#core/ports.ts';
import { manualClock } from '#test/fixtures.ts';

const GOOD = 'svc_live_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA';
const REVOKED = 'svc_live_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB';

const setup = () => {
  const clock = manualClock();
  const lookups: string[] = [];
  const records = new Map<string, ApiKeyRecord>([
    [`h(${GOOD})`, { accountId: 'acct_1', prefix: 'svc_live_AAAAAAAA', revoked: false }],
    [`h(${REVOKED})`, { accountId: 'acct_1', prefix: 'svc_live_BBBBBBBB', revoked: true }],
  ]);
  const auth = new Authenticator({
    keys: {
      findByHash: async (hash) => {
        lookups.push(hash);
        return records.get(hash) ?? null;
      },
    },
    clock,
    hash: (key) => `h(${key})`,
    ttlMs: 5_000,
  });
  return { auth, clock, lookups, records };
};

describe('Authenticator', () => {
  it('resolves a valid bearer key to its account and public prefix', async () => {
    const { auth } = setup();
    expect(await auth.authenticate(`Bearer ${GOOD}`)).toEqual({
      accountId: 'acct_1',
      keyPrefix: 'svc_live_AAAAAAAA',
    });
  });

  it.each([
    ['a missing header', undefined],
    ['a non-bearer scheme', `Basic ${GOOD}`],
    ['a key without the svc_live_ prefix', 'Bearer sk-AAAAAAAAAAAAAAAAAAAAAAAA'],
    ['a key that is too short', 'Bearer svc_live_short'],
  ])('refuses %s with invalid_api_key and never queries the store', async (_, header) => {
    const { auth, lookups } = setup();
    await expect(auth.authenticate(header)).rejects.toMatchObject({ status: 401, code: 'invalid_api_key' });
    expect(lookups).toEqual([]);
  });

  it('says a call without any key has none, as OpenAI does; any key sent is just incorrect', async () => {
    const { auth } = setup();
    for (const header of [undefined, '', '  '])
      await expect(auth.authenticate(header)).rejects.toThrow(/^You didn't provide an API key\./);
    for (const header of ['Bearer', `Basic ${GOOD}`, 'Bearer svc_live_short'])
      await expect(auth.authenticate(header)).rejects.toThrow(/^Incorrect API key provided\./);
  });

  it('refuses unknown and revoked keys alike', async () => {
    const { auth } = setup();
    await expect(auth.authenticate(`Bearer svc_live_${'C'.repeat(40)}`)).rejects.toBeInstanceOf(
      AuthenticationError,
    );
    await expect(auth.authenticate(`Bearer ${REVOKED}`)).rejects.toBeInstanceOf(AuthenticationError);
  });

  it('trusts a lookup for the TTL, refreshing it in the background from half of it', async () => {
    const { auth, clock, lookups, records } = setup();
    await auth.authenticate(`Bearer ${GOOD}`);
    await auth.authenticate(`Bearer ${GOOD}`);
    expect(lookups).toHaveLength(1);
    records.set(`h(${GOOD})`, { accountId: 'acct_1', prefix: 'svc_live_AAAAAAAA', revoked: true });
    clock.advance(2_000);
    await expect(auth.authenticate(`Bearer ${GOOD}`)).resolves.toMatchObject({ accountId: 'acct_1' });
    expect(lookups).toHaveLength(1);
    clock.advance(1_000);
    // Past half the TTL the cached answer still serves this request while a refresh runs…
    await expect(auth.authenticate(`Bearer ${GOOD}`)).resolves.toMatchObject({ accountId: 'acct_1' });
    expect(lookups).toHaveLength(2);
    await new Promise((resolve) => setImmediate(resolve));
    // …and the refreshed answer serves the next one.
    await expect(auth.authenticate(`Bearer ${GOOD}`)).rejects.toBeInstanceOf(AuthenticationError);
  });

  it('never serves an answer past the TTL, however long the key went unused: a revocation lands within it', async () => {
    const { auth, clock, lookups, records } = setup();
    await auth.authenticate(`Bearer ${GOOD}`);
    records.set(`h(${GOOD})`, { accountId: 'acct_1', prefix: 'svc_live_AAAAAAAA', revoked: true });
    clock.advance(5_001);
    await expect(auth.authenticate(`Bearer ${GOOD}`)).rejects.toBeInstanceOf(AuthenticationError);
    expect(lookups).toHaveLength(2);
  });

  it('shares one store read among concurrent lookups of a key', async () => {
    const { auth, lookups } = setup();
    await Promise.all(Array.from({ length: 50 }, () => auth.authenticate(`Bearer ${GOOD}`)));
    expect(lookups).toHaveLength(1);
  });

  it('waits for the store when the cached answer is too old to serve', async () => {
    const { auth, clock, lookups, records } = setup();
    await auth.authenticate(`Bearer ${GOOD}`);
    records.set(`h(${GOOD})`, { accountId: 'acct_1', prefix: 'svc_live_AAAAAAAA', revoked: true });
    clock.advance(10 * 60_000);
    await expect(auth.authenticate(`Bearer ${GOOD}`)).rejects.toBeInstanceOf(AuthenticationError);
    expect(lookups).toHaveLength(2);
  });

  it('rides out a failed background refresh within the TTL, and fails closed past it', async () => {
    const clock = manualClock();
    let down = false;
    let reads = 0;
    const auth = new Authenticator({
      keys: {
        findByHash: async () => {
          reads++;
          if (down) throw new Error('store down');
          return { accountId: 'acct_1', prefix: 'svc_live_AAAAAAAA', revoked: false };
        },
      },
      clock,
      hash: (key) => `h(${key})`,
      ttlMs: 5_000,
    });
    await auth.authenticate(`Bearer ${GOOD}`);
    down = true;
    clock.advance(3_000);
    await expect(auth.authenticate(`Bearer ${GOOD}`)).resolves.toMatchObject({ accountId: 'acct_1' });
    await new Promise((resolve) => setImmediate(resolve));
    expect(reads).toBe(2);
    clock.advance(3_000);
    await expect(auth.authenticate(`Bearer ${GOOD}`)).rejects.toMatchObject({ status: 503 });
  });
});

describe('Authenticator with a zero TTL', () => {
  it('asks the store on every request, so a revocation applies to the very next one', async () => {
    const clock = manualClock();
    let revoked = false;
    const auth = new Authenticator({
      keys: { findByHash: async () => ({ accountId: 'acct_1', prefix: 'p', revoked }) },
      clock,
      hash: (key) => key,
      ttlMs: 0,
    });
    await expect(auth.authenticate(`Bearer ${GOOD}`)).resolves.toMatchObject({ accountId: 'acct_1' });
    revoked = true;
    await expect(auth.authenticate(`Bearer ${GOOD}`)).rejects.toBeInstanceOf(AuthenticationError);
  });
});

describe('Authenticator when the store is down', () => {
  it('fails closed with 503 when nothing usable is cached', async () => {
    const auth = new Authenticator({
      keys: { findByHash: async () => Promise.reject(new Error('connection refused')) },
      clock: manualClock(),
      hash: (key) => key,
      ttlMs: 5_000,
    });
    await expect(auth.authenticate(`Bearer ${GOOD}`)).rejects.toMatchObject({ status: 503 });
  });
});
