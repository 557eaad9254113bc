/**
 * Operator CLI: `npm run admin -- <command>`.
 *
 *   accounts create [--id ID] [--name NAME]     create an account (tier: unverified)
 *   accounts show ACCOUNT_ID                    show an account
 *   keys create ACCOUNT_ID [--name NAME]        create an API key; the key is printed once, never stored
 *   keys list ACCOUNT_ID                        list an account's keys (public prefixes only)
 *   keys revoke ACCOUNT_ID KEY_PREFIX           revoke keys by public prefix (e.g. svc_live_Ab12Cd34; a whole key is
 *                                               taken by its prefix, and never printed back); the gateway
 *                                               may accept them for the stage's KEY_CACHE_TTL_MS (default 5 s) more
 *   accounts quota ACCOUNT_ID [--rpm N|tier] [--rpd N|tier] [--tpm N|tier] [--tpd N|tier] | --clear
 *                                               a volume account's custom quota, which replaces the tier's limits:
 *                                               each limit given is set (`tier`: the tier's again), those not given
 *                                               keep what they have; --clear drops the whole custom quota
 *   wallet topup ACCOUNT_ID USD --reference REF credit a top-up (min 1 USD; REF makes it happen once)
 *   wallet show ACCOUNT_ID                      balance, available, owed, open holds and the ledger
 *   settlements replay FILE                     settle records that never reached the queue (the gateway logs
 *                                               each as "settlement record not sent" or "… not acknowledged
 *                                               …"): JSON lines — those log
 *                                               lines, records, or queue message bodies; a record settles once.
 *                                               Exits 1 when a line is unreadable or a record was not settled
 *   registry …, models …, deployments …         the model registry: see admin/registry-commands.ts and
 *                                               docs/registry.md
 *
 * Exit status: 0 done, 2 a wrong command line or a value in it refused, 75 the store unreachable or busy (run it
 * again), 1 any other failure
 * (admin/exit-status.ts).
 *
 * Target: the stack `npm start` is running (found through .local/stack.json), or the tables named by
 * ACCOUNTS_TABLE (with the standard AWS_* variables, e.g. AWS_ENDPOINT_URL_DYNAMODB, AWS_REGION); the
 * registry commands use REGISTRY_TABLE.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { DynamoDBClient, type DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import {
  type AccountingTables,
  DynamoAccounting,
  QuotaError,
  TopUpReferenceError,
} from '#adapters/dynamo-accounting.ts';
import { DynamoAccounts } from '#adapters/dynamo-accounts.ts';
import { RegistryConflictError } from '#adapters/dynamo-registry.ts';
import { RegistryFileError } from '#adapters/registry-file.ts';
import { isTransient } from '#adapters/transient-errors.ts';
import {
  BalanceCeilingError,
  MAX_BALANCE_NANO,
  MIN_TOP_UP_NANO,
  TopUpAmountError,
} from '#core/accounting.ts';
import { isWellFormedKey, publicPrefix } from '#core/api-keys.ts';
import { DIMENSIONS, type Dimension, type QuotaChange, quotaProblem } from '#core/limits.ts';
import { NANO_PER_USD, nanoToUsd, parseUsd } from '#core/pricing.ts';
import { planSettlement } from '#core/settlement.ts';
import { tables } from '#lib/resources.ts';
import { localClientConfig } from '#local/emulators.ts';
import { type CommandSpec, checkCommandLine } from './admin/command-line.ts';
import { EXIT_FAILED, EXIT_TRANSIENT, EXIT_USAGE } from './admin/exit-status.ts';
import { runningLocalStack } from './admin/local-stack.ts';
import { REGISTRY_GROUPS, REGISTRY_USAGE, runRegistryCommand } from './admin/registry-commands.ts';
import { replayProblem, replaySettlements } from './admin/settlement-replay.ts';
import { UsageError } from './admin/usage-error.ts';

const USAGE = `usage: npm run admin -- <command>
  accounts create [--id ID] [--name NAME]
  accounts show ACCOUNT_ID
  accounts quota ACCOUNT_ID [--rpm N|tier] [--rpd N|tier] [--tpm N|tier] [--tpd N|tier] | --clear
                    each limit given is set (tier: back to the tier's), the others stay; --clear: all the tier's
  keys create ACCOUNT_ID [--name NAME]
  keys list ACCOUNT_ID
  keys revoke ACCOUNT_ID KEY_PREFIX
  wallet topup ACCOUNT_ID USD --reference REF
  wallet show ACCOUNT_ID
  settlements replay FILE
${REGISTRY_USAGE}`;

interface Target {
  readonly client: DynamoDBClientConfig;
  readonly tables: AccountingTables;
}

const target = (env: NodeJS.ProcessEnv): Target => {
  const fromEnv = {
    accounts: env[tables.accounts.envVar],
    wallet: env[tables.wallet.envVar],
    buckets: env[tables.buckets.envVar],
    usage: env[tables.usage.envVar],
  };
  // Any one of them set means a deployed stage is meant: the local stack is never written instead.
  if (Object.values(fromEnv).some((v) => v)) {
    const missing = Object.entries(fromEnv).find(([, v]) => !v);
    if (missing) {
      throw new UsageError(
        `Set ACCOUNTS_TABLE, WALLET_TABLE, BUCKETS_TABLE and USAGE_TABLE (missing ${missing[0]}).`,
      );
    }
    return { client: {}, tables: fromEnv as AccountingTables };
  }
  const stack = runningLocalStack();
  if (stack) return { client: localClientConfig(stack.emulators.dynamodb), tables: stack.resources.tables };
  throw new UsageError(
    `No target: start the local stack (npm start) or set ${tables.accounts.envVar} and AWS_* variables.`,
  );
};

/**
 * A quota as an operator types it: decimal digits only (not `1e6`, `0x10` or `1_000`), then what buckets hold; or
 * `tier` (null), which gives the dimension back to the tier's limit.
 */
