/**
 * `npm start`: the gateway on one machine, on its embedded defaults — DynamoDB Local, the SQS and S3
 * emulators, the upstream simulator, and the Lambda handlers behind a local Function URL. Configuration is
 * by environment (see README): PORT, HOST, GATEWAY_INSTANCES, DEMO_API_KEY, DEMO_BALANCE_USD, REGISTRY_FILE, UPSTREAM_BASE_URL,
 * UPSTREAM_API_KEY, UPSTREAM_MODEL, DATA_DIR, SHUTDOWN_GRACE_MS, LOG_LEVEL, and the functions' own tunables. On
 * SIGINT/SIGTERM/SIGHUP it finishes and settles the calls under way, then stops cleanly.
 */
import { resolve } from 'node:path';
import { carriesMoreThanAPath } from '#adapters/registry-codec.ts';
import { MAX_BALANCE_NANO } from '#core/accounting.ts';
import { isWellFormedKey } from '#core/api-keys.ts';
import { NANO_PER_USD, nanoToUsd, parseUsd } from '#core/pricing.ts';
import { loadConfig, TUNABLE_ENV } from '#functions/config.ts';
import { CONFIG_PLACEHOLDERS, holdTtlProblem } from '#lib/stage.ts';
import { externalDeploymentIssues, readCatalog } from '#local/seed.ts';
import { type LocalStack, startLocalStack } from '#local/stack.ts';
import { removeOwnStackFile, writeStackFile } from '#local/stack-file.ts';

/** The demo account starts with this much (it also makes the account trusted: its first top-up). */
const DEFAULT_DEMO_BALANCE_USD = 10;

const env = process.env;
// Annotated so that TypeScript narrows after a call (a `never` call ends the flow only when its type is declared).
const fail: (message: string) => never = (message) => {
  console.error(`npm start: ${message}`);
  process.exit(1);
};

const port = Number(env.PORT ?? 8787);
if (!Number.isInteger(port) || port < 0 || port > 65535)
  fail(`PORT must be a port number, got "${env.PORT}"`);
if (env.DEMO_API_KEY && !isWellFormedKey(env.DEMO_API_KEY)) {
  fail('DEMO_API_KEY must be svc_live_ followed by 16–128 letters or digits');
}
// Read digit for digit, as the admin CLI reads top-ups: through a float a nine-decimal amount can land a
// nano-dollar off.
const demoBalanceNano = parseUsd(env.DEMO_BALANCE_USD ?? String(DEFAULT_DEMO_BALANCE_USD));
const maxBalanceUsd = nanoToUsd(MAX_BALANCE_NANO);
if (
  demoBalanceNano === null ||
  (demoBalanceNano !== 0 && demoBalanceNano < NANO_PER_USD) ||
  demoBalanceNano > MAX_BALANCE_NANO
) {
  fail(
    `DEMO_BALANCE_USD must be a decimal USD amount with at most nine decimals, 0 or from 1 (the minimum top-up) to ${maxBalanceUsd} (the most a wallet holds), got "${env.DEMO_BALANCE_USD}"`,
  );
}
// Gateway instances on the port (each its own container, as concurrent Lambda instances are). One by default:
// on a 2-CPU machine a second one lengthens the p99 tail with 16 clients (more threads than CPUs), and what it
// gains with 64 is within the run-to-run spread (ADR 0003); machines with more cores may set more.
const instances = Number(env.GATEWAY_INSTANCES ?? 1);
if (!Number.isInteger(instances) || instances < 1 || instances > 64)
  fail(`GATEWAY_INSTANCES must be a whole number from 1 to 64, got "${env.GATEWAY_INSTANCES}"`);
