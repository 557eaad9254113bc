// The status page: reads /usage.json (spec §2.6) and renders it. No framework, no third-party requests; every
// value goes in through textContent or an SVG attribute, never as markup.

const SVG = 'http://www.w3.org/2000/svg';
const integer = new Intl.NumberFormat('en-US');
const compact = new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 1 });

/** 99.993 → "99.993%": the report already rounds down to three decimals. */
const percent = (value) => `${value}%`;

/** "2026-11-22T12:10:00.000Z" → "2026-11-22 12:10 UTC". */
const utc = (iso) => `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC`;

const el = (tag, attributes = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  for (const child of children) node.append(child);
  return node;
};

const svg = (tag, attributes = {}, text) => {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
};

const field = (name, text) => {
  for (const node of document.querySelectorAll(`[data-field="${name}"]`)) node.textContent = text;
};

const statusTag = (status) =>
  el('span', { class: `tag ${status === 'degraded recently' ? 'degraded' : status}` }, status);

/** A table row whose cells carry their column's label, for the stacked layout on phones. */
const row = (table, cells) => {
  const labels = [...table.querySelectorAll('thead th')].map((th) => th.textContent ?? '');
  const tr = el('tr');
  cells.forEach(([content, className], i) => {
    const td = el('td', { 'data-label': labels[i] ?? '' }, content);
    if (className) td.className = className;
    tr.append(td);
  });
  return tr;
};

const fill = (id, items, cellsOf, emptyText) => {
  const table = document.getElementById(id);
  const body = table.querySelector('tbody');
  body.replaceChildren();
  if (items.length === 0) {
    const columns = table.querySelectorAll('thead th').length;
    body.append(el('tr', {}, el('td', { class: 'empty', colspan: String(columns) }, emptyText)));
    return;
  }
  for (const item of items) body.append(row(table, cellsOf(item)));
};

const renderTotals = (report) => {
  const { totals } = report;
  field('totals.requests', integer.format(totals.requests));
  field('totals.tokens', integer.format(totals.tokens));
  field('totals.models_active', integer.format(totals.models_active));
  field('totals.days_serving', integer.format(totals.days_serving));
  field('totals.uptime_percent', percent(totals.uptime_percent));
  field('totals.downtime_minutes', integer.format(totals.downtime_minutes));
  const generated = document.getElementById('generated-at');
  const at = generatedAt(report);
  generated.dateTime = Number.isFinite(at) ? report.generated_at : '';
  generated.textContent = Number.isFinite(at) ? utc(new Date(at).toISOString()) : 'at an unknown time';
  renderOverall(report);
};

/** When the report was generated, epoch ms; NaN when it does not say in a form that reads as a time. */
const generatedAt = (report) =>
  typeof report.generated_at === 'string' ? Date.parse(report.generated_at) : Number.NaN;

/**
 * The line at the top: what the report says of now. Run on every render and on every tick of the refresh, as the
 * report ages while the page stays open, whether or not a newer one arrives.
 */
const renderOverall = (report) => {
  const overall = document.getElementById('overall');
  const ageMinutes = Math.floor((Date.now() - generatedAt(report)) / 60_000);
  if (!Number.isFinite(ageMinutes)) {
    // A report of unknown age vouches for nothing (NaN compares false with any threshold: it read "operational").
    overall.dataset.state = 'unknown';
    overall.textContent = 'Status unknown: the report does not say when it was generated';
    return;
  }
  if (ageMinutes >= STALE_AFTER_MINUTES) {
    // The report is rebuilt every few minutes: one this old says nothing of now — neither "operational" nor an
    // incident still "ongoing".
    overall.dataset.state = 'unknown';
    overall.textContent = `Status unknown: the report is ${staleAge(ageMinutes)} old`;
    return;
  }
  const ongoing = report.incidents.filter((i) => i.status === 'ONGOING');
  overall.dataset.state = ongoing.length > 0 ? 'incident' : 'up';
  overall.textContent =
    ongoing.length > 0 ? `Ongoing incident: ${ongoing[0].name}` : 'All systems operational';
};

/** Six runs of the report's 5-minute schedule missed: past this the page does not vouch for the present. */
const STALE_AFTER_MINUTES = 30;

/**
 * How often an open page reads usage.json again: its Cache-Control max-age (60 s), so each read can bring a newer
 * report. `?refresh=<seconds>` sets another period (the browser tests use a fraction of a second).
 */
