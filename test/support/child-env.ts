/**
 * The gateway's own configuration and where it finds AWS. A developer's shell may set any of them — a DATA_DIR of
 * their own, or the README's deploy section's `ACCOUNTS_TABLE=svc-prod-accounts` with an `AWS_PROFILE` — and a
 * process a test starts must not inherit them: `npm start` would write the test key into the developer's store,
 * and the admin CLI prefers table variables to the test's stack file (it would read production).
 */
const OWN_CONFIGURATION =
  /^(?:AWS_.*|.*_TABLE|.*_QUEUE_URL|.*_BUCKET|LOCAL_STACK_FILE|PORT|HOST|GATEWAY_INSTANCES|DEMO_.*|METERING|CONSUMERS|REGISTRY_FILE|REGISTRY_REFRESH_MS|UPSTREAM_.*|DATA_DIR|SHUTDOWN_GRACE_MS|LOG_LEVEL|.*_CACHE_TTL_MS|HOLD_TTL_MS|MAX_.*_BYTES|STREAM_KEEP_ALIVE_MS|SETTLEMENT_.*|PRICE_MIN_MARGIN|HEALTH_.*|CIRCUIT_.*|CDN_READ_TIMEOUT_MS|REST_API_IDLE_TIMEOUT_MS)$/;

/** Whether `name` is one of the gateway's own settings (or AWS's), which a child process must get only from a test. */
export const isOwnConfiguration = (name: string): boolean => OWN_CONFIGURATION.test(name);

/** This process's environment without the gateway's own settings, plus `extra`: for the processes tests start. */
export const childEnv = (extra: Readonly<Record<string, string>> = {}): Record<string, string> => {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(process.env))
    if (value !== undefined && !isOwnConfiguration(name)) env[name] = value;
  return { ...env, ...extra };
};
