import { readdirSync, readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { extname, join, relative, sep } from 'node:path';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import {
  GetObjectCommand,
  NoSuchKey,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
} from '@aws-sdk/client-s3';
import type { Context } from 'aws-lambda';
import type { Logger } from '#adapters/logger.ts';
import type { Config } from '#functions/config.ts';
import {
  createHandler,
  createUsageReportDeps,
  type UsageReportEvent,
  type UsageReportSummary,
} from '#functions/usage-report.ts';
import { localClientConfig } from './emulators.ts';
import { invocationContext } from './function-url.ts';
import { enforceTableGrants, invoking } from './table-grants.ts';

/** The status page's files, uploaded to the site bucket at start (CloudFront serves the bucket on AWS). */
export const SITE_DIR = fileURLToPath(new URL('../../site/', import.meta.url));

const CONTENT_TYPES: Readonly<Record<string, string>> = {
  '.html': 'text/html; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.json': 'application/json',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.txt': 'text/plain; charset=utf-8',
};

/** Static files change with a deploy only; short enough that a deploy shows within minutes. */
const STATIC_CACHE_CONTROL = 'public, max-age=300';

/** What serves the site root (`/`, `/usage.json`, the page's assets) from the bucket, as CloudFront does. */
export interface SiteReader {
  /** GET and HEAD outside `/v1`: the site root, served from the bucket. */
  handles(req: IncomingMessage): boolean;
  serve(req: IncomingMessage, res: ServerResponse): Promise<void>;
  close(): void;
}

export const siteReader = (s3Endpoint: string, bucket: string): SiteReader => {
  const s3 = new S3Client({ ...localClientConfig(s3Endpoint), forcePathStyle: true });
  return {
    handles: (req) =>
      (req.method === 'GET' || req.method === 'HEAD') && !/^\/v1(?:\/|$|\?)/.test(req.url ?? '/'),
    serve: (req, res) => serveObject(s3, bucket, req, res),
    close: () => s3.destroy(),
  };
};

export interface LocalSite extends Omit<SiteReader, 'close'> {
  /** Runs the usage-report function now (it also runs on its schedule, when one is set). */
  runReport(event?: UsageReportEvent): Promise<UsageReportSummary>;
  stop(): Promise<void>;
}

export interface LocalSiteOptions {
  readonly endpoints: { readonly dynamodb: string; readonly s3: string };
  readonly bucket: string;
  /** The functions' configuration; the usage-report function gets the bucket on top of it. */
  readonly config: Config;
  /** How often the usage report runs; 0: only on demand. A scheduled site also publishes a report at start. */
  readonly reportIntervalMs: number;
  readonly log: Logger;
  readonly siteDir?: string;
}

/**
 * The site side of the local host, as CloudFront and EventBridge are on AWS: uploads `site/` to the bucket,
 * serves the site root (`/`, `/usage.json`, the page's assets) from the S3 emulator — never from disk, so what
 * is served is what was published — and runs the usage-report function on a timer.
 */
export const startLocalSite = async (options: LocalSiteOptions): Promise<LocalSite> => {
  const s3 = new S3Client({ ...localClientConfig(options.endpoints.s3), forcePathStyle: true });
  const deps = createUsageReportDeps(
    { ...options.config, siteBucket: options.bucket },
    {
      aws: {
        dynamodb: localClientConfig(options.endpoints.dynamodb),
        s3: { ...localClientConfig(options.endpoints.s3), forcePathStyle: true },
      },
      onDynamoClient: enforceTableGrants(options.config.tables),
    },
  );
  const handler = createHandler(() => deps);
  try {
    await uploadSite(s3, options.bucket, options.siteDir ?? SITE_DIR);
  } catch (error) {
    s3.destroy();
    deps.close();
    throw error;
  }

  let running: Promise<UsageReportSummary> | null = null;
  const runReport = async (event: UsageReportEvent = {}): Promise<UsageReportSummary> => {
    // One run at a time, as a function with reserved concurrency 1 would: the later one waits its turn.
    while (running) await running.catch(() => {});
    running = invoking.run('usage-report', () =>
      handler(event, invocationContext('usage-report', 60_000) as Context),
    );
    try {
      return await running;
    } finally {
      running = null;
    }
  };
  const scheduled = () =>
    runReport().catch((error: unknown) => options.log.error('usage report failed', { error }));
  let timer: NodeJS.Timeout | null = null;
  if (options.reportIntervalMs > 0) {
    void scheduled();
    timer = setInterval(scheduled, options.reportIntervalMs);
    timer.unref();
  }

  const reader = siteReader(options.endpoints.s3, options.bucket);
  return {
    handles: reader.handles,
    serve: reader.serve,
    runReport,
    stop: async () => {
      if (timer) clearInterval(timer);
      await running?.catch(() => {});
      reader.close();
      s3.destroy();
      deps.close();
    },
  };
};

const filesUnder = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name));