const REFRESH_MS = (() => {
  const seconds = Number(new URLSearchParams(window.location.search).get('refresh') ?? '');
  return Number.isFinite(seconds) && seconds > 0 ? Math.max(50, seconds * 1000) : 60_000;
})();

/** 45 → "45 minutes", 200 → "3 hours", 3000 → "2 days". */
const staleAge = (minutes) => {
  if (minutes < 120) return `${minutes} minutes`;
  if (minutes < 2 * 1440) return `${Math.floor(minutes / 60)} hours`;
  return `${Math.floor(minutes / 1440)} days`;
};

/** What the chart's picture says, for a screen reader: its days and its peak, or that there is nothing to draw. */
const chartLabel = (days, peak) => {
  if (days.length === 0) return 'Tokens per day: no days reported';
  const first = days[0].day;
  const last = days.at(-1).day;
  const span = first === last ? first : `${first} to ${last}`;
  return `Tokens per day, ${span}; peak ${integer.format(peak)}`;
};

/**
 * Tokens per UTC day as an inline SVG bar chart, drawn at the figure's own width so its labels keep their
 * size on a phone and on a desktop alike.
 */
const renderChart = (days) => {
  const figure = document.getElementById('tokens-chart');
  const width = Math.max(240, Math.round(figure.clientWidth - 24));
  const height = 180;
  const bottom = 22;
  const top = 8;
  const plot = height - bottom - top;
  // The true peak: a chart of idle days peaks at 0, and every bar is then drawn as a zero bar, so nothing is
  // ever divided by it.
  const peak = days.reduce((most, d) => Math.max(most, d.tokens), 0);
  const chart = svg('svg', {
    viewBox: `0 0 ${width} ${height}`,
    role: 'img',
    'aria-label': chartLabel(days, peak),
  });
  const zeroLabel = svg('text', { class: 'axis', y: top + plot, 'text-anchor': 'end' }, '0');
  // An idle month has no peak above the zero line: one "0" at the bottom, not a second one at the top.
  const labels =
    peak > 0
      ? [
          svg('text', { class: 'axis peak', y: top + 4, 'text-anchor': 'end' }, compact.format(peak)),
          zeroLabel,
        ]
      : [zeroLabel];
  chart.append(...labels);
  figure.querySelector('svg')?.remove();
  figure.prepend(chart);
  // The plot starts right of the y-axis labels, measured now that they are drawn: "1K" and "9007.2T" differ by
  // a factor of four, and a fixed margin either wastes a phone's width or cuts the peak's leading digits off.
  // (Unmeasurable when the figure is hidden: then a generous 8 px per character.)
  const labelWidth = Math.max(
    ...labels.map((t) => t.getComputedTextLength() || (t.textContent ?? '').length * 8),
  );
  // 4 px clear of the chart's edge, the labels, 6 px before the plot.
  const left = 4 + Math.ceil(labelWidth) + 6;
  for (const label of labels) label.setAttribute('x', String(left - 6));
  const step = (width - left) / Math.max(1, days.length);
  chart.append(
    svg('line', { class: 'grid', x1: left, x2: width, y1: top, y2: top }),
    svg('line', { class: 'grid', x1: left, x2: width, y1: top + plot, y2: top + plot }),
  );
  days.forEach((d, i) => {
    const h = d.tokens === 0 ? 1 : Math.max(2, (d.tokens / peak) * plot);
    const bar = svg('rect', {
      class: d.tokens === 0 ? 'bar zero' : 'bar',
      x: (left + i * step + step * 0.15).toFixed(2),
      y: (top + plot - h).toFixed(2),
      width: (step * 0.7).toFixed(2),
      height: h.toFixed(2),
      'data-day': d.day,
      'data-tokens': d.tokens,
    });
    bar.append(svg('title', {}, `${d.day}: ${integer.format(d.tokens)} tokens`));
    chart.append(bar);
  });
  if (days.length > 0) {
    const first = days[0].day.slice(5);
    const last = days.at(-1).day.slice(5);
    chart.append(
      svg('text', { class: 'axis', x: left, y: height - 6 }, first),
      svg('text', { class: 'axis', x: width, y: height - 6, 'text-anchor': 'end' }, last),
    );
  }
};

