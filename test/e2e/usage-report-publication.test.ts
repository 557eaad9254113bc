import { randomBytes } from 'node:crypto';
import {
  CreateBucketCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import type { Context } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createLogger } from '#adapters/logger.ts';
import { S3SitePublisher } from '#adapters/s3-site.ts';
import type { SitePublisher, StoredObject, UsageReport, UsageSource } from '#core/usage-report.ts';
import {
  buildReport,
  createHandler,
  publishNewest,
  type UsageReportDeps,
  type UsageReportEvent,
  type UsageReportSummary,
} from '#functions/usage-report.ts';
import { localClientConfig } from '#local/emulators.ts';
import { tickAt } from '#test/usage.ts';

/**
 * Which report ends up online when runs overlap or an operator replays a moment (ADR 0008, "Newest wins" and
 * "Replays"): the usage-report handler against a bucket of the S3 emulator the local host serves the site from. The
 * usage table is stood in for by an empty source — what the report says is usage-report.test.ts's business; here
 * only its `generated_at` matters.
 */

const MIN = 60_000;
const KEY = 'usage.json';
/** A whole minute ten minutes ago: every time below is in the past, as a real tick's is. */
const T = Math.floor(Date.now() / MIN) * MIN - 10 * MIN;
const iso = (ms: number) => new Date(ms).toISOString();

const quiet: UsageSource = { rows: async () => [], minuteRows: async () => [], recentFaults: async () => [] };

let s3: S3Client;
let site: S3SitePublisher;
let bucket: string;

beforeAll(async () => {
  s3 = new S3Client({ ...localClientConfig(inject('emulators').s3), forcePathStyle: true });
  bucket = `t${randomBytes(4).toString('hex')}-site`;
  await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  site = new S3SitePublisher(s3, bucket);
});
afterAll(() => s3?.destroy());

/** A run of the function whose clock reads `now`, reading `usage`. */
const run = (now: number, event: UsageReportEvent = {}, usage: UsageSource = quiet) => {
  const deps: UsageReportDeps = {
    usage,
    models: async () => [],
    site,
    clock: { now: () => now },
    log: createLogger('silent'),
  };
  return createHandler(() => deps)(event, {} as Context) as Promise<UsageReportSummary>;
};

/** What the bucket holds at usage.json now. */
const online = async (): Promise<{ stored: StoredObject; generatedAt: string }> => {
  const stored = await site.get(KEY);
  if (!stored) throw new Error('no usage.json in the bucket');
  return { stored, generatedAt: (JSON.parse(stored.body) as UsageReport).generated_at };
};

