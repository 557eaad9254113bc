import type { WalletReport } from '#adapters/dynamo-accounting.ts';
import { usdToNano } from '#core/pricing.ts';
import type { TestStack } from './stack.ts';

let n = 0;

/**
 * A fresh account with a key on a test stack; funded (hence trusted) when `usd` is given, the top-up dated `at`
 * (default now; tests on an injected clock pass theirs).
 */
export const newAccount = async (
  t: TestStack,
  options: { usd?: number; at?: number } = {},
): Promise<{ id: string; key: string }> => {
  const { id } = await t.stack.container.accounts.createAccount({ id: `acct_t${n++}_${Date.now()}` });
  const { key } = await t.stack.container.accounts.createKey(id);
  if (options.usd) {
    await t.stack.container.accounting.topUp({
      accountId: id,
      amount: usdToNano(options.usd),
      reference: `seed-${id}`,
      at: options.at ?? Date.now(),
    });
  }
  return { id, key };
};

/** A fresh funded (hence trusted) account with a key, on a test stack. */
export const fundedAccount = (t: TestStack, usd = 5): Promise<{ id: string; key: string }> =>
  newAccount(t, { usd });

/**
 * The account's wallet once the running settlement consumer has settled every call it made: no hold open.
 * Needs a stack started with `consumers: true`.
 */
export const settledWallet = async (
  t: TestStack,
  accountId: string,
  timeoutMs = 10_000,
): Promise<WalletReport> => {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const report = await t.stack.container.accounting.report(accountId);
    if (report.holds.length === 0) return report;
    if (Date.now() > deadline) throw new Error(`holds of ${accountId} still open after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
};

/** The debit the ledger holds for one request (nano-USD, paid plus owed). */
export const debitOf = (report: WalletReport, requestId: string): number | undefined => {
  const entry = report.ledger.find((e) => e.kind === 'debit' && e.reference === requestId);
  return entry === undefined ? undefined : entry.amount + entry.owed;
};