const renderIncidents = (incidents) => {
  const list = document.getElementById('incidents');
  list.replaceChildren();
  if (incidents.length === 0) {
    list.append(el('li', { class: 'none' }, 'No incidents in the last 30 days.'));
    return;
  }
  for (const incident of incidents) {
    const span = incident.end
      ? `${utc(incident.start)} – ${utc(incident.end)}`
      : `since ${utc(incident.start)}`;
    list.append(
      el(
        'li',
        { 'data-severity': incident.severity },
        el('span', { class: 'name' }, incident.name),
        el('span', { class: `tag ${incident.severity}` }, incident.severity),
        ' ',
        el('span', { class: `tag ${incident.status}` }, incident.status),
        ' ',
        el('span', { class: 'when' }, `${span} · ${integer.format(incident.downtime_minutes)} min downtime`),
      ),
    );
  }
};

/** The report on screen, and the text it came as (null until one has rendered). */
let shown = null;
let shownText = null;

let resizing = null;
// One listener for the page's life: it draws whichever report is on screen by then.
window.addEventListener('resize', () => {
  clearTimeout(resizing);
  resizing = setTimeout(() => shown && renderChart(shown.tokens_per_day), 150);
});

const render = (report) => {
  renderTotals(report);
  renderChart(report.tokens_per_day);
  renderIncidents(report.incidents);
  fill(
    'models',
    report.models,
    (m) => [
      [m.id],
      [integer.format(m.requests), 'num'],
      [integer.format(m.tokens), 'num'],
      // Nothing measured (no success, no fault): 100 % would read as measured uptime.
      [
        m.status === 'live' ? '—' : `${percent(m.uptime_percent)} (${integer.format(m.faults)} faults)`,
        'num wide',
      ],
      [statusTag(m.status), 'wide'],
    ],
    'No model has been called yet.',
  );
  fill(
    'frontier',
    report.frontier_models,
    (m) => [
      [m.id],
      [m.family, 'wide'],
      [integer.format(m.requests), 'num'],
      [integer.format(m.tokens), 'num'],
      [statusTag(m.status), 'wide'],
    ],
    'No frontier model listed.',
  );
  fill(
    'funnel',
    report.error_funnel,
    (f) => [[f.group], [String(f.status), 'num'], [integer.format(f.count), 'num'], [f.label, 'wide']],
    'No errors recorded.',
  );
  fill(
    'faults',
    report.recent_faults,
    (f) => [[utc(f.at)], [f.group], [String(f.status), 'num'], [f.detail, 'wide']],
    'No faults recorded.',
  );
  document.body.dataset.loaded = 'true';
};

const notify = (text) => {
  const notice = document.getElementById('load-error');
  notice.hidden = text === null;
  notice.textContent = text ?? '';
};

let loading = false;

/**
 * Reads usage.json and renders it. A read that fails once a report is on screen keeps that report (its figures are
 * still the last known) and says so; the age rule then marks it stale once it is 30 minutes old.
 */
const load = async () => {
  // A read still under way (a slow network) is not doubled by the next tick.
  if (loading) return;
  loading = true;
  try {
    // Bounded: a read that never answers would otherwise hold off every later one.
    const response = await fetch('usage.json', {
      cache: 'no-cache',
      signal: AbortSignal.timeout(Math.max(REFRESH_MS, 10_000)),
    });
    if (!response.ok) throw new Error(`usage.json answered ${response.status}`);
    const text = await response.text();
    // The same report again (the schedule has not run since): nothing to redraw, only its age to judge.
    if (text !== shownText) {
      const report = JSON.parse(text);
      render(report);
      shown = report;
      shownText = text;
    }
    renderOverall(shown);
    notify(null);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    if (shown) {
      notify(
        `The usage report could not be refreshed (${reason}); the figures are those of the last one read.`,
      );
      renderOverall(shown);
      return;
    }
    notify(`The usage report could not be loaded (${reason}).`);
    const overall = document.getElementById('overall');
    overall.dataset.state = 'unknown';
    overall.textContent = 'Status unknown';
    document.body.dataset.loaded = 'error';
  } finally {
    loading = false;
  }
};

/** A page left open follows the report: read again, and judge the age again even when no newer one comes. */
const tick = () => {
  if (shown) renderOverall(shown);
  load();
};

load();
setInterval(tick, REFRESH_MS);
// Background tabs have their timers slowed down: a tab coming back is brought up to date at once.
document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'visible') tick();
});
