import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localClientConfig } from '#local/emulators.ts';
import { startTestStack, type TestStack } from '#test/stack.ts';

/**
 * The local host serves the site from the S3 emulator, as CloudFront does from the bucket. A reader that leaves
 * mid-download must not keep the S3 response it was reading: paused, it held one of the S3 client's 50 sockets, and
 * once they were all held every later page hung.
 */
let t: TestStack;
let s3: S3Client;
beforeAll(async () => {
  t = await startTestStack();
  s3 = new S3Client({ ...localClientConfig(t.stack.emulators.s3), forcePathStyle: true });
  // Large enough that the reply cannot all sit in socket and stream buffers when its reader leaves.
  await s3.send(
    new PutObjectCommand({
      Bucket: t.stack.resources.siteBucket,
      Key: 'big.bin',
      Body: Buffer.alloc(8 * 1024 * 1024, 7),
      ContentType: 'application/octet-stream',
    }),
  );
});
afterAll(async () => {
  s3?.destroy();
  await t?.stop();
});

describe('the local site, read by clients that leave mid-download', () => {
  it('still serves every page after more readers left than the S3 client has sockets', async () => {
    for (let i = 0; i < 60; i++) {
      const leaving = new AbortController();
      const res = await fetch(`${t.stack.url}/big.bin`, { signal: leaving.signal });
      expect(res.status).toBe(200);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      await reader.read();
      leaving.abort();
      await reader.cancel().catch(() => {});
    }
    const page = await fetch(`${t.stack.url}/`, { signal: AbortSignal.timeout(5_000) });
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('<html');
  });
});
