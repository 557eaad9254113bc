import type { Context } from 'aws-lambda';
import type { Logger } from '#adapters/logger.ts';
import type { Config } from '#functions/config.ts';
import { createHandler, createUptimeProbeDeps, type UptimeProbeSummary } from '#functions/uptime-probe.ts';
import { localClientConfig } from './emulators.ts';
import { invocationContext } from './function-url.ts';
import { enforceTableGrants, invoking } from './table-grants.ts';

export interface LocalProbeOptions {
  readonly config: Config;
  /** DynamoDB Local's endpoint: the probe files failed checks in the usage table. */
  readonly dynamodb: string;
  /** The gateway's base URL, ending in `/v1`. */
  readonly baseUrl: string;
  /** How often the probe runs, as its EventBridge schedule would; 0: only on demand. */
  readonly intervalMs: number;
  readonly log: Logger;
}

export interface LocalProbe {
  /**
   * One round now, against the gateway or `baseUrl` (tests point it at a port nothing answers), dated `at` if given
   * (tests file rounds in past minutes).
   */
  run(options?: { readonly baseUrl?: string; readonly at?: number }): Promise<UptimeProbeSummary>;
  stop(): Promise<void>;
}

/** The uptime-probe function behind a timer, with the grants its row in lib/functions.ts declares. */
export const startLocalProbe = async (options: LocalProbeOptions): Promise<LocalProbe> => {
  const deps = createUptimeProbeDeps(options.config, options.baseUrl, {
    dynamodb: localClientConfig(options.dynamodb),
    onDynamoClient: enforceTableGrants(options.config.tables),
  });
  const scheduled = createHandler(() => deps);
  const runs = new Set<Promise<UptimeProbeSummary>>();
  let stopping: Promise<void> | null = null;
  const run: LocalProbe['run'] = ({ baseUrl, at } = {}) => {
    const handler =
      baseUrl === undefined && at === undefined
        ? scheduled
        : createHandler(() => ({
            ...deps,
            ...(baseUrl === undefined ? {} : { baseUrl }),
            ...(at === undefined ? {} : { clock: { now: () => at } }),
          }));
    const running = invoking.run('uptime-probe', () =>
      handler({}, invocationContext('uptime-probe', 60_000) as Context),
    );
    runs.add(running);
    void running.finally(() => runs.delete(running)).catch(() => {});
    return running;
  };
  let timer: NodeJS.Timeout | null = null;
  if (options.intervalMs > 0) {
    timer = setInterval(() => {
      if (stopping) return;
      run().catch((error: unknown) => options.log.error('uptime probe failed', { error }));
    }, options.intervalMs);
    timer.unref();
  }
  return {
    run,
    // The stack stops it first, before the gateway drains (a round then would file the drain as an outage), and
    // again with the rest: once is enough.
    stop: () => {
      stopping ??= (async () => {
        if (timer) clearInterval(timer);
        await Promise.allSettled([...runs]);
        deps.close();
      })();
      return stopping;
    },
  };
};
