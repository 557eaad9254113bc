import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { planSettlement } from '#core/settlement.ts';
import { functions } from '#lib/functions.ts';
import { grantViolations, invoking } from '#local/table-grants.ts';
import { chatSettlement } from '#test/accounting.ts';
import { startTestStack, type TestStack } from '#test/stack.ts';

/**
 * The local host refuses a function's DynamoDB call that its IAM grants (lib/functions.ts) would refuse on AWS, so
 * every test driving a function proves its grants. These check that the refusal is really there: a test suite that
 * passed because nothing was enforced would prove nothing.
 */
let t: TestStack;
beforeAll(async () => {
  t = await startTestStack({ functionEnv: { KEY_CACHE_TTL_MS: '0', ACCOUNT_CACHE_TTL_MS: '0' } });
});
afterAll(async () => {
  grantViolations.splice(0); // the refusals below were wanted
  await t?.stop();
});

const models = () => fetch(`${t.baseURL}/models`, { headers: { authorization: `Bearer ${t.apiKey}` } });

describe("the functions' table grants, enforced locally", () => {
  it('refuses, inside an invocation, an action its function is not granted, as IAM would', async () => {
    const { accounting, accounts } = t.stack.container;
    // `models` reads keys and the catalog; the wallet is not its to read.
    await expect(invoking.run('models', () => accounting.wallet('acct_demo'))).rejects.toMatchObject({
      name: 'AccessDeniedException',
      message: 'models is not authorized to perform: dynamodb:GetItem on table wallet',
    });
    // Nor may a billed endpoint page through the accounts table's key index.
    await expect(
      invoking.run('chat-completions', () => accounts.listKeys('acct_demo')),
    ).rejects.toMatchObject({
      name: 'AccessDeniedException',
      message: expect.stringContaining('dynamodb:Query on table accounts'),
    });
    // Outside any invocation the local host itself (seeding, an operator's CLI) is unrestricted.
    await expect(accounting.wallet('acct_demo')).resolves.toMatchObject({ balance: expect.any(Number) });
    expect(grantViolations.splice(0)).toHaveLength(2);
  });

  it('lets the hold sweeper do all it does: find expired holds by their index, and release them', async () => {
    const { accounting, accounts } = t.stack.container;
    // A hold whose settlement never came (admitted outside any function, as a crash would leave it), on an account
    // of its own: funded, and so trusted (its limits' first generation).
    const now = Date.now();
    const { id } = await accounts.createAccount();
    await accounting.topUp({ accountId: id, amount: 1_000_000_000, reference: `grants-${id}`, at: now });
    const admitted = await accounting.admit({
      accountId: id,
      requestId: `req_grants_${now}`,
      dimensions: [
        {
          dimension: 'rpm',
          form: 'fresh',
          nowUs: now * 1000,
          incrementUs: 60_000,
          maxPriorTatUs: now * 1000,
        },
      ],
      hold: { amount: 1_000, expiresAt: now - 1 },
      limitsGen: 1,
    });
    expect(admitted.ok).toBe(true);
    const released = await invoking.run('hold-sweeper', () => accounting.releaseExpiredHolds(now));
    expect(released).toBeGreaterThanOrEqual(1);
    expect(grantViolations).toEqual([]);
  });

  it('lets the hold sweeper collect a debt from what it frees', async () => {
    const { accounting, accounts } = t.stack.container;
    const now = Date.now();
    const { id } = await accounts.createAccount();
    await accounting.topUp({ accountId: id, amount: 1_000_000_000, reference: `owing-${id}`, at: now });
    const hold = (requestId: string, expiresAt: number, atUs: number) =>
      accounting.admit({
        accountId: id,
        requestId,
        dimensions: [{ dimension: 'rpm', form: 'fresh', nowUs: atUs, incrementUs: 1, maxPriorTatUs: atUs }],
        hold: { amount: 500_000_000, expiresAt },
        limitsGen: 1,
      });
    // One hold left by a crash, another whose call cost 2 USD against its 0.5: 1.5 USD owed, nothing available.
    expect((await hold(`crashed-${id}`, now - 1, now * 1000)).ok).toBe(true);
    expect((await hold(`costly-${id}`, now + 3_600_000, now * 1000 + 10)).ok).toBe(true);
    await accounting.settle(
      planSettlement(chatSettlement(id, `costly-${id}`, { cost: 2_000_000_000, hold: 500_000_000, at: now })),
    );
    expect(await accounting.wallet(id)).toMatchObject({ available: 0, owed: 1_500_000_000 });
    await invoking.run('hold-sweeper', () => accounting.releaseExpiredHolds(now));
    expect(grantViolations).toEqual([]);
    expect(await accounting.wallet(id)).toMatchObject({ available: 0, owed: 1_000_000_000 });
  });

  it('applies to what a function does over HTTP: without its grant on the accounts table, a key cannot be looked up', async () => {
    const tables = functions.models.uses.tables as unknown as Record<string, readonly string[]>;
    const granted = tables.accounts as readonly string[];
    tables.accounts = [];
    try {
      const res = await models();
      expect(res.status).toBeGreaterThanOrEqual(500);
      expect(grantViolations).toContain(
        'models is not authorized to perform: dynamodb:GetItem on table accounts',
      );
    } finally {
      tables.accounts = granted;
      grantViolations.splice(0);
    }
    expect((await models()).status).toBe(200);
  });
});