describe('publishing usage.json', () => {
  it('publishes a run as of its start, as JSON with a short cache lifetime', async () => {
    expect(await run(T)).toMatchObject({ outcome: 'published', key: KEY, generatedAt: iso(T) });
    expect((await online()).generatedAt).toBe(iso(T));
    const head = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: KEY }));
    expect(head.ContentType).toBe('application/json');
    expect(head.CacheControl).toBe('public, max-age=60');
  });

  it('leaves the newer report online when a slow run finishes after the next one', async () => {
    // The slow run starts at T + 1 min and is held in its reads until the next run, at T + 2 min, has published.
    let release = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const slowUsage: UsageSource = {
      ...quiet,
      rows: async () => {
        await held;
        return [];
      },
    };
    const slow = run(T + MIN, {}, slowUsage);
    expect(await run(T + 2 * MIN)).toMatchObject({ outcome: 'published', generatedAt: iso(T + 2 * MIN) });
    release();
    expect(await slow).toMatchObject({ outcome: 'superseded', key: null, generatedAt: iso(T + MIN) });
    expect((await online()).generatedAt).toBe(iso(T + 2 * MIN));
  });

  it('publishes a tick of the schedule as of its time, again for the same time, but not over a newer one', async () => {
    const clock = T + 9 * MIN;
    // EventBridge Scheduler's default notification, which the deployed schedule sends (it sets no input).
    const notification = {
      version: '0',
      id: '5c6b1a52-2f4e-4a4c-9d6e-0c5d2b1f7a10',
      'detail-type': 'Scheduled Event',
      source: 'aws.scheduler',
      account: '123456789012',
      time: iso(T + 3 * MIN),
      region: 'us-east-1',
      resources: ['arn:aws:scheduler:us-east-1:123456789012:schedule/default/svc-test-usage-report'],
      detail: '{}',
    };
    expect(await run(clock, notification)).toMatchObject({
      outcome: 'published',
      generatedAt: iso(T + 3 * MIN),
    });
    // A rerun of the same tick counts what settled since: it is written.
    expect(await run(clock, tickAt(T + 3 * MIN))).toMatchObject({ outcome: 'published' });
    // A tick delivered late, after a later one was published, is not.
    expect(await run(clock, tickAt(T + 2 * MIN + 30_000))).toMatchObject({ outcome: 'superseded' });
    expect((await online()).generatedAt).toBe(iso(T + 3 * MIN));
    // An EventBridge rule's scheduled event is a tick too.
    const rule = { source: 'aws.events', 'detail-type': 'Scheduled Event', time: iso(T + 4 * MIN) };
    expect(await run(clock, rule)).toMatchObject({ outcome: 'published', generatedAt: iso(T + 4 * MIN) });
    expect((await online()).generatedAt).toBe(iso(T + 4 * MIN));
  });

  it('returns a replay of an operator’s past time, and leaves usage.json as it was', async () => {
    const before = await online();
    const replayed = await run(T + 9 * MIN, { time: iso(T - 3 * 60 * MIN) });
    expect(replayed).toMatchObject({ outcome: 'replayed', key: null, generatedAt: iso(T - 3 * 60 * MIN) });
    expect(replayed.report?.generated_at).toBe(iso(T - 3 * 60 * MIN));
    expect(replayed.report?.window.end).toBe(iso(T - 3 * 60 * MIN));
    // Even when the report online is older than the moment replayed: a replay is never the public report.
    const older = await run(T + 9 * MIN, { time: iso(T + 6 * MIN) });
    expect(older).toMatchObject({ outcome: 'replayed', key: null });
    expect(await online()).toEqual(before);
    // Nor is it published anywhere else in the bucket, which the site serves whole.
    const listed = await s3.send(new ListObjectsV2Command({ Bucket: bucket }));
    expect((listed.Contents ?? []).map((o) => o.Key)).toEqual([KEY]);
  });

  it('replaces a report dated past its own clock (a tick with a bad time), or one that names no time', async () => {
    const clock = T + 9 * MIN;
    const put = (body: string) =>
      s3.send(
        new PutObjectCommand({ Bucket: bucket, Key: KEY, Body: body, ContentType: 'application/json' }),
      );
    await put(JSON.stringify({ generated_at: iso(clock + 24 * 60 * MIN) }));
    expect(await run(clock)).toMatchObject({ outcome: 'published' });
    expect((await online()).generatedAt).toBe(iso(clock));
    // A minute ahead is the clocks differing: that report stands.
    await put(JSON.stringify({ generated_at: iso(clock + MIN) }));
    expect(await run(clock)).toMatchObject({ outcome: 'superseded' });
    for (const body of ['not json', '{}', JSON.stringify({ generated_at: 'yesterday' })]) {
      await put(body);
      expect(await run(clock), body).toMatchObject({ outcome: 'published' });
    }
  });
});

describe('publishNewest', () => {
  /** A bucket in memory that honours conditional puts as S3 does (the emulator ignores If-Match). */
  const memorySite = () => {
    let object: Required<StoredObject> | null = null;
    let version = 0;
    /** Runs once, between the next read and the put that follows it: another run's write. */
    let between: (() => void) | null = null;
    const store = (body: string) => {
      object = { body, etag: `"v${++version}"` };
    };
    const publisher: SitePublisher = {
      get: async () => {
        const read = object;
        between?.();
        between = null;
        return read;
      },
      putJson: async (_key, body, _cacheControl, expected) => {
        const current: Required<StoredObject> | null = object;
        if (expected !== undefined && (expected === null ? current !== null : current?.etag !== expected))
          return false;
        store(body);
        return true;
      },
    };
    return {
      publisher,
      store,
      meanwhile: (write: () => void) => {
        between = write;
      },
      body: () => (object as StoredObject | null)?.body,
    };
  };
  const reportAt = async (at: number) =>
    buildReport(
      {
        usage: quiet,
        models: async () => [],
        site: {} as SitePublisher,
        clock: { now: () => at },
        log: createLogger('silent'),
      },
      at,
    );

  it('reads again when another run wrote between its read and its put, and leaves a newer report there', async () => {
    const mine = await reportAt(T + MIN);
    const newer = JSON.stringify(await reportAt(T + 2 * MIN));
    const site = memorySite();
    site.store(JSON.stringify(await reportAt(T)));
    site.meanwhile(() => site.store(newer));
    expect(await publishNewest(site.publisher, mine, T + 2 * MIN)).toBe('superseded');
    expect(site.body()).toBe(newer);
  });

  it('reads again when another run wrote an older report meanwhile, and puts its own over it', async () => {
    const mine = await reportAt(T + 2 * MIN);
    const site = memorySite();
    site.meanwhile(() => site.store(JSON.stringify({ generated_at: iso(T) })));
    expect(await publishNewest(site.publisher, mine, T + 2 * MIN)).toBe('published');
    expect(site.body()).toBe(JSON.stringify(mine));
  });
});
