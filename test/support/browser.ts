import { readFile } from 'node:fs/promises';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * How the browser tests launch Debian's Chromium through playwright-core: headless, no sandbox (containers), no
 * GPU, and no background traffic (the machine has no internet). `CHROMIUM_PATH` points elsewhere if needed.
 */
export const CHROMIUM_LAUNCH = {
  executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
};

const SITE = new URL('../../site/', import.meta.url);
const ASSETS: Readonly<Record<string, { file: string; type: string }>> = {
  '/': { file: 'index.html', type: 'text/html; charset=utf-8' },
  '/status.css': { file: 'status.css', type: 'text/css; charset=utf-8' },
  '/status.js': { file: 'status.js', type: 'text/javascript; charset=utf-8' },
};

/**
 * The status page's own files served as they are in `site/` (the CDN's way), on loopback, with `/usage.json`
 * answered by `usage` — whatever report, or failure, a test sets.
 */
export const serveSite = async (
  usage: (res: ServerResponse) => void,
): Promise<{ readonly url: string; close(): Promise<void> }> => {
  const server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    if (path === '/usage.json') return usage(res);
    const asset = ASSETS[path];
    if (!asset) {
      res.writeHead(404).end();
      return;
    }
    readFile(new URL(asset.file, SITE)).then(
      (file) => res.writeHead(200, { 'content-type': asset.type }).end(file),
      () => res.writeHead(500).end(),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
};
