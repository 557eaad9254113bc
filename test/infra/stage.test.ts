import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  LAMBDA_PAYLOAD_LIMIT_BYTES,
  loadConfig,
  MAX_AUDIO_BODY_LIMIT_BYTES,
  MAX_CACHE_TTL_MS,
  MAX_JSON_BODY_LIMIT_BYTES,
  MAX_UPSTREAM_ATTEMPTS,
  TUNABLE_ENV,
} from '#functions/config.ts';
import { DEFAULT_SCHEDULES, SETTLEMENT_MAX_CONCURRENCY, stageConfig } from '#lib/stage.ts';

/** Context as `cdk.json` and `-c key=value` give it (command-line values are always strings). */
const config = (context: Record<string, unknown> = {}) => stageConfig((key) => context[key]);

describe('stageConfig', () => {
  it('defaults to the dev stage with the documented settings', () => {
    expect(config()).toEqual({
      stage: 'dev',
      production: false,
      prefix: 'svc-dev',
      priceMinMargin: undefined,
      logLevel: 'info',
      logRetentionDays: 30,
      schedules: DEFAULT_SCHEDULES,
      providerSecrets: [],
      alarmEmail: undefined,
      cdnReadTimeoutSeconds: 60,
      functionEnv: {},
      settlementReservedConcurrency: 0,
    });
  });

  it('reserves the settlement consumer’s concurrency in production, unless told otherwise', () => {
    expect(config({ stage: 'prod', alarmEmail: 'none' }).settlementReservedConcurrency).toBe(
      SETTLEMENT_MAX_CONCURRENCY,
    );
    expect(
      config({ stage: 'prod', alarmEmail: 'none', settlementReservedConcurrency: '0' })
        .settlementReservedConcurrency,
    ).toBe(0);
    expect(config({ settlementReservedConcurrency: '200' }).settlementReservedConcurrency).toBe(200);
    // Under the event source's own maximum, throttling would begin before it does.
    expect(() => config({ settlementReservedConcurrency: '10' })).toThrow(/settlementReservedConcurrency/);
  });

  it('refuses a stream keep-alive as long as the CDN waits: quiet streams would be cut first', () => {
    expect(() => config({ functionEnv: { STREAM_KEEP_ALIVE_MS: '60000' } })).toThrow(/STREAM_KEEP_ALIVE_MS/);
    expect(() => config({ cdnReadTimeoutSeconds: '10' })).toThrow(/cdnReadTimeoutSeconds \(10 s\)/);
    expect(
      config({ cdnReadTimeoutSeconds: '20', functionEnv: { STREAM_KEEP_ALIVE_MS: '5000' } }),
    ).toMatchObject({
      cdnReadTimeoutSeconds: 20,
    });
  });

  it('treats prod and production as production stages, with a year of logs, unless told otherwise', () => {
    expect(config({ stage: 'prod', alarmEmail: 'none' })).toMatchObject({
      production: true,
      logRetentionDays: 365,
    });
    expect(config({ stage: 'production', alarmEmail: 'none' }).production).toBe(true);
    expect(config({ stage: 'eu-live', production: 'true', alarmEmail: 'none' }).production).toBe(true);
    expect(config({ stage: 'prod', production: false }).production).toBe(false);
  });

  it('reads the margin, schedules, secrets and retention from strings as -c passes them', () => {
    const stage = config({
      stage: 'staging',
      priceMinMargin: '0.25',
      usageReportSchedule: 'rate(1 minute)',
      priceSyncSchedule: 'cron(0 3 * * ? *)',
      providerSecrets: 'svc/openai/key-1, svc/groq/key-1,svc/openai/key-1',
      logRetentionDays: '90',
      logLevel: 'debug',
    });
    expect(stage).toMatchObject({
      priceMinMargin: 0.25,
      schedules: {
        holdSweeper: 'rate(5 minutes)',
        usageReport: 'rate(1 minute)',
        priceSync: 'cron(0 3 * * ? *)',
      },
      providerSecrets: ['svc/openai/key-1', 'svc/groq/key-1'],
      logRetentionDays: 90,
      logLevel: 'debug',
    });
    expect(config({ providerSecrets: ['anthropic-key'] }).providerSecrets).toEqual(['anthropic-key']);
  });

  it('passes tunable function settings through, from a JSON string or an object', () => {
    expect(config({ functionEnv: '{"HOLD_TTL_MS":"2400000","HEALTH_MIN_CALLS":10}' }).functionEnv).toEqual({
      HOLD_TTL_MS: '2400000',
      HEALTH_MIN_CALLS: '10',
    });
    expect(config({ functionEnv: { CIRCUIT_COOLDOWN_MS: 5000 } }).functionEnv).toEqual({
      CIRCUIT_COOLDOWN_MS: '5000',
    });
  });

  it.each([
    [{ stage: 'Prod' }, '"stage"'],
    [{ priceMinMargin: '-0.1' }, '"priceMinMargin"'],
    [{ priceMinMargin: 'lots' }, '"priceMinMargin"'],
    [{ holdSweeperSchedule: 'every 5 minutes' }, '"holdSweeperSchedule"'],
    [{ logRetentionDays: '45' }, '"logRetentionDays"'],
    [{ logLevel: 'verbose' }, '"logLevel"'],
    // The alarms count warn and error lines: a level that drops them would leave the alarms blind.
    [{ logLevel: 'error' }, 'the alarms count warn and error lines'],
    [{ logLevel: 'silent' }, 'the alarms count warn and error lines'],
    [{ providerSecrets: 'open ai' }, '"providerSecrets"'],
    [{ alarmEmail: 'ops' }, '"alarmEmail"'],
    [{ stage: 'prod' }, '"alarmEmail" must be given on every deploy of a production stage'],
    [{ production: 'yes' }, '"production"'],
    [{ cdnReadTimeoutSeconds: '0' }, '"cdnReadTimeoutSeconds"'],
    [{ functionEnv: '{"HOLD_TTL_MS":' }, '"functionEnv"'],
    [{ functionEnv: '{"SETTLEMENT_QUEUE_URL":"x"}' }, 'SETTLEMENT_QUEUE_URL'],
    [{ functionEnv: '{"HEALTH_FAILURE_RATE":"2"}' }, 'HEALTH_FAILURE_RATE'],
    // Shorter than the chat function's 15 minutes: the sweeper would free money a running call still holds.
    [{ functionEnv: '{"HOLD_TTL_MS":"600000"}' }, 'HOLD_TTL_MS of at least 1800000'],
  ])('fails the synth on a bad value, naming the key: %o', (context, key) => {
    expect(() => config(context)).toThrow(key);
  });
});

