// Charts over time, drawn by uPlot (vendored: uplot.min.js, its licence in
// uplot-LICENSE, its version in uplot-VERSION). uPlot draws on a canvas and
// sets sizes through the CSSOM, which the Content-Security-Policy allows (no
// inline style attribute, no inline script). Each chart has a legend naming
// its series, with their values at the point under the pointer.
'use strict';

// The series' colours, in order (a canvas takes them from here, not from CSS).
const PALETTE = ['#1f6feb', '#2f855a', '#c53030', '#b7791f', '#805ad5', '#0d9488', '#db2777',
  '#4b5563'];
const FAILED_COLOR = '#c53030';
const RETRIED_COLOR = '#b7791f';
const charts = new Map();          // container id -> {plot, labels}

function windowLabel(seconds) {
  return seconds >= 7 * 86400 ? 'last week' : seconds >= 86400 ? 'last day' : 'last hour';
}

// The buckets' start times (epoch seconds) of an answer of /api/timeline or
// /api/activity, from the window's start to now, one per bucket.
function bucketTimes(answer) {
  const step = answer.bucket_sec;
  const now = Date.now() / 1000;
  const first = Math.floor((now - answer.window_sec) / step) * step;
  const times = [];
  for (let t = first; t <= now; t += step) times.push(t);
  return times;
}

// Each series' values on the common buckets: value(point) where a point is,
// ``missing`` elsewhere.
function aligned(answer, names, value, missing) {
  const times = bucketTimes(answer);
  const index = new Map(times.map((t, i) => [t, i]));
  const columns = names.map((name) => {
    const column = times.map(() => missing);
    for (const point of answer.series[name] || []) {
      const at = index.get(Date.parse(point.t) / 1000);
      if (at !== undefined) column[at] = value(point);
    }
    return column;
  });
  return { times, columns };
}

function finished(p) { return p.succeeded + p.failed + p.cancelled; }

function perMinute(answer) { return 60 / answer.bucket_sec; }

function format(v, unit) {
  if (v === null || v === undefined) return '-';
  return (Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 1 ? v.toFixed(1) : v.toPrecision(2)) + unit;
}

// A chart in ``figure`` (made once, then given new data): lines, one per
// name; ``fills`` fills them (stacked bands, top first).
function plot(figure, spec) {
  const box = figure.querySelector('.plot');
  const empty = figure.querySelector('.empty');
  const has = spec.columns.some((c) => c.some((v) => v !== null && v !== 0));
  empty.hidden = has;
  box.hidden = !has;
  const known = charts.get(box.id);
  if (!has) {
    if (known) { known.plot.destroy(); charts.delete(box.id); }
    return;
  }
  const data = [spec.times, ...spec.columns];
  const labels = spec.labels.join('\n');
  if (known && known.labels === labels && document.body.contains(known.plot.root)) {
    known.plot.setData(data);
    return;
  }
  if (known) known.plot.destroy();
  const series = [{ value: (u, t) => (t === null ? '-' : new Date(t * 1000).toLocaleTimeString()) }];
  spec.labels.forEach((label, i) => {
    const color = spec.colors ? spec.colors[i] : PALETTE[i % PALETTE.length];
    series.push({ label, stroke: color, width: 2, spanGaps: spec.spanGaps !== false,
      fill: spec.fills ? color + '55' : undefined,
      points: { show: true, size: 4 },
      value: (u, v, s, at) => format(spec.shown ? spec.shown[i][at] : v, spec.unit) });
  });
  const made = new uPlot({
    width: Math.max(260, box.parentElement.clientWidth - 8), height: 190, series,
    scales: { x: { time: true } },
    axes: [{ stroke: '#6b7480', grid: { stroke: '#eef0f3' } },
      { stroke: '#6b7480', grid: { stroke: '#eef0f3' }, size: 56,
        values: (u, ticks) => ticks.map((v) => format(v, '')) }],
    legend: { live: true },
    cursor: { points: { size: 6 } },
  }, data, box);
  charts.set(box.id, { plot: made, labels });
}

// A figure for a chart: its caption names what it shows; the legend, drawn
// by uPlot, names each series.
function chartFigure(id, title) {
  return el('figure', { class: 'chart', 'aria-label': title },
    el('figcaption', {}, title, ' ', el('span', { class: 'window muted' })),
    el('div', { class: 'plot', id, role: 'img', 'aria-label': title }),
    el('p', { class: 'empty muted', hidden: true }, 'nothing finished in this window'));
}

function setWindow(figure, answer) {
  figure.querySelector('.window').textContent = windowLabel(answer.window_sec);
}

// Tasks finished per minute, one line per series (a task or a queue).
function throughputChart(figure, answer, names) {
  names = names || Object.keys(answer.series);
  setWindow(figure, answer);
  const { times, columns } = aligned(answer, names, (p) => finished(p) * perMinute(answer), 0);
  plot(figure, { times, columns, labels: names.map(short), unit: '/min' });
}

// Mean duration of the runs that ended in each bucket, one line per series.
function durationChart(figure, answer, names) {
  names = names || Object.keys(answer.series);
  setWindow(figure, answer);
  const { times, columns } = aligned(answer, names, (p) => p.mean_duration_sec, null);
  plot(figure, { times, columns, labels: names.map(short), unit: 's', spanGaps: false });
}

// Failures and retries per minute, stacked: the band under the top line is
// the retries, the one under it the failures (the legend shows each alone).
function failuresChart(figure, answer, names) {
  names = names || Object.keys(answer.series);
  setWindow(figure, answer);
  const scale = perMinute(answer);
  const failed = aligned(answer, names, (p) => p.failed * scale, 0).columns;
  const retried = aligned(answer, names, (p) => (p.retried || 0) * scale, 0).columns;
  const times = bucketTimes(answer);
  const sum = (columns) => times.map((_, i) => columns.reduce((total, c) => total + c[i], 0));
  const failures = sum(failed);
  const retries = sum(retried);
  plot(figure, { times, columns: [failures.map((f, i) => f + retries[i]), failures],
    shown: [retries, failures], labels: ['retried', 'failed'], fills: true,
    colors: [RETRIED_COLOR, FAILED_COLOR], unit: '/min' });
}

window.addEventListener('resize', () => {
  for (const [id, chart] of charts) {
    const box = document.getElementById(id);
    if (!box) { chart.plot.destroy(); charts.delete(id); continue; }
    chart.plot.setSize({ width: Math.max(260, box.parentElement.clientWidth - 8), height: 190 });
  }
});
