import {
  GetObjectCommand,
  NoSuchKey,
  PutObjectCommand,
  type S3Client,
  S3ServiceException,
} from '@aws-sdk/client-s3';
import type { SitePublisher, StoredObject } from '#core/usage-report.ts';

/**
 * What S3 answers a conditional put whose condition no longer holds: 412 (the object changed, or one appeared where
 * none was expected), 409 (a concurrent conditional write won), 404 (the object named by `If-Match` is gone).
 */
const LOST_RACE: ReadonlySet<string> = new Set([
  'PreconditionFailed',
  'ConditionalRequestConflict',
  'NoSuchKey',
]);

const isMissing = (error: unknown): boolean =>
  error instanceof NoSuchKey || (error instanceof S3ServiceException && error.name === 'NoSuchKey');

/** Publishes generated files to the site bucket, which CloudFront (or the local host) serves at the root. */
export class S3SitePublisher implements SitePublisher {
  readonly #client: S3Client;
  readonly #bucket: string;

  constructor(client: S3Client, bucket: string) {
    this.#client = client;
    this.#bucket = bucket;
  }

  async get(key: string): Promise<StoredObject | null> {
    try {
      const object = await this.#client.send(new GetObjectCommand({ Bucket: this.#bucket, Key: key }));
      const body = (await object.Body?.transformToString('utf-8')) ?? '';
      return object.ETag ? { body, etag: object.ETag } : { body };
    } catch (error) {
      if (isMissing(error)) return null;
      throw error;
    }
  }

  async putJson(key: string, body: string, cacheControl: string, expected?: string | null): Promise<boolean> {
    try {
      await this.#client.send(
        new PutObjectCommand({
          Bucket: this.#bucket,
          Key: key,
          Body: body,
          ContentType: 'application/json',
          CacheControl: cacheControl,
          ...(expected === undefined ? {} : expected === null ? { IfNoneMatch: '*' } : { IfMatch: expected }),
        }),
      );
      return true;
    } catch (error) {
      if (expected !== undefined && error instanceof S3ServiceException && LOST_RACE.has(error.name))
        return false;
      throw error;
    }
  }
}