describe('TUNABLE_ENV (what functionEnv and npm start pass through)', () => {
  /** The names every function needs to start at all. */
  const resources = {
    ACCOUNTS_TABLE: 'a',
    BUCKETS_TABLE: 'b',
    WALLET_TABLE: 'w',
    REGISTRY_TABLE: 'r',
    USAGE_TABLE: 'u',
    SETTLEMENT_QUEUE_URL: 'q',
  };
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const documented = [...readme.matchAll(/^\| `([A-Z_]+)` \|/gm)].map((m) => m[1]);

  it('lists only settings the README documents', () => {
    for (const name of TUNABLE_ENV) expect(documented).toContain(name);
  });

  it('lists only settings the functions read (a bad value fails the cold start, naming it)', () => {
    for (const name of TUNABLE_ENV) {
      expect(() => loadConfig({ ...resources, [name]: '-1.5' }), name).toThrow(name);
    }
  });

  it('refuses a duration no timer can wait, and a failure rate of 0 (circuits would open on successes)', () => {
    const caches = ['KEY_CACHE_TTL_MS', 'ACCOUNT_CACHE_TTL_MS'];
    for (const name of TUNABLE_ENV.filter((n) => n.endsWith('_MS') && !caches.includes(n))) {
      expect(() => loadConfig({ ...resources, [name]: '3000000000' }), name).toThrow(name);
      expect(() => loadConfig({ ...resources, [name]: String(2 ** 31 - 1) }), name).not.toThrow();
    }
    expect(() => loadConfig({ ...resources, HEALTH_FAILURE_RATE: '0' })).toThrow('HEALTH_FAILURE_RATE');
  });

  it('refuses settings past what they can mean: a key trusted for hours, a body Lambda cannot take, a fan-out', () => {
    const ceilings: [string, number][] = [
      // A revoked key must stop working within minutes, however the cache is tuned.
      ['KEY_CACHE_TTL_MS', MAX_CACHE_TTL_MS],
      ['ACCOUNT_CACHE_TTL_MS', MAX_CACHE_TTL_MS],
      // A larger limit would be a promise Lambda's payload limit breaks first.
      ['MAX_JSON_BODY_BYTES', MAX_JSON_BODY_LIMIT_BYTES],
      ['MAX_AUDIO_BODY_BYTES', MAX_AUDIO_BODY_LIMIT_BYTES],
      ['UPSTREAM_MAX_ATTEMPTS', MAX_UPSTREAM_ATTEMPTS],
    ];
    for (const [name, ceiling] of ceilings) {
      expect(TUNABLE_ENV, name).toContain(name);
      expect(() => loadConfig({ ...resources, [name]: String(ceiling) }), name).not.toThrow();
      expect(() => loadConfig({ ...resources, [name]: String(ceiling + 1) }), name).toThrow(name);
    }
    expect(MAX_CACHE_TTL_MS).toBe(300_000);
    expect(LAMBDA_PAYLOAD_LIMIT_BYTES).toBe(6 * 1024 * 1024);
    // Escaped in the event, a body of ordinary text grows by a fraction; the default leaves a third for that.
    expect(MAX_JSON_BODY_LIMIT_BYTES * 1.5).toBeLessThanOrEqual(LAMBDA_PAYLOAD_LIMIT_BYTES);
    // Base64 makes the upload 4/3 as large; with the event around it, it must still fit the payload.
    expect(Math.ceil(MAX_AUDIO_BODY_LIMIT_BYTES / 3) * 4).toBeLessThan(
      LAMBDA_PAYLOAD_LIMIT_BYTES - 64 * 1024,
    );
  });
});
