import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { S3Client } from '@aws-sdk/client-s3';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { S3SitePublisher } from '#adapters/s3-site.ts';
import type { UsageReport } from '#core/usage-report.ts';
import { USAGE_REPORT_CACHE_CONTROL } from '#functions/usage-report.ts';
import { localClientConfig } from '#local/emulators.ts';
import { CHROMIUM_LAUNCH } from '#test/browser.ts';
import { NO_CIRCUIT_BREAKING, startTestStack, type TestStack } from '#test/stack.ts';
import { fetchUsage, settledReport, withEmptyRegistry } from '#test/usage.ts';

/**
 * The status page as a visitor sees it: Debian's Chromium, headless, driven by playwright-core, against the
 * local host `npm start` runs — which serves the page and `usage.json` from the site bucket in the S3 emulator.
 */

const ARTIFACTS = new URL('../../.artifacts/', import.meta.url);
const integer = new Intl.NumberFormat('en-US');

/** The little of the browser's globals the page-side callbacks use. */
interface PageElement {
  readonly tagName: string;
  readonly className: string;
  readonly textContent: string | null;
  getBoundingClientRect(): { readonly right: number };
}
interface BrowserGlobals {
  readonly document: {
    readonly documentElement: { readonly scrollWidth: number; readonly clientWidth: number };
    querySelectorAll(selector: string): Iterable<PageElement>;
  };
  getComputedStyle(element: unknown, pseudo: string): { readonly content: string };
}

let t: TestStack;
let browser: Browser;
let report: UsageReport;

const chat = (model: string) =>
  t.post('/chat/completions', { model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 12 });

beforeAll(async () => {
  t = await startTestStack({
    consumers: true,
    usageReportIntervalMs: 0,
    functionEnv: NO_CIRCUIT_BREAKING,
  });
  // Something in every section: successes on two models, a caller's error, an upstream fault, an incident.
  for (let i = 0; i < 3; i++) expect((await chat('famA-v4.1-flash')).status).toBe(200);
  expect((await chat('svc-auto')).status).toBe(200);
  expect(
    (
      await t.post(
        '/chat/completions',
        { model: 'svc-auto', messages: [{ role: 'user', content: 'hi' }] },
        { authorization: 'Bearer svc_live_nopeNOPEnope00000000', 'content-type': 'application/json' },
      )
    ).status,
  ).toBe(401);
  t.simulator.setFaults('sim-a', { error: 'server_error' });
  t.simulator.setFaults('sim-b', { error: 'server_error' });
  expect((await chat('famB-5.3')).status).toBe(500);
  t.simulator.resetFaults();
  await withEmptyRegistry(t, async () => expect((await chat('famA-v4.1-flash')).status).toBe(503));
  // As of a minute on: the report judges whole minutes only, and the outage's minute is the one under way now.
  report = (await settledReport(t, 7, Date.now() + 60_000, 20_000, 2)).report;
  browser = await chromium.launch(CHROMIUM_LAUNCH);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await t?.stop();
});

/** Opens the page, recording console errors, page errors and every host it talks to. */
const open = async (viewport: { width: number; height: number }) => {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  const problems: string[] = [];
  const hosts = new Set<string>();
  page.on('console', (message) => {
    if (message.type() === 'error' || message.type() === 'warning') problems.push(message.text());
  });
  page.on('pageerror', (error) => problems.push(error.message));
  page.on('request', (request) => hosts.add(new URL(request.url()).host));
  page.on('requestfailed', (request) => problems.push(`${request.url()}: ${request.failure()?.errorText}`));
  const response = await page.goto(`${t.stack.url}/`);
  expect(response?.status()).toBe(200);
  await page.waitForSelector('body[data-loaded="true"]', { timeout: 10_000 });
  return { page, problems, hosts, close: () => context.close() };
};

const texts = (page: Page, selector: string) => page.locator(selector).allTextContents();

