import { PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import type { SitePublisher } from '#core/usage-report.ts';

/** Publishes generated files to the site bucket, which CloudFront (or the local host) serves at the root. */
export class S3SitePublisher implements SitePublisher {
  readonly #client: S3Client;
  readonly #bucket: string;

  constructor(client: S3Client, bucket: string) {
    this.#client = client;
    this.#bucket = bucket;
  }

  async putJson(key: string, body: string, cacheControl: string): Promise<void> {
    await this.#client.send(
      new PutObjectCommand({
        Bucket: this.#bucket,
        Key: key,
        Body: body,
        ContentType: 'application/json',
        CacheControl: cacheControl,
      }),
    );
  }
}