/** Puts every file of `dir` in the bucket under its relative path, with its content type. */
export const uploadSite = async (s3: S3Client, bucket: string, dir: string): Promise<number> => {
  const files = filesUnder(dir);
  await Promise.all(
    files.map((file) =>
      s3.send(
        new PutObjectCommand({
          Bucket: bucket,
          Key: relative(dir, file).split(sep).join('/'),
          Body: readFileSync(file),
          ContentType: CONTENT_TYPES[extname(file)] ?? 'application/octet-stream',
          CacheControl: STATIC_CACHE_CONTROL,
        }),
      ),
    ),
  );
  return files.length;
};

/** `/` → `index.html`, `/a/` → `a/index.html`; null for paths that cannot name an object. */
export const objectKey = (url: string): string | null => {
  let path: string;
  try {
    path = decodeURIComponent(new URL(url, 'http://localhost').pathname);
  } catch {
    return null;
  }
  if (path.split('/').some((part) => part === '..' || part === '.')) return null;
  // No object of the site has a control character in its name, and S3 refuses such keys outright (a 500 here).
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what this looks for
  if (/[\u0000-\u001f\u007f]/.test(path)) return null;
  const key = path.replace(/^\/+/, '');
  return key === '' || key.endsWith('/') ? `${key}index.html` : key;
};

const serveObject = async (
  s3: S3Client,
  bucket: string,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> => {
  req.resume();
  const key = objectKey(req.url ?? '/');
  if (key === null) {
    res.writeHead(400, { 'content-type': 'text/plain; charset=utf-8' }).end('Bad request\n');
    return;
  }
  try {
    const object = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    const headers: Record<string, string> = {
      'content-type': object.ContentType ?? 'application/octet-stream',
      'x-content-type-options': 'nosniff',
    };
    if (object.CacheControl) headers['cache-control'] = object.CacheControl;
    if (object.ETag) headers.etag = object.ETag;
    if (object.LastModified) headers['last-modified'] = object.LastModified.toUTCString();
    if (object.ContentLength !== undefined) headers['content-length'] = String(object.ContentLength);
    res.writeHead(200, headers);
    const body = object.Body as Readable | undefined;
    if (req.method === 'HEAD' || !body) {
      body?.destroy();
      res.end();
      return;
    }
    body.pipe(res);
    await new Promise<void>((resolve, reject) => {
      body.once('error', reject);
      res.once('close', resolve);
    });
    // A reader that left mid-download: the S3 body is unpiped, paused and still holding its socket — which the SDK's
    // pool runs out of after 50, every later page then hanging. Destroyed, its socket goes back (a no-op once read).
    body.destroy();
  } catch (error) {
    if (error instanceof NoSuchKey || (error instanceof S3ServiceException && error.name === 'NoSuchKey')) {
      res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('Not found\n');
      return;
    }
    throw error;
  }
};
