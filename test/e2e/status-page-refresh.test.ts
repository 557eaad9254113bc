import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { UsageReport } from '#core/usage-report.ts';
import { CHROMIUM_LAUNCH, serveSite } from '#test/browser.ts';
import { usageSchemaErrors } from '#test/usage-schema.ts';

/**
 * A status page left open: it reads `/usage.json` again on a timer and judges the report's age again, so a page open
 * through an outage stops saying "All systems operational" once its report is 30 minutes old. The page's own files
 * are served as they are in `site/`, `/usage.json` answers whatever the test sets (or fails), and the page's clock is
 * Playwright's, moved on by hand. `?refresh=0.2` makes the page read every 200 ms instead of every minute.
 */

const MIN = 60_000;
/** The page's clock at load: a whole minute, so report ages read as whole minutes. */
const NOW = Date.UTC(2026, 10, 30, 12, 0);
const iso = (ms: number) => new Date(ms).toISOString();

/** A quiet report generated at `at`; with `incident`, one ongoing. */
const reportAt = (at: number, incident = false): UsageReport => ({
  version: 1,
  generated_at: iso(at),
  window: { days: 30, start: '2026-11-01T00:00:00.000Z', end: iso(at) },
  totals: {
    requests: 1234,
    tokens: 56_789,
    models_active: 1,
    days_serving: 30,
    uptime_percent: 100,
    downtime_minutes: 0,
  },
  incidents: incident
    ? [
        {
          name: 'Service unavailable: no eligible model (503)',
          severity: 'MAJOR',
          status: 'ONGOING',
          start: iso(at - 2 * MIN),
          end: null,
          downtime_minutes: 2,
        },
      ]
    : [],
  tokens_per_day: [{ day: iso(at).slice(0, 10), tokens: 56_789 }],
  models: [],
  frontier_models: [],
  error_funnel: [],
  recent_faults: [],
});

let site: Awaited<ReturnType<typeof serveSite>>;
let url: string;
let browser: Browser;
/** What `/usage.json` answers: this body, or a 500 while `failing`. */
let body = '';
let failing = false;
let reads = 0;

const serve = (report: UsageReport | string) => {
  if (typeof report !== 'string') expect(usageSchemaErrors(report)).toBeNull();
  body = typeof report === 'string' ? report : JSON.stringify(report);
};

beforeAll(async () => {
  site = await serveSite((res) => {
    reads++;
    if (failing) res.writeHead(500, { 'content-type': 'text/plain' }).end('down');
    else res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(body);
  });
  url = site.url;
  browser = await chromium.launch(CHROMIUM_LAUNCH);
});

afterAll(async () => {
  await browser?.close();
  await site?.close();
});

beforeEach(() => {
  failing = false;
  reads = 0;
});

/** Opens the page on its own clock at NOW, refreshing every `refresh` seconds; console errors are collected. */
const open = async (refresh = '0.2') => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('console', (message) => {
    if (message.type() === 'error' || message.type() === 'warning') problems.push(message.text());
  });
  page.on('pageerror', (error) => problems.push(error.message));
  await page.clock.install({ time: NOW });
  expect((await page.goto(`${url}?refresh=${refresh}`))?.status()).toBe(200);
  await page.waitForSelector('body[data-loaded="true"]', { timeout: 10_000 });
  return { page, problems, close: () => context.close() };
};

const overall = async (page: Page) => ({
  state: await page.locator('#overall').getAttribute('data-state'),
  text: await page.locator('#overall').textContent(),
});

/** Waits (in real time: the page's clock flows on its own between jumps) until the top line reads `state`. */
const untilState = (page: Page, state: string) =>
  page.waitForSelector(`#overall[data-state="${state}"]`, { timeout: 5_000 });

describe('the status page left open', () => {
  it('reads usage.json again and shows the newer report', async () => {
    serve(reportAt(NOW - MIN));
    const { page, problems, close } = await open();
    try {
      expect(await overall(page)).toEqual({ state: 'up', text: 'All systems operational' });
      serve(reportAt(NOW, true));
      await untilState(page, 'incident');
      expect((await overall(page)).text).toBe(
        'Ongoing incident: Service unavailable: no eligible model (503)',
      );
      expect(await page.locator('#generated-at').getAttribute('datetime')).toBe(iso(NOW));
      expect(await page.locator('#incidents li').allTextContents()).toEqual([
        expect.stringContaining('ONGOING'),
      ]);
      expect(problems).toEqual([]);
    } finally {
      await close();
    }
  });

  it('judges the report’s age again as time passes, though no newer report comes', async () => {
    // The schedule stopped: usage.json keeps answering the same report, a minute old when the page opened.
    serve(reportAt(NOW - MIN));
    const { page, problems, close } = await open();
    try {
      expect((await overall(page)).state).toBe('up');
      await page.clock.fastForward('30:00');
      await untilState(page, 'unknown');
      expect((await overall(page)).text).toBe('Status unknown: the report is 31 minutes old');
      expect(reads).toBeGreaterThan(1);
      expect(problems).toEqual([]);
    } finally {
      await close();
    }
  });

  it('keeps the last report on screen when a read fails, marks it stale by the same rule, and recovers', async () => {
    serve(reportAt(NOW - MIN));
    const { page, problems, close } = await open();
    try {
      failing = true;
      const notice = page.locator('#load-error');
      await notice.waitFor({ state: 'visible', timeout: 5_000 });
      expect(await notice.textContent()).toBe(
        'The usage report could not be refreshed (usage.json answered 500); the figures are those of the last one read.',
      );
      // Still the last report, still young enough to vouch for now.
      expect(await page.locator('[data-field="totals.requests"]').textContent()).toBe('1,234');
      expect((await overall(page)).state).toBe('up');
      await page.clock.fastForward('30:00');
      await untilState(page, 'unknown');
      expect((await overall(page)).text).toBe('Status unknown: the report is 31 minutes old');
      expect(await page.locator('[data-field="totals.requests"]').textContent()).toBe('1,234');
      expect(await page.locator('body').getAttribute('data-loaded')).toBe('true');

      // The report comes back, fresh by the page's clock.
      serve(reportAt(NOW + 31 * MIN));
      failing = false;
      await untilState(page, 'up');
      expect(await notice.isHidden()).toBe(true);
      // Chromium logs each failed read of a resource; nothing else went wrong.
      expect(problems.filter((p) => !p.includes('status of 500'))).toEqual([]);
    } finally {
      await close();
    }
  });

  it('vouches for nothing when the report’s time does not read as a time', async () => {
    serve(JSON.stringify({ ...reportAt(NOW), generated_at: 'not a time' }));
    const { page, problems, close } = await open('60');
    try {
      expect(await overall(page)).toEqual({
        state: 'unknown',
        text: 'Status unknown: the report does not say when it was generated',
      });
      expect(await page.locator('#generated-at').textContent()).toBe('at an unknown time');
      expect(problems).toEqual([]);
    } finally {
      await close();
    }
  });

  it('reads every minute by default', async () => {
    serve(reportAt(NOW - MIN));
    const { page, close } = await open('');
    try {
      expect(reads).toBe(1);
      await page.clock.fastForward('00:55');
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(reads).toBe(1);
      await page.clock.fastForward('00:05');
      await expect.poll(() => reads, { timeout: 5_000 }).toBe(2);
    } finally {
      await close();
    }
  });
});
