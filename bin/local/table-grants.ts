import { AsyncLocalStorage } from 'node:async_hooks';
import { isMainThread, parentPort } from 'node:worker_threads';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { type FunctionId, functions, type TableAction } from '#lib/functions.ts';
import type { TableId } from '#lib/resources.ts';

/**
 * IAM on one machine. On AWS each function's role grants exactly the DynamoDB actions its row in lib/functions.ts
 * lists, and a call outside them is refused (AccessDeniedException) — an outage no local run would show, since the
 * emulator checks nothing. The local host therefore runs every invocation inside `invoking.run(name, …)` and gives
 * its DynamoDB clients a middleware that refuses, the same way, any call the invoking function's row does not grant.
 * Every test that drives a function through the local host thus proves that function's grants cover what it does.
 * Work outside any invocation (the local host seeding the registry, the admin CLI) is an operator's, not a role's.
 */
export const invoking = new AsyncLocalStorage<FunctionId>();

/**
 * Calls refused so far — in this thread, and in the worker threads it started (the settlement consumer and the
 * sweeper, extra gateway instances), which post theirs here — for tests to assert there were none.
 */
export const grantViolations: string[] = [];

/** A worker thread's message carrying a refusal (workers.ts hands it to `grantViolations`). */
export interface GrantViolationMessage {
  readonly grantViolation: string;
}

export const isGrantViolation = (message: unknown): message is GrantViolationMessage =>
  typeof message === 'object' && message !== null && 'grantViolation' in message;

type Needed = readonly { readonly table: string; readonly action: TableAction }[];

/** The item action each kind of transaction item needs. */
const ITEM_ACTIONS: Readonly<Record<string, TableAction>> = {
  Put: 'PutItem',
  Update: 'UpdateItem',
  Delete: 'DeleteItem',
  ConditionCheck: 'ConditionCheckItem',
};

/**
 * The (table, action) pairs a DynamoDB command needs, as IAM evaluates it. A single-table command needs the action
 * it is named after (`GetItemCommand` → GetItem), which also refuses, inside an invocation, anything no row grants
 * (a read in a transaction, a batch get, PartiQL). Outside one (the local host creating its tables) nothing is
 * checked.
 */
const neededBy = (command: string, input: Record<string, unknown>): Needed => {
  if (command === 'BatchWriteItemCommand')
    return Object.keys((input.RequestItems as object) ?? {}).map((table) => ({
      table,
      action: 'BatchWriteItem',
    }));
  if (command === 'TransactWriteItemsCommand')
    return ((input.TransactItems as Record<string, Record<string, unknown>>[]) ?? []).flatMap((item) => {
      const [kind = '', body] = Object.entries(item)[0] ?? [];
      const table = typeof body?.TableName === 'string' ? body.TableName : '';
      return [
        // An item of a kind not listed needs an action no row grants.
        { table, action: ITEM_ACTIONS[kind] ?? (`${kind}Item` as TableAction) },
        // A refusal's ALL_OLD item is a read.
        ...(body?.ReturnValuesOnConditionCheckFailure === 'ALL_OLD'
          ? [{ table, action: 'GetItem' as const }]
          : []),
      ];
    });
  const table = typeof input.TableName === 'string' ? input.TableName : '';
  return [{ table, action: command.replace(/Command$/, '') as TableAction }];
};

class AccessDeniedException extends Error {
  override readonly name = 'AccessDeniedException';
  readonly $fault = 'client';
}

/**
 * The middleware for a client of this thread: `tableNames` maps our table ids to the physical names its commands
 * carry.
 */
export const enforceTableGrants =
  (tableNames: Readonly<Record<TableId, string>>) =>
  (client: DynamoDBClient): void => {
    const idOf = new Map(Object.entries(tableNames).map(([id, name]) => [name, id as TableId]));
    client.middlewareStack.add(
      (next, context) => async (args) => {
        const fn = invoking.getStore();
        if (fn !== undefined) {
          const granted = functions[fn].uses.tables as
            | Readonly<Partial<Record<TableId, readonly TableAction[]>>>
            | undefined;
          for (const { table, action } of neededBy(
            context.commandName ?? '',
            args.input as Record<string, unknown>,
          )) {
            const id = idOf.get(table);
            if (id !== undefined && granted?.[id]?.includes(action)) continue;
            const denied = `${fn} is not authorized to perform: dynamodb:${action} on table ${id ?? table}`;
            grantViolations.push(denied);
            if (!isMainThread)
              parentPort?.postMessage({ grantViolation: denied } satisfies GrantViolationMessage);
            throw new AccessDeniedException(denied);
          }
        }
        return next(args);
      },
      { step: 'initialize', name: 'localTableGrants' },
    );
  };
