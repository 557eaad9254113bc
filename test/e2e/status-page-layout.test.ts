import { type Browser, chromium, type Locator, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UsageReport } from '#core/usage-report.ts';
import { CHROMIUM_LAUNCH, serveSite } from '#test/browser.ts';
import { usageSchemaErrors } from '#test/usage-schema.ts';

/**
 * The status page's layout at the edges of what a report can hold: figures of ten digits and more, peaks of
 * every magnitude, idle and empty charts, long model ids, the widest status tag — on phones down to 320 px and
 * on a desktop. A live stack cannot produce a billion tokens a day, so these reports are made by hand (and
 * checked against the published schema), and the page's own files are served as they are in `site/`, with
 * `/usage.json` answering whatever report the test sets.
 */

const integer = new Intl.NumberFormat('en-US');

/** The little of the browser's globals the page-side callbacks use (the project compiles without the DOM). */
interface Rect {
  readonly left: number;
  readonly right: number;
}
interface PageElement {
  readonly tagName: string;
  readonly className: string;
  readonly textContent: string | null;
  getBoundingClientRect(): Rect;
  closest(selector: string): PageElement | null;
}
interface BrowserGlobals {
  readonly document: {
    readonly documentElement: { readonly scrollWidth: number; readonly clientWidth: number };
    querySelectorAll(selector: string): Iterable<PageElement>;
    createRange(): { selectNodeContents(node: unknown): void; getClientRects(): { readonly length: number } };
  };
}

const LONG_ID = 'famA-very-long-model-identifier-v4.1-flash-preview-2026-11-22';
const days = Array.from({ length: 30 }, (_, i) =>
  new Date(Date.UTC(2026, 10, 1 + i)).toISOString().slice(0, 10),
);

/** A busy month: counts in the billions, a long model id in every table, both models degraded. */
const busy = (over: Partial<UsageReport> = {}): UsageReport => ({
  version: 1,
  generated_at: '2026-11-30T12:10:00.000Z',
  window: { days: 30, start: '2026-11-01T00:00:00.000Z', end: '2026-12-01T00:00:00.000Z' },
  totals: {
    requests: 1_234_567_890,
    tokens: 98_765_432_109,
    models_active: 12_345_678,
    days_serving: 30,
    uptime_percent: 99.993,
    downtime_minutes: 12_345_678,
  },
  incidents: [
    {
      name: `${LONG_ID} served nothing`,
      severity: 'MAJOR',
      status: 'RESOLVED',
      start: '2026-11-29T10:00:00.000Z',
      end: '2026-11-29T10:42:00.000Z',
      downtime_minutes: 42,
    },
  ],
  tokens_per_day: days.map((day, i) => ({ day, tokens: 1_000_000 * (i + 1) })),
  models: [
    {
      id: LONG_ID,
      requests: 1_234_567_890,
      tokens: 9_876_543_210,
      uptime_percent: 99.993,
      faults: 1_234_567,
      status: 'degraded recently',
    },
    { id: 'famB-5.3', requests: 7, tokens: 700, uptime_percent: 100, faults: 0, status: 'up' },
    { id: 'famB-5.2', requests: 3, tokens: 300, uptime_percent: 100, faults: 0, status: 'retired' },
  ],
  frontier_models: [
    {
      id: LONG_ID,
      family: 'famA-extraordinarily-long-family-name',
      requests: 1_234_567_890,
      tokens: 9_876_543_210,
      status: 'degraded recently',
    },
  ],
  error_funnel: [
    { group: LONG_ID, status: 500, count: 1_234_567, label: 'upstream error after fallbacks' },
    { group: 'agent-error', status: 401, count: 98_765_432, label: 'invalid API key' },
  ],
  recent_faults: [
    {
      at: '2026-11-29T10:41:00.000Z',
      group: LONG_ID,
      status: 500,
      detail: 'upstream error after 6 attempts',
    },
  ],
  ...over,
});

/** One day of `peak` tokens among days of a few, so the y-axis top reads the peak's compact form. */
const peaking = (peak: number) =>
  busy({ tokens_per_day: days.map((day, i) => ({ day, tokens: i === 20 ? peak : 5 })) });

