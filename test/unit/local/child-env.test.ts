import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { childEnv, isOwnConfiguration } from '#test/child-env.ts';

describe('the environment of the processes tests start', () => {
  it('drops every setting the README documents, and where AWS is, whatever the shell set', () => {
    const readme = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8');
    const documented = [...readme.matchAll(/^\| `([A-Z][A-Z0-9_]+)` \|/gm)].map((m) => m[1] as string);
    expect(documented.length).toBeGreaterThan(30);
    for (const name of documented) expect(isOwnConfiguration(name), name).toBe(true);
    for (const name of ['ACCOUNTS_TABLE', 'AWS_PROFILE', 'AWS_ENDPOINT_URL_DYNAMODB', 'LOCAL_STACK_FILE'])
      expect(isOwnConfiguration(name), name).toBe(true);
  });

  it('keeps the rest, and takes what the test gives', () => {
    process.env.DATA_DIR_TEST_PROBE = 'kept';
    process.env.DATA_DIR = '/home/someone/svc-data';
    try {
      const env = childEnv({ PORT: '0' });
      expect(env.DATA_DIR_TEST_PROBE).toBe('kept');
      expect(env.DATA_DIR).toBeUndefined();
      expect(env.PORT).toBe('0');
      expect(env.PATH).toBe(process.env.PATH);
    } finally {
      delete process.env.DATA_DIR_TEST_PROBE;
      delete process.env.DATA_DIR;
    }
  });
});
