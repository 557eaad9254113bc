import { describe, expect, it } from 'vitest';
import { hashKey } from '#adapters/dynamo-key-store.ts';

describe('hashKey', () => {
  it('is the SHA-256 hex of the whole key, so stored key items stay valid across changes to how it is computed', () => {
    // FIPS 180-2's test vector; any key gives 64 hex digits, and two keys two hashes.
    expect(hashKey('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    expect(hashKey('svc_live_demoDEMOdemo00000001')).toMatch(/^[0-9a-f]{64}$/);
    expect(hashKey('svc_live_demoDEMOdemo00000001')).not.toBe(hashKey('svc_live_demoDEMOdemo00000002'));
  });
});