let site: Awaited<ReturnType<typeof serveSite>>;
let url: string;
let browser: Browser;
/** What `/usage.json` answers with. */
let current: UsageReport = busy();

beforeAll(async () => {
  site = await serveSite((res) =>
    res
      .writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' })
      .end(JSON.stringify(current)),
  );
  url = site.url;
  browser = await chromium.launch(CHROMIUM_LAUNCH);
});

afterAll(async () => {
  await browser?.close();
  await site?.close();
});

/** Renders `report` at `width` and hands the page to `check`; console and page errors fail the test. */
const rendered = async (report: UsageReport, width: number, check: (page: Page) => Promise<void>) => {
  // A report the page is given must be one the gateway could publish.
  expect(usageSchemaErrors(report)).toBeNull();
  current = report;
  const context = await browser.newContext({ viewport: { width, height: 900 } });
  try {
    const page = await context.newPage();
    const problems: string[] = [];
    page.on('console', (message) => {
      if (message.type() === 'error' || message.type() === 'warning') problems.push(message.text());
    });
    page.on('pageerror', (error) => problems.push(error.message));
    expect((await page.goto(url))?.status()).toBe(200);
    await page.waitForSelector('body[data-loaded="true"]', { timeout: 10_000 });
    await check(page);
    expect(problems).toEqual([]);
  } finally {
    await context.close();
  }
};

/** The line boxes an element's text occupies: 1 unless the text wrapped. */
const lineCount = (locator: Locator) =>
  locator.evaluate((node) => {
    const range = (globalThis as unknown as BrowserGlobals).document.createRange();
    range.selectNodeContents(node);
    return range.getClientRects().length;
  });