const quotaValue = (value: string, name: Dimension): number | null => {
  if (value === 'tier') return null;
  const n = /^[0-9]{1,16}$/.test(value) ? Number(value) : Number.NaN;
  const problem = quotaProblem(name, n);
  if (problem) throw new UsageError(`--${problem}`);
  return n;
};

const usd = (nano: number) => (nano / NANO_PER_USD).toFixed(9);

/** What each command takes: an argument more or a flag it does not read is a mistake, never silently ignored. */
const COMMANDS: Readonly<Record<string, CommandSpec>> = {
  'accounts create': { args: 0, flags: ['id', 'name'] },
  'accounts show': { args: 1 },
  'accounts quota': { args: 1, flags: [...DIMENSIONS, 'clear'] },
  'wallet topup': { args: 2, flags: ['reference'] },
  'wallet show': { args: 1 },
  'settlements replay': { args: 1 },
  'keys create': { args: 1, flags: ['name'] },
  'keys list': { args: 1 },
  'keys revoke': { args: 2 },
};

/** `help` only as the command; the flags anywhere (`keys create --help`). */
const wantsHelp = (argv: readonly string[]): boolean =>
  argv[0] === 'help' || argv.some((a) => a === '--help' || a === '-h');

const parse = (argv: readonly string[]) =>
  parseArgs({
    args: [...argv],
    allowPositionals: true,
    options: {
      id: { type: 'string' },
      name: { type: 'string' },
      reference: { type: 'string' },
      rpm: { type: 'string' },
      rpd: { type: 'string' },
      tpm: { type: 'string' },
      tpd: { type: 'string' },
      clear: { type: 'boolean' },
    },
  });

/** Thrown for `--help`: the usage, printed to stdout with exit 0. */
export class HelpRequest extends Error {
  override name = 'HelpRequest';
}

/**
 * Thrown when a command did part of what it was asked: `output` (what it did) goes to stdout as on success, the
 * message (what it did not do) to stderr, and the exit status is 1 — so a script sees the failure and can still
 * read the summary.
 */
