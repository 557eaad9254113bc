/**
 * CLI for the upstream simulator:
 *
 *     node bin/upstream-simulator.ts [--port 8790] [--host 127.0.0.1] [--latency-ms 50]
 *                                    [--prompt-caching-models gpt-4o,gpt-4o-mini]
 *
 * Prints `upstream simulator listening on <url>` and runs until SIGINT/SIGTERM; a bad option, or a port in use, is
 * one line on stderr and exit status 2. Importing this file has
 * no side effects; use `startSimulator` from `#sim/server.ts` in code.
 */
import { parseArgs } from 'node:util';
import { startSimulator } from '#sim/server.ts';

/** Default port of the CLI (the library defaults to an ephemeral port). */
export const DEFAULT_CLI_PORT = 8790;

/** Starts the simulator from command-line arguments and stops it cleanly on SIGINT/SIGTERM. */
export async function main(argv: readonly string[] = process.argv.slice(2)): Promise<void> {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      port: { type: 'string' },
      host: { type: 'string' },
      'latency-ms': { type: 'string' },
      'prompt-caching-models': { type: 'string' },
    },
  });
  const simulator = await startSimulator({
    port: integerOption(values.port, 'port') ?? DEFAULT_CLI_PORT,
    host: values.host,
    latencyMs: integerOption(values['latency-ms'], 'latency-ms'),
    promptCachingModels: values['prompt-caching-models']?.split(',').filter((m) => m !== ''),
  });
  console.log(`upstream simulator listening on ${simulator.url}`);

  const stop = (): void => {
    void simulator.close().then(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

function integerOption(value: string | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0)
    throw new Error(`--${name} must be a non-negative integer, got ${value}`);
  return n;
}

const USAGE =
  'usage: npm run simulator -- [--port 8790] [--host 127.0.0.1] [--latency-ms 50] [--prompt-caching-models a,b]';

if (import.meta.main) {
  if (process.argv.slice(2).some((arg) => arg === '--help' || arg === '-h')) {
    console.log(USAGE);
    process.exit(0);
  }
  // A bad option or a port in use is the operator's to fix: one line saying which, not a stack trace.
  await main().catch((error: unknown) => {
    const message = error instanceof Error ? error.message : String(error);
    console.error(`upstream simulator: ${message}\n${USAGE}`);
    process.exit(2);
  });
}