describe('the status page at the edges of a report', () => {
  it('draws the chart peak label whole, and with the right figure, at any magnitude', async () => {
    // Six- and seven-character labels: with a fixed 44 px margin they ran off the chart's left edge, so 123,456,789
    // read "23.5M". 9007.2T is the widest label the schema's largest integer can produce.
    const peaks: [number, string][] = [
      [123_456, '123.5K'],
      [123_456_789, '123.5M'],
      [123_456_789_000, '123.5B'],
      [Number.MAX_SAFE_INTEGER, '9007.2T'],
    ];
    for (const width of [390, 1280]) {
      for (const [peak, label] of peaks) {
        await rendered(peaking(peak), width, async (page) => {
          const chart = page.locator('#tokens-chart svg');
          const top = chart.locator('text.peak');
          expect(await top.textContent(), `${width} px`).toBe(label);
          expect(await chart.getAttribute('aria-label')).toBe(
            `Tokens per day, 2026-11-01 to 2026-11-30; peak ${integer.format(peak)}`,
          );
          const outer = await chart.boundingBox();
          const box = await top.boundingBox();
          if (!outer || !box) throw new Error('the chart or its peak label is not drawn');
          const where = `${label} at ${width} px: label ${JSON.stringify(box)} in chart ${JSON.stringify(outer)}`;
          expect(box.x, where).toBeGreaterThanOrEqual(outer.x);
          expect(box.y, where).toBeGreaterThanOrEqual(outer.y);
          expect(box.x + box.width, where).toBeLessThanOrEqual(outer.x + outer.width);
          expect(box.y + box.height, where).toBeLessThanOrEqual(outer.y + outer.height);
          // And the label stays left of the bars it measures.
          const firstBar = await chart.locator('rect.bar').first().boundingBox();
          expect(box.x + box.width, where).toBeLessThanOrEqual(firstBar?.x ?? 0);
        });
      }
    }
  });

  it('keeps every total and every count on one line on a phone', async () => {
    // The body lets text wrap anywhere, for long model ids; a number must not: "98,765,43" over "2" reads as
    // two figures. A total too wide for half the screen gets a card of its own instead.
    for (const width of [320, 390, 430]) {
      await rendered(busy(), width, async (page) => {
        const numbers = [
          ...(await page.locator('.totals [data-field]').all()),
          ...(await page.locator('#models td.num, #frontier td.num, #funnel td.num').all()),
        ];
        // Six totals; requests, tokens and uptime of three models; requests and tokens of one frontier model; two
        // funnel rows' status and count.
        expect(numbers).toHaveLength(6 + 3 * 3 + 2 + 2 * 2);
        for (const number of numbers) {
          const text = (await number.textContent()) ?? '';
          // "99.993% (1,234,567 faults)" may break at its space, each of its numbers may not.
          const lines = text.includes(' ') ? text.split(' ').length : 1;
          expect(await lineCount(number), `"${text}" at ${width} px`).toBeLessThanOrEqual(lines);
        }
        expect(await page.locator('[data-field="totals.tokens"]').textContent()).toBe('98,765,432,109');
        // Long ids still wrap, inside their card.
        expect(await lineCount(page.locator('#models td').first())).toBeGreaterThan(1);
      });
    }
  });

  it('fits a 320 px phone without horizontal scrolling, degraded tags and long names included', async () => {
    await rendered(busy(), 320, async (page) => {
      const layout = await page.evaluate(() => {
        const { document } = globalThis as unknown as BrowserGlobals;
        const limit = document.documentElement.clientWidth;
        const name = (e: PageElement) =>
          `${e.tagName.toLowerCase()}.${e.className}: ${(e.textContent ?? '').slice(0, 40)}`;
        return {
          scroll: document.documentElement.scrollWidth,
          client: limit,
          // Whatever sticks out past the viewport's right edge, named, so a failure says what to fix.
          offenders: [...document.querySelectorAll('body *')]
            .filter((e) => e.getBoundingClientRect().right > limit)
            .map(name),
          // A status tag spilling out of its cell is cut by the card's edge even when the page does not scroll.
          tags: [...document.querySelectorAll('td .tag')].map((tag) => {
            const cell = tag.closest('td')?.getBoundingClientRect();
            const box = tag.getBoundingClientRect();
            return { tag: name(tag), inside: !!cell && box.left >= cell.left && box.right <= cell.right };
          }),
        };
      });
      expect(layout.offenders).toEqual([]);
      expect(layout.scroll).toBeLessThanOrEqual(320);
      expect(layout.client).toBe(320);
      expect(layout.tags.filter((t) => t.tag.endsWith('degraded recently'))).toHaveLength(2);
      expect(layout.tags.filter((t) => t.tag.endsWith('retired'))).toHaveLength(1);
      expect(layout.tags.filter((t) => !t.inside)).toEqual([]);
    });
  });

  it('says peak 0 for a month without tokens (one "0" on the y-axis), and names no days when the report has none', async () => {
    const idle = busy({ tokens_per_day: days.map((day) => ({ day, tokens: 0 })) });
    await rendered(idle, 390, async (page) => {
      const chart = page.locator('#tokens-chart svg');
      expect(await chart.getAttribute('aria-label')).toBe('Tokens per day, 2026-11-01 to 2026-11-30; peak 0');
      expect(await chart.locator('text.axis').allTextContents()).toEqual(['0', '11-01', '11-30']);
      // Every day a flat zero bar, none scaled by the zero peak into NaN or Infinity.
      const bars = await chart
        .locator('rect.bar')
        .evaluateAll((rects) =>
          rects.map((r) => [r.getAttribute('class'), r.getAttribute('y'), r.getAttribute('height')]),
        );
      expect(bars).toHaveLength(30);
      for (const [kind, y, height] of bars) {
        expect(kind).toBe('bar zero');
        expect(Number.isFinite(Number(y))).toBe(true);
        expect(Number(height)).toBe(1);
      }
    });
    // The schema allows an empty series: the label must not read "Tokens per day,  to ; peak 1".
    await rendered(busy({ tokens_per_day: [] }), 390, async (page) => {
      const chart = page.locator('#tokens-chart svg');
      expect(await chart.getAttribute('aria-label')).toBe('Tokens per day: no days reported');
      expect(await chart.locator('rect.bar').count()).toBe(0);
      expect(await chart.locator('text.axis').allTextContents()).toEqual(['0']);
    });
  });
});