if (env.METERING && env.METERING !== 'on' && env.METERING !== 'off') fail(`METERING must be on or off`);
if (env.CONSUMERS && env.CONSUMERS !== 'on' && env.CONSUMERS !== 'off') fail(`CONSUMERS must be on or off`);
if (env.REGISTRY_FILE && env.UPSTREAM_BASE_URL) {
  fail("set REGISTRY_FILE or UPSTREAM_BASE_URL, not both (a registry file names each deployment's upstream)");
}
/** Whether a URL parses, as http(s), with a host: anything else starts a stack whose every call fails. */
const httpUrl = (raw: string): boolean => {
  try {
    const url = new URL(raw);
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== '';
  } catch {
    return false;
  }
};
if (env.UPSTREAM_BASE_URL) {
  // What comes before an `@` may be a password: never echoed, here or in the banner.
  if (!httpUrl(env.UPSTREAM_BASE_URL))
    fail(
      `UPSTREAM_BASE_URL must be an http(s) URL, got "${env.UPSTREAM_BASE_URL.replace(/^[\s\S]*@/, '…@')}"`,
    );
  // The registry's own rule, said here in npm start's terms: the key has its own setting.
  if (carriesMoreThanAPath(env.UPSTREAM_BASE_URL))
    fail(
      'UPSTREAM_BASE_URL must not carry credentials, a query or a fragment: give the key in UPSTREAM_API_KEY',
    );
  // Whatever else the registry refuses of the deployments it would seed, before anything starts.
  const issues = externalDeploymentIssues(readCatalog(), env.UPSTREAM_BASE_URL, {
    withKey: Boolean(env.UPSTREAM_API_KEY),
    ...(env.UPSTREAM_MODEL ? { upstreamModel: env.UPSTREAM_MODEL } : {}),
  });
  if (issues) fail(`UPSTREAM_BASE_URL, UPSTREAM_API_KEY and UPSTREAM_MODEL cannot serve: ${issues}`);
}

const functionEnv: Record<string, string> = { LOG_LEVEL: 'warn' };
// Every documented function setting may come from the shell, as a Lambda's configuration would set it.
for (const name of ['LOG_LEVEL', 'PRICE_MIN_MARGIN', ...TUNABLE_ENV])
  if (env[name]) functionEnv[name] = env[name];
// Each setting is checked as the functions will read it, before anything starts: a bad LOG_LEVEL or
// MAX_JSON_BODY_BYTES was refused only once the emulators and the simulator were up. The resource names are the
// stack's to give; stand-ins here, as the stacks' own check uses.
let holdTtlMs = 0;
try {
  ({ holdTtlMs } = loadConfig({ ...CONFIG_PLACEHOLDERS, ...functionEnv }));
} catch (error) {
  fail(error instanceof Error ? error.message : String(error));
}
// The local functions run with their Lambda timeouts, so a hold must outlive them here as on AWS (the stacks
// refuse the same value at synth).
if (functionEnv.HOLD_TTL_MS) {
  const problem = holdTtlProblem(holdTtlMs);
  if (problem) fail(`HOLD_TTL_MS must be ${problem}, got "${env.HOLD_TTL_MS}"`);
}

/**
 * How long a stop waits for the requests under way to finish, and then for the consumer to settle the queue.
 * The local settlement queue lives in memory: a record still on it when the process ends is a call served and
 * never charged (with DATA_DIR the wallet outlives the queue). A second signal stops at once.
 */
const shutdownGraceMs = Number(env.SHUTDOWN_GRACE_MS ?? 30_000);
if (!Number.isInteger(shutdownGraceMs) || shutdownGraceMs < 0 || shutdownGraceMs > 3_600_000)
  fail(
    `SHUTDOWN_GRACE_MS must be a whole number of milliseconds up to 3600000, got "${env.SHUTDOWN_GRACE_MS}"`,
  );

const signalExitCode = (signal: NodeJS.Signals) =>
  128 + (signal === 'SIGINT' ? 2 : signal === 'SIGHUP' ? 1 : 15);

// Installed before start-up: a signal that arrives while the emulators start would otherwise end the process
// without its 'exit' event, and the DynamoDB Local JVM (stopped from that event) would outlive it.
let stack: LocalStack | null = null;
/** When the first stop signal came (0: none yet). */
let stoppingSince = 0;
/**
 * One Ctrl-C under `npm start` arrives twice: the terminal signals the whole process group, and npm forwards
 * its own copy. A repeat this soon is that echo, not a person asking to stop now.
 */
const SIGNAL_ECHO_MS = 500;
const shutdown = async (signal: NodeJS.Signals) => {
  // The exit hook stops the JVM, however the process ends.
  if (!stack) process.exit(signalExitCode(signal));
  if (stoppingSince > 0) {
    if (Date.now() - stoppingSince < SIGNAL_ECHO_MS) return;
    console.log(`${signal}: stopping now, without waiting for requests or settlements`);
    process.exit(signalExitCode(signal));
  }
  stoppingSince = Date.now();
  console.log(
    `${signal}: finishing requests under way and settling them (up to ${shutdownGraceMs / 1000} s each); signal again to stop now`,
  );
  removeOwnStackFile();
  await stack.stop({ graceMs: shutdownGraceMs });
  console.log('stopped');
  process.exit(0);
};
// SIGHUP too: the JVM has its own process group (emulators.ts), so a closed terminal reaches only this process.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const)
  process.on(signal, () => void shutdown(signal));