describe('the status page', () => {
  it('renders the figures of usage.json, with no console error and no request beyond loopback', async () => {
    const { page, problems, hosts, close } = await open({ width: 1280, height: 900 });
    try {
      const field = (name: string) => page.locator(`[data-field="${name}"]`).textContent();
      expect(await field('totals.requests')).toBe(integer.format(report.totals.requests));
      expect(await field('totals.tokens')).toBe(integer.format(report.totals.tokens));
      expect(await field('totals.models_active')).toBe('2');
      expect(await field('totals.days_serving')).toBe('1');
      expect(await field('totals.uptime_percent')).toBe(`${report.totals.uptime_percent}%`);
      expect(await field('totals.downtime_minutes')).toBe(String(report.totals.downtime_minutes));
      expect(await page.locator('#generated-at').getAttribute('datetime')).toBe(report.generated_at);

      // The chart: one bar per day, today's carrying the day's tokens.
      const bars = page.locator('#tokens-chart svg rect.bar');
      expect(await bars.count()).toBe(30);
      expect(await bars.last().getAttribute('data-tokens')).toBe(
        String(report.tokens_per_day.at(-1)?.tokens),
      );
      expect(Number(await bars.last().getAttribute('height'))).toBeGreaterThan(50);

      // The registry outage is an ongoing incident, and the page says so at the top.
      expect(report.incidents).toHaveLength(1);
      expect(await page.locator('#overall').getAttribute('data-state')).toBe('incident');
      const incidents = await texts(page, '#incidents li');
      expect(incidents).toHaveLength(1);
      expect(incidents[0]).toContain(report.incidents[0]?.name);
      expect(incidents[0]).toContain('MAJOR');
      expect(incidents[0]).toContain('ONGOING');

      const rows = async (table: string) =>
        page
          .locator(`#${table} tbody tr`)
          .evaluateAll((trs) =>
            trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent ?? '')),
          );
      expect(await rows('models')).toEqual(
        report.models.map((m) => [
          m.id,
          integer.format(m.requests),
          integer.format(m.tokens),
          // A model never measured has no uptime to show: not 100 %.
          m.status === 'live' ? '—' : `${m.uptime_percent}% (${m.faults} faults)`,
          m.status,
        ]),
      );
      expect(report.models.some((m) => m.status === 'live')).toBe(true);
      expect(report.models.some((m) => m.status !== 'live')).toBe(true);
      expect(await rows('frontier')).toEqual(
        report.frontier_models.map((m) => [
          m.id,
          m.family,
          integer.format(m.requests),
          integer.format(m.tokens),
          m.status,
        ]),
      );
      expect(await rows('funnel')).toEqual(
        report.error_funnel.map((f) => [f.group, String(f.status), String(f.count), f.label]),
      );
      expect(await rows('faults')).toEqual(
        report.recent_faults.map((f) => [
          `${f.at.slice(0, 10)} ${f.at.slice(11, 16)} UTC`,
          f.group,
          String(f.status),
          f.detail,
        ]),
      );
      expect(report.recent_faults.map((f) => f.group)).toEqual(['incident', 'famB-5.3']);

      mkdirSync(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: fileURLToPath(new URL('status-page.png', ARTIFACTS)), fullPage: true });
      expect(problems).toEqual([]);
      expect([...hosts]).toEqual([new URL(t.stack.url).host]);
    } finally {
      await close();
    }
  });

  it('fits a 375 px phone without horizontal scrolling', async () => {
    const { page, problems, close } = await open({ width: 375, height: 812 });
    try {
      // These run in the page; the project compiles without the DOM library, hence the typed globalThis.
      const widths = await page.evaluate(() => {
        const { documentElement } = (globalThis as unknown as BrowserGlobals).document;
        return { scroll: documentElement.scrollWidth, client: documentElement.clientWidth };
      });
      // Whatever sticks out past the viewport's right edge, named, so a failure says what to fix.
      const offenders = await page.evaluate(() => {
        const { document } = globalThis as unknown as BrowserGlobals;
        const limit = document.documentElement.clientWidth;
        return [...document.querySelectorAll('body *')]
          .filter((e) => e.getBoundingClientRect().right > limit)
          .map((e) => `${e.tagName.toLowerCase()}.${e.className}: ${(e.textContent ?? '').slice(0, 40)}`);
      });
      expect(offenders).toEqual([]);
      expect(widths.scroll).toBeLessThanOrEqual(widths.client);
      // Tables become cards headed by the model, each value labelled by its column.
      const label = await page
        .locator('#models tbody tr')
        .first()
        .locator('td')
        .nth(1)
        .evaluate((td) => (globalThis as unknown as BrowserGlobals).getComputedStyle(td, '::before').content);
      expect(label).toBe('"Requests"');
      // What a phone shows at a glance: the first screen.
      await page.screenshot({ path: fileURLToPath(new URL('status-page-phone.png', ARTIFACTS)) });
      expect(problems).toEqual([]);
    } finally {
      await close();
    }
  });

  it('serves the page, its assets and the schema from the bucket with their content types', async () => {
    const types: Record<string, string> = {
      '/': 'text/html; charset=utf-8',
      '/index.html': 'text/html; charset=utf-8',
      '/status.css': 'text/css; charset=utf-8',
      '/status.js': 'text/javascript; charset=utf-8',
      '/usage.schema.json': 'application/json',
      '/usage.json': 'application/json',
    };
    for (const [path, type] of Object.entries(types)) {
      const res = await fetch(`${t.stack.url}${path}`);
      expect(res.status, path).toBe(200);
      expect(res.headers.get('content-type'), path).toBe(type);
      await res.arrayBuffer();
    }
    expect((await fetch(`${t.stack.url}/nothing-here.html`)).status).toBe(404);
    // A name no object can have is the request's fault, not a 500 (S3 refuses control characters in keys).
    for (const path of ['/%00', '/index.html%00.json', '/.%00./', '/a%0Ab'])
      expect((await fetch(`${t.stack.url}${path}`)).status, path).toBe(400);
    // The API keeps its own 404s.
    expect((await fetch(`${t.stack.url}/v1/nothing`)).status).toBe(404);
    expect((await fetchUsage(t)).report.generated_at).toBe(report.generated_at);
  });

  it('vouches for nothing when the report is old: status unknown, not operational nor an incident ongoing', async () => {
    // The last report anyone published, three hours ago (its schedule stopped since): an incident still "ongoing".
    // A replay builds it; it is put in the bucket by hand, as a replay publishes nothing.
    const replayed = await t.stack.usageReport({ time: new Date(Date.now() - 3 * 3_600_000).toISOString() });
    if (!replayed.report) throw new Error('a replay returns its report');
    expect((await fetchUsage(t)).report.generated_at).toBe(report.generated_at);
    const s3 = new S3Client({ ...localClientConfig(t.stack.emulators.s3), forcePathStyle: true });
    try {
      await new S3SitePublisher(s3, t.stack.resources.siteBucket).putJson(
        'usage.json',
        JSON.stringify(replayed.report),
        USAGE_REPORT_CACHE_CONTROL,
      );
    } finally {
      s3.destroy();
    }
    const { page, problems, close } = await open({ width: 1280, height: 900 });
    try {
      expect(await page.locator('#overall').getAttribute('data-state')).toBe('unknown');
      expect(await page.locator('#overall').textContent()).toBe('Status unknown: the report is 3 hours old');
      expect(problems).toEqual([]);
    } finally {
      await close();
    }
  });
});
