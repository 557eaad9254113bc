/**
 * The admin API used by tests and benchmarks to steer the simulator (no auth, loopback only):
 *
 * - `PUT /_sim/faults/<provider>` with a JSON FaultSpec body, or `null` to clear: sets that provider's faults
 * - `DELETE /_sim/faults`: clears every provider's faults
 * - `GET /_sim/calls[?provider=x]`: `{"calls": SimCall[]}`, oldest first
 * - `DELETE /_sim/calls`: forgets recorded calls
 * - `GET /_sim/health`: `{"ok": true}`
 */
import type { CallLog } from '#sim/calls.ts';
import { INVALID_JSON_ERROR, invalidRequestError } from '#sim/errors.ts';
import { type FaultStore, FaultSyntaxError } from '#sim/faults.ts';
import { type Exchange, parseJson, readBody, sendJson } from '#sim/http.ts';
import { PROVIDER_PATTERN, type Route } from '#sim/router.ts';

/** State the admin API reads and changes. */
export interface AdminContext {
  faults: FaultStore;
  calls: CallLog;
}

const OK = '{"ok":true}';

/** Builds the admin routes. */
export function createAdminRoutes(context: AdminContext): Route[] {
  return [
    {
      method: 'PUT',
      pattern: new RegExp(`^/_sim/faults/(${PROVIDER_PATTERN})$`),
      handle: async (ex, [provider = '']) => setFaults(ex, context.faults, provider),
    },
    {
      method: 'DELETE',
      pattern: /^\/_sim\/faults$/,
      handle: (ex) => {
        context.faults.clear();
        sendJson(ex, 200, OK);
      },
    },
    {
      method: 'GET',
      pattern: /^\/_sim\/calls$/,
      handle: (ex, _params, query) => {
        const provider = new URLSearchParams(query).get('provider') ?? undefined;
        sendJson(ex, 200, { calls: context.calls.list(provider) });
      },
    },
    {
      method: 'DELETE',
      pattern: /^\/_sim\/calls$/,
      handle: (ex) => {
        context.calls.clear();
        sendJson(ex, 200, OK);
      },
    },
    { method: 'GET', pattern: /^\/_sim\/health$/, handle: (ex) => sendJson(ex, 200, OK) },
  ];
}

async function setFaults(ex: Exchange, faults: FaultStore, provider: string): Promise<void> {
  const spec = parseJson(await readBody(ex.req));
  if (spec === undefined) return sendJson(ex, 400, INVALID_JSON_ERROR);
  try {
    faults.set(provider, spec);
  } catch (error) {
    if (!(error instanceof FaultSyntaxError)) throw error;
    return sendJson(ex, 400, invalidRequestError(error.message));
  }
  sendJson(ex, 200, OK);
}