export class IncompleteRun extends Error {
  override name = 'IncompleteRun';
  readonly output: string;
  constructor(output: string, message: string) {
    super(message);
    this.output = output;
  }
}

export const run = async (argv: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<string> => {
  // Help and a wrong command line are answered before looking for a stack or tables: neither needs one.
  if (wantsHelp(argv)) throw new HelpRequest(USAGE);
  if (argv.length === 0) throw new UsageError(USAGE);
  if (REGISTRY_GROUPS.has(argv[0] ?? '')) return runRegistryCommand(argv, env);
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (error) {
    throw new UsageError(`${error instanceof Error ? error.message : String(error)}\n${USAGE}`);
  }
  const { positionals, values } = parsed;
  const name = checkCommandLine(COMMANDS, positionals, values, USAGE);
  const args = positionals.slice(2);
  const { client: clientConfig, tables: names } = target(env);
  const client = new DynamoDBClient(clientConfig);
  const accounts = new DynamoAccounts(client, names.accounts);
  const accounting = new DynamoAccounting(client, names, (ms) => new Promise((r) => setTimeout(r, ms)));
  const need = (i: number, what: string): string => {
    const value = args[i];
    if (!value) throw new UsageError(`missing ${what}\n${USAGE}`);
    return value;
  };
  /**
   * The account an id names: a typo must not read as an empty wallet or a keyless account, nor reach a write as
   * the store's bare "conditional request failed". (The writes keep their own existence conditions for races.)
   */
  const existing = async (i: number) => {
    const id = need(i, 'ACCOUNT_ID');
    const account = await accounts.getAccount(id);
    if (!account) throw new UsageError(`no account ${id}`);
    return account;
  };
  try {
    switch (name) {
      case 'accounts create': {
        const account = await accounts
          .createAccount({
            ...(values.id ? { id: values.id } : {}),
            ...(values.name ? { name: values.name } : {}),
          })
          .catch((error: unknown) => {
            if (error instanceof Error && error.name === 'ConditionalCheckFailedException')
              throw new UsageError(`account ${values.id} already exists`);
            throw error;
          });
        return JSON.stringify(account, null, 2);
      }
      case 'accounts show':
        return JSON.stringify(await existing(0), null, 2);
      case 'accounts quota': {
        const { id } = await existing(0);
        const change: QuotaChange = {};
        for (const d of DIMENSIONS) {
          const given = values[d];
          if (given !== undefined) change[d] = quotaValue(given, d);
        }
        const changes = Object.keys(change).length;
        if (values.clear && changes > 0) throw new UsageError('give either --clear or limits, not both');
        if (!values.clear && changes === 0)
          throw new UsageError(`give --rpm/--rpd/--tpm/--tpd or --clear\n${USAGE}`);
        // Merged into the quota as the store has it, not replacing it: the limits not given keep their values.
        await accounting.setQuota(id, values.clear ? null : change, Date.now());
        return JSON.stringify(await accounts.getAccount(id), null, 2);
      }
      case 'wallet topup': {
        const { id } = await existing(0);
        const given = need(1, 'USD');
        const amount = parseUsd(given);
        if (amount === null)
          throw new UsageError(`USD must be an amount such as 25 or 12.50, got "${given}"`);
        if (amount < MIN_TOP_UP_NANO)
          throw new UsageError(`top-ups are at least ${nanoToUsd(MIN_TOP_UP_NANO)} USD`);
        if (amount > MAX_BALANCE_NANO)
          throw new UsageError(
            `a top-up is at most ${nanoToUsd(MAX_BALANCE_NANO)} USD, the most a wallet holds`,
          );
        if (!values.reference)
          throw new UsageError(
            '--reference (the payment reference) is required: it makes the top-up happen once',
          );
        const credited = await accounting.topUp({
          accountId: id,
          amount,
          reference: values.reference,
          at: Date.now(),
        });
        const wallet = await accounting.wallet(id);
        return `${credited ? 'credited' : 'already credited (same reference)'}: balance ${usd(wallet.balance)} USD, available ${usd(wallet.available)} USD`;
      }
      case 'wallet show': {
        const report = await accounting.report((await existing(0)).id);
        return JSON.stringify(
          {
            balanceUsd: usd(report.balance),
            availableUsd: usd(report.available),
            owedUsd: usd(report.owed),
            holds: report.holds.map((h) => ({
              ...h,
              amountUsd: usd(h.amount),
              expiresAt: new Date(h.expiresAt).toISOString(),
            })),
            ledger: report.ledger.map((e) => ({
              ...e,
              amountUsd: usd(e.amount),
              at: new Date(e.at).toISOString(),
            })),
          },
          null,
          2,
        );
      }
      case 'settlements replay': {
        const file = need(0, 'FILE');
        let text: string;
        try {
          text = readFileSync(file, 'utf8');
        } catch {
          throw new UsageError(`cannot read ${file}`);
        }
        const summary = await replaySettlements(text, {
          accountExists: async (accountId) => (await accounts.getAccount(accountId)) !== null,
          // Now, not the call's end: a refund is bounded by what is still ahead in the buckets when it lands.
          settle: (record) => accounting.settle(planSettlement(record, Date.now())),
        });
        const output = JSON.stringify(summary, null, 2);
        const problem = replayProblem(summary);
        if (problem) throw new IncompleteRun(output, problem);
        return output;
      }
      case 'keys create': {
        const { key, info } = await accounts.createKey(
          (await existing(0)).id,
          values.name ? { name: values.name } : {},
        );
        return `${key}\n\nThis is the only time the key is shown; only its SHA-256 hash is stored (prefix ${info.prefix}).`;
      }
      case 'keys list':
        return JSON.stringify(await accounts.listKeys((await existing(0)).id), null, 2);
      case 'keys revoke': {
        const given = need(1, 'KEY_PREFIX');
        // A whole key pasted in is taken by its public prefix, and never printed back: it is a secret.
        const prefix = isWellFormedKey(given) ? publicPrefix(given) : given;
        const revoked = await accounts.revokeKey((await existing(0)).id, prefix);
        if (revoked === 0)
          throw new UsageError(
            `no active key with prefix ${prefix} on account ${args[0]} (give the prefix as \`keys list\` shows it — svc_live_ and up to 8 more characters — or the whole key)`,
          );
        // The gateway caches key lookups per instance for its stage's KEY_CACHE_TTL_MS, which this CLI cannot read.
        return (
          `revoked ${revoked} key(s). The gateway may still accept them until its cached lookup expires, for up to ` +
          "the stage's KEY_CACHE_TTL_MS (default 5 s), and streams already admitted run to completion."
        );
      }
      default:
        throw new UsageError(USAGE);
    }
  } finally {
    client.destroy();
  }
};

/**
 * A value the command refused (exit 2, as the README says): the operator's to change, not the store's to retry — its
 * arguments, or what the store said of them (a payment reference credited otherwise, a wallet past its ceiling, a
 * quota the buckets cannot hold, a registry file it refused, a model or deployment missing or already there).
 */
const refused = (error: unknown): boolean =>
  error instanceof UsageError ||
  error instanceof TopUpReferenceError ||
  error instanceof TopUpAmountError ||
  error instanceof BalanceCeilingError ||
  error instanceof QuotaError ||
  error instanceof RegistryFileError ||
  error instanceof RegistryConflictError;

if (import.meta.main) {
  try {
    console.log(await run(process.argv.slice(2)));
  } catch (error) {
    if (error instanceof HelpRequest) {
      console.log(error.message);
      process.exit(0);
    }
    if (error instanceof IncompleteRun) console.log(error.output);
    const transient = isTransient(error);
    const message = error instanceof UsageError || error instanceof Error ? error.message : String(error);
    // The SDK's message for a refused connection can be empty: say what happened.
    console.error(
      transient ? `${message || 'the store could not be reached'} (temporary: run it again)` : message,
    );
    process.exit(refused(error) ? EXIT_USAGE : transient ? EXIT_TRANSIENT : EXIT_FAILED);
  }
}
