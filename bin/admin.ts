/**
 * Operator CLI: `npm run admin -- <command>`.
 *
 *   accounts create [--id ID] [--name NAME]     create an account (tier: unverified)
 *   accounts show ACCOUNT_ID                    show an account
 *   keys create ACCOUNT_ID [--name NAME]        create an API key; the key is printed once, never stored
 *   keys list ACCOUNT_ID                        list an account's keys (public prefixes only)
 *   keys revoke ACCOUNT_ID KEY_PREFIX           revoke keys by public prefix (e.g. svc_live_Ab12Cd34)
 *
 * Target: the stack `npm start` is running (found through .local/stack.json), or the tables named by
 * ACCOUNTS_TABLE (with the standard AWS_* variables, e.g. AWS_ENDPOINT_URL_DYNAMODB, AWS_REGION).
 */
import { parseArgs } from 'node:util';
import { DynamoDBClient, type DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import { DynamoAccounts } from '#adapters/dynamo-accounts.ts';
import { tables } from '#lib/resources.ts';
import { localClientConfig } from '#local/emulators.ts';
import { readStackFile } from '#local/stack-file.ts';

const USAGE = `usage: npm run admin -- <command>
  accounts create [--id ID] [--name NAME]
  accounts show ACCOUNT_ID
  keys create ACCOUNT_ID [--name NAME]
  keys list ACCOUNT_ID
  keys revoke ACCOUNT_ID KEY_PREFIX`;

class UsageError extends Error {}

interface Target {
  readonly client: DynamoDBClientConfig;
  readonly accountsTable: string;
}

const target = (env: NodeJS.ProcessEnv): Target => {
  const table = env[tables.accounts.envVar];
  if (table) return { client: {}, accountsTable: table };
  const stack = readStackFile();
  if (stack)
    return {
      client: localClientConfig(stack.emulators.dynamodb),
      accountsTable: stack.resources.tables.accounts,
    };
  throw new UsageError(
    `No target: start the local stack (npm start) or set ${tables.accounts.envVar} and AWS_* variables.`,
  );
};

export const run = async (argv: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<string> => {
  const { positionals, values } = parseArgs({
    args: [...argv],
    allowPositionals: true,
    options: { id: { type: 'string' }, name: { type: 'string' }, json: { type: 'boolean' } },
  });
  const [group, command, ...args] = positionals;
  const { client: clientConfig, accountsTable } = target(env);
  const client = new DynamoDBClient(clientConfig);
  const accounts = new DynamoAccounts(client, accountsTable);
  const need = (i: number, what: string): string => {
    const value = args[i];
    if (!value) throw new UsageError(`missing ${what}\n${USAGE}`);
    return value;
  };
  try {
    switch (`${group} ${command}`) {
      case 'accounts create': {
        const account = await accounts.createAccount({
          ...(values.id ? { id: values.id } : {}),
          ...(values.name ? { name: values.name } : {}),
        });
        return JSON.stringify(account, null, 2);
      }
      case 'accounts show': {
        const account = await accounts.getAccount(need(0, 'ACCOUNT_ID'));
        if (!account) throw new UsageError(`no account ${args[0]}`);
        return JSON.stringify(account, null, 2);
      }
      case 'keys create': {
        const { key, info } = await accounts.createKey(
          need(0, 'ACCOUNT_ID'),
          values.name ? { name: values.name } : {},
        );
        return `${key}\n\nThis is the only time the key is shown; only its SHA-256 hash is stored (prefix ${info.prefix}).`;
      }
      case 'keys list':
        return JSON.stringify(await accounts.listKeys(need(0, 'ACCOUNT_ID')), null, 2);
      case 'keys revoke': {
        const revoked = await accounts.revokeKey(need(0, 'ACCOUNT_ID'), need(1, 'KEY_PREFIX'));
        if (revoked === 0) throw new UsageError(`no active key with prefix ${args[1]} on account ${args[0]}`);
        return `revoked ${revoked} key(s); the gateway refuses them once its key cache entry is older than KEY_CACHE_TTL_MS (default 5 s)`;
      }
      default:
        throw new UsageError(USAGE);
    }
  } finally {
    client.destroy();
  }
};

if (import.meta.main) {
  try {
    console.log(await run(process.argv.slice(2)));
  } catch (error) {
    console.error(error instanceof UsageError || error instanceof Error ? error.message : String(error));
    process.exit(error instanceof UsageError ? 2 : 1);
  }
}
