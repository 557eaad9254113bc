import { createHash } from 'node:crypto';
import { DeleteItemCommand, DynamoDBClient, ScanCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DynamoAccounts } from '#adapters/dynamo-accounts.ts';
import { localClientConfig } from '#local/emulators.ts';
import { adminCli, startTestStack, type TestStack } from '#test/stack.ts';

let t: TestStack;
beforeAll(async () => {
  // No key caching here, so a revocation shows on the very next request.
  t = await startTestStack({ functionEnv: { KEY_CACHE_TTL_MS: '0' } });
});
afterAll(() => t?.stop());

const admin = (...args: string[]) => adminCli(t)(...args);

const chat = (key: string) =>
  t.post(
    '/chat/completions',
    { model: 'famA-v4.1-flash', messages: [{ role: 'user', content: 'hi' }] },
    {
      authorization: `Bearer ${key}`,
      'content-type': 'application/json',
    },
  );

describe('API keys through the admin CLI', () => {
  let accountId: string;
  let key: string;

  it('creates an account and a key that is shown once and works at once', async () => {
    accountId = (
      JSON.parse(await admin('accounts', 'create', '--name', 'Ada')) as { id: string; tier: string }
    ).id;
    expect(accountId).toMatch(/^acct_/);
    const out = await admin('keys', 'create', accountId, '--name', 'laptop');
    key = out.split('\n')[0] as string;
    expect(key).toMatch(/^svc_live_[A-Za-z0-9]{40}$/);
    // The key authenticates at once; the empty wallet is what refuses this paid model.
    expect((await chat(key)).status).toBe(402);
    expect(await admin('wallet', 'topup', accountId, '5', '--reference', 'pay_ada_1')).toMatch(/^credited/);
    expect((await chat(key)).status).toBe(200);
  });

  it('refuses a top-up amount it would round or could not hold, crediting nothing, and credits the rest exactly', async () => {
    const balance = async () =>
      (JSON.parse(await admin('wallet', 'show', accountId)) as { balanceUsd: string }).balanceUsd;
    const before = await balance();
    for (const [amount, message] of [
      ['abc', 'USD must be an amount such as 25 or 12.50'],
      ['1e3', 'USD must be an amount such as 25 or 12.50'],
      ['1.0000000001', 'USD must be an amount such as 25 or 12.50'],
      ['0.99', 'top-ups are at least 1 USD'],
      ['5000000.000000001', 'a top-up is at most 5000000 USD'],
    ] as const) {
      await expect(
        admin('wallet', 'topup', accountId, amount, '--reference', `pay_bad_${amount}`),
      ).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining(message) });
    }
    expect(await balance()).toBe(before);
    // A payment reference already credited with another amount is refused too: the operator's to fix, not to retry.
    await expect(admin('wallet', 'topup', accountId, '7', '--reference', 'pay_ada_1')).rejects.toMatchObject({
      code: 2,
      stderr: expect.stringContaining('pay_ada_1 was already credited'),
    });
    expect(await balance()).toBe(before);
    // Nine decimals are the ledger's own precision: credited to the nano-dollar. Through a float this one
    // came out 1 nano-dollar high.
    const nano = (usd: string) => Number(usd.replace('.', ''));
    await admin('wallet', 'topup', accountId, '4341553.41828889', '--reference', 'pay_ada_exact');
    expect(nano(await balance()) - nano(before)).toBe(4_341_553_418_288_890);
  });

  it('says so when an account id names no account, rather than showing an empty wallet or key list', async () => {
    for (const [group, command, ...rest] of [
      ['wallet', 'show'],
      ['keys', 'list'],
      ['accounts', 'show'],
      // Writes too: the same words and exit status, not the store's "The conditional request failed".
      ['wallet', 'topup', '5', '--reference', 'pay_typo'],
      ['keys', 'create'],
      ['keys', 'revoke', 'svc_live_abcd'],
      ['accounts', 'quota', '--rpm', '10'],
    ] as const) {
      await expect(admin(group, command, 'acct_typo0000', ...rest)).rejects.toMatchObject({
        code: 2,
        stderr: expect.stringContaining('no account acct_typo0000'),
      });
    }
  });

  it('refuses a quota the buckets would not enforce as written, a stray argument, and an account id taken', async () => {
    for (const [args, message] of [
      // Not decimal digits: read by Number() these were 1e30 and 16.
      [['--rpm', '1e30'], 'rpm must be a whole number'],
      [['--rpm', '0x10'], 'rpm must be a whole number'],
      [['--tpm', '99999999999999999999'], 'tpm must be a whole number'],
      // 1.5 µs a token, enforced at 2: 30,000,000 a minute.
      [['--tpm', '40000000'], 'tpm 40000000 would be enforced as 30000000'],
      [['--rpm', '5', '--clear'], 'either --clear or limits'],
    ] as const) {
      await expect(admin('accounts', 'quota', accountId, ...args)).rejects.toMatchObject({
        code: 2,
        stderr: expect.stringContaining(message),
      });
    }
    expect(JSON.parse(await admin('accounts', 'show', accountId))).toMatchObject({ quota: null });
    await expect(
      admin('wallet', 'topup', accountId, '5', 'extra', '--reference', 'pay_stray'),
    ).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining('unexpected argument "extra"') });
    await expect(admin('accounts', 'create', '--id', accountId)).rejects.toMatchObject({
      code: 2,
      stderr: expect.stringContaining(`account ${accountId} already exists`),
    });
  });

  it('changes only the quota limits given: the others keep their custom values, `tier` gives one back', async () => {
    const id = (JSON.parse(await admin('accounts', 'create', '--name', 'Volume')) as { id: string }).id;
    const quota = async (...args: string[]) =>
      (JSON.parse(await admin('accounts', 'quota', id, ...args)) as { quota: unknown }).quota;
    expect(await quota('--rpm', '5000', '--tpm', '10000000')).toEqual({ rpm: 5000, tpm: 10_000_000 });
    // Raising the day's tokens alone keeps the minute's custom limits.
    expect(await quota('--tpd', '4800000000')).toEqual({ rpm: 5000, tpm: 10_000_000, tpd: 4_800_000_000 });
    expect(await quota('--rpm', 'tier')).toEqual({ tpm: 10_000_000, tpd: 4_800_000_000 });
    // Nothing custom left is no custom quota.
    expect(await quota('--tpm', 'tier', '--tpd', 'tier')).toBeNull();
    expect(await quota('--rpd', '2000000')).toEqual({ rpd: 2_000_000 });
    expect(await quota('--clear')).toBeNull();
    for (const [args, message] of [
      [['--rpm', 'tiers'], 'rpm must be a whole number'],
      [['--rpm', 'tier', '--clear'], 'either --clear or limits'],
    ] as const) {
      await expect(admin('accounts', 'quota', id, ...args)).rejects.toMatchObject({
        code: 2,
        stderr: expect.stringContaining(message),
      });
    }
  });

  it('refuses a flag the command does not use, doing nothing', async () => {
    for (const [args, flag] of [
      [['keys', 'create', accountId, '--reference', 'pay_1'], '--reference'],
      [['wallet', 'show', accountId, '--name', 'x'], '--name'],
      [['wallet', 'topup', accountId, '5', '--reference', 'pay_flag', '--rpm', '5'], '--rpm'],
      [['accounts', 'quota', accountId, '--rpm', '5000', '--name', 'x'], '--name'],
    ] as const) {
      await expect(admin(...args)).rejects.toMatchObject({
        code: 2,
        stderr: expect.stringContaining(`"${args[0]} ${args[1]}" takes no ${flag}`),
      });
    }
    expect(JSON.parse(await admin('keys', 'list', accountId))).toHaveLength(1);
    expect(JSON.parse(await admin('accounts', 'show', accountId))).toMatchObject({ quota: null });
    expect(
      (
        JSON.parse(await admin('wallet', 'show', accountId)) as { ledger: { reference: string }[] }
      ).ledger.map((e) => e.reference),
    ).not.toContain('pay_flag');
  });

  it('stores only the SHA-256 of a key, never the key', async () => {
    const client = new DynamoDBClient(localClientConfig(t.stack.emulators.dynamodb));
    const { Items = [] } = await client.send(
      new ScanCommand({ TableName: t.stack.resources.tables.accounts }),
    );
    client.destroy();
    const dump = JSON.stringify(Items);
    expect(dump).not.toContain(key);
    expect(dump).not.toContain(key.slice(17));
    expect(dump).toContain(createHash('sha256').update(key).digest('hex'));
  });

  it('lists keys by public prefix only', async () => {
    const listed = JSON.parse(await admin('keys', 'list', accountId)) as { prefix: string; name: string }[];
    expect(listed).toEqual([
      expect.objectContaining({ prefix: key.slice(0, 17), name: 'laptop', revokedAt: null }),
    ]);
  });

  it('revokes a key, after which the gateway answers 401 invalid_api_key', async () => {
    expect(await admin('keys', 'revoke', accountId, key.slice(0, 17))).toContain('revoked 1 key');
    const res = await chat(key);
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('invalid_api_key');
    const listed = JSON.parse(await admin('keys', 'list', accountId)) as { revokedAt: string | null }[];
    expect(listed[0]?.revokedAt).not.toBeNull();
  });

  it('takes a whole key pasted in by its prefix, and never prints it back', async () => {
    const { key: pasted } = await t.stack.container.accounts.createKey(accountId, { name: 'pasted' });
    expect(await admin('keys', 'revoke', accountId, pasted)).toContain('revoked 1 key');
    expect((await chat(pasted)).status).toBe(401);
    // Again: no active key now, and the refusal names the prefix alone.
    const failed = (await admin('keys', 'revoke', accountId, pasted).catch((error: unknown) => error)) as {
      code: number;
      stderr: string;
      stdout: string;
    };
    expect(failed.code).toBe(2);
    expect(failed.stderr).toContain(`no active key with prefix ${pasted.slice(0, 17)} on account`);
    expect(failed.stderr).toContain('as `keys list` shows');
    expect(`${failed.stderr}${failed.stdout}`).not.toContain(pasted.slice(17));
  });

  it("says a revoked key may pass for the stage's key cache lifetime, and streams admitted run on", async () => {
    const { key: spare } = await t.stack.container.accounts.createKey(accountId, { name: 'spare' });
    const out = await admin('keys', 'revoke', accountId, spare.slice(0, 17));
    expect(out).toContain("the stage's KEY_CACHE_TTL_MS (default 5 s)");
    expect(out).toContain('streams already admitted run to completion');
  });

  it('counts a key another revoke revoked meanwhile as revoked, not as a failure', async () => {
    const { id } = await t.stack.container.accounts.createAccount({ id: `acct_race_${Date.now()}` });
    // Two keys under one public prefix (its first 17 characters): one revoke covers both.
    const prefix = 'svc_live_Race0000';
    for (const secret of ['a', 'b'])
      await t.stack.container.accounts.createKey(id, { key: prefix + secret.repeat(32) });
    // Another operator's `keys revoke` lands after this one revoked the first key and before it revokes the second.
    const client = new DynamoDBClient(localClientConfig(t.stack.emulators.dynamodb));
    let updates = 0;
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'UpdateItemCommand' && ++updates === 2)
          expect(await t.stack.container.accounts.revokeKey(id, prefix)).toBe(1);
        return next(args);
      },
      { step: 'initialize', name: 'racingRevoke' },
    );
    try {
      // Both keys it found active are revoked now, one by the other operator: both count, and none is an error
      // (were every key revoked meanwhile, a count of 0 would read as "no active key").
      expect(await new DynamoAccounts(client, t.stack.resources.tables.accounts).revokeKey(id, prefix)).toBe(
        2,
      );
    } finally {
      client.destroy();
    }
    const listed = await t.stack.container.accounts.listKeys(id);
    expect(listed.map((k) => k.revokedAt !== null)).toEqual([true, true]);
  });

  it('never brings a revoked key back: adding it again (npm start restarting with DEMO_API_KEY) is refused', async () => {
    await expect(t.stack.container.accounts.createKey(accountId, { key })).rejects.toThrow(/revoked/);
    const listed = JSON.parse(await admin('keys', 'list', accountId)) as { revokedAt: string | null }[];
    expect(listed[0]?.revokedAt).not.toBeNull();
    expect((await chat(key)).status).toBe(401);
  });

  it('answers 401 invalid_api_key for a key whose account is gone (not a 503: no outage to report)', async () => {
    const { id } = await t.stack.container.accounts.createAccount({ id: `acct_gone_${Date.now()}` });
    const { key: orphan } = await t.stack.container.accounts.createKey(id);
    await new DynamoDBClient(localClientConfig(t.stack.emulators.dynamodb)).send(
      new DeleteItemCommand({
        TableName: t.stack.resources.tables.accounts,
        Key: { pk: { S: `acct#${id}` }, sk: { S: 'profile' } },
      }),
    );
    const res = await chat(orphan);
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('invalid_api_key');
  });

  it.each([
    ['missing', undefined],
    ['malformed', 'Bearer not-a-key'],
    ['unknown', 'Bearer svc_live_unknownUNKNOWNunknown0000000000'],
  ])('answers 401 invalid_api_key for a %s key', async (_, authorization) => {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (authorization) headers.authorization = authorization;
    const res = await t.post(
      '/chat/completions',
      { model: 'famA-v4.1-flash', messages: [{ role: 'user', content: 'x' }] },
      headers,
    );
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { code: string; type: string } }).error).toMatchObject({
      code: 'invalid_api_key',
      type: 'invalid_request_error',
    });
  });
});