const started = Date.now();
stack = await startLocalStack({
  port,
  host: env.HOST ?? '127.0.0.1',
  ...(env.DATA_DIR ? { dataDir: resolve(env.DATA_DIR) } : {}),
  ...(env.DEMO_API_KEY ? { demoApiKey: env.DEMO_API_KEY } : {}),
  demoBalanceNano,
  instances,
  metering: env.METERING !== 'off',
  // Benchmark only: without the settlement consumer and the sweeper, records stay on the queue.
  consumers: env.CONSUMERS !== 'off',
  // The file's `env:` key references resolve from this process's environment, as on Lambda.
  ...(env.REGISTRY_FILE ? { registryFile: resolve(env.REGISTRY_FILE), secretEnv: env } : {}),
  ...(env.UPSTREAM_BASE_URL ? { upstreamBaseUrl: env.UPSTREAM_BASE_URL } : {}),
  ...(env.UPSTREAM_API_KEY ? { upstreamApiKey: env.UPSTREAM_API_KEY } : {}),
  ...(env.UPSTREAM_MODEL ? { upstreamModel: env.UPSTREAM_MODEL } : {}),
  functionEnv,
  log: (line) => console.log(line),
}).catch((error: unknown) => fail(error instanceof Error ? error.message : String(error)));

// A part of the stack that dies on its own (DynamoDB Local killed by the OOM killer, an emulator thread's uncaught
// error) ends npm start, saying which, rather than leave a gateway answering 503s or never settling.
void stack.lost.then(async (error) => {
  if (stoppingSince > 0) return;
  stoppingSince = Date.now();
  console.error(`npm start: ${error.message}; stopping`);
  removeOwnStackFile();
  // A short drain: what still runs may still finish and settle (an external upstream's streams when only the
  // simulator died); when the store or the queue is gone, it ends at the grace's end.
  await stack?.stop({ graceMs: Math.min(shutdownGraceMs, 5_000) }).catch(() => {});
  process.exit(1);
});

// Lets `npm run admin` find this stack's emulators and tables while it runs.
const displaced = writeStackFile({
  url: stack.url,
  emulators: stack.emulators,
  resources: stack.resources,
  simulatorUrl: stack.simulatorUrl,
});
if (displaced)
  console.log(
    `note: npm run admin now manages this stack, no longer the one still running at ${displaced} (one checkout, one stack file)`,
  );

// An empty demo wallet pays for nothing: the example then calls the free model instead of answering 402.
const tryModel = stack.demoBalanceNano === 0 && env.METERING !== 'off' ? 'svc-free-famA' : 'famA-v4.1-flash';
console.log(`
gateway listening on ${stack.url}/v1  (${instances} instance${instances === 1 ? '' : 's'}, ready in ${Date.now() - started} ms)
status page: ${stack.url}/  (usage.json ${env.CONSUMERS === 'off' ? 'not republished: CONSUMERS=off' : 'republished every 5 minutes'})
${env.REGISTRY_FILE ? `registry: ${env.REGISTRY_FILE}\n` : ''}upstream: ${stack.simulatorUrl ? `simulator at ${stack.simulatorUrl}` : (env.UPSTREAM_BASE_URL ?? 'as the registry file says')}
demo API key (account acct_demo): ${env.DEMO_API_KEY ? '(from DEMO_API_KEY)' : stack.demoApiKey}${stack.revokedDemoKeys > 0 ? '  (the one the last start on this DATA_DIR generated is revoked)' : ''}
demo wallet: ${nanoToUsd(stack.demoBalanceNano)} USD${env.DEMO_BALANCE_USD && stack.demoFundedBefore ? '  (funded by an earlier start on this DATA_DIR: DEMO_BALANCE_USD credits only a new demo wallet)' : ''}${env.METERING === 'off' ? '  — METERING=off: no limits, no holds (benchmark comparison only)' : ''}${env.CONSUMERS === 'off' ? '\nCONSUMERS=off: settlement records stay on the queue, nothing is debited (benchmark comparison only)' : ''}

try it:
  curl ${stack.url}/v1/chat/completions -H "Authorization: Bearer ${env.DEMO_API_KEY ? '$DEMO_API_KEY' : stack.demoApiKey}" \\
    -H "Content-Type: application/json" -d '{"model":"${tryModel}","messages":[{"role":"user","content":"Hello"}]}'
`);
