// The Kale dashboard: plain JavaScript, no dependencies, nothing from a CDN.
// It reads the REST API next to it (relative URLs, so it also works mounted
// under a prefix) every few seconds and draws tables and two SVG charts.
'use strict';

const STATUSES = ['queued', 'running', 'scheduled', 'succeeded', 'failed', 'cancelled', 'purged',
  'deduplicated', 'pending'];
const PALETTE = ['#1f6feb', '#2f855a', '#c53030', '#b7791f', '#805ad5', '#0d9488', '#db2777',
  '#4b5563'];
const REFRESH_MS = 3000;
const PAGE = 25;
const DAY_MS = 24 * 3600 * 1000;

// What the page shows: the status tab, the filters, how many rows, the sort,
// whether old stopped workers are listed, and the task open in the detail panel.
const state = {
  status: 'failed', labels: null, task: '', queue: '', sinceSec: '', pages: 1,
  sort: null, descending: false, oldWorkers: false, detail: null,
  timer: null, busy: false, rows: [],
};

// --- helpers ---------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === 'class') node.className = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined || child === '') continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  return node;
}

function token() {
  const match = location.hash.match(/token=([^&]+)/);
  if (match) {
    sessionStorage.setItem('kale-token', decodeURIComponent(match[1]));
    // The token leaves the address bar and the history at once.
    history.replaceState(null, '', location.pathname + location.search);
  }
  return sessionStorage.getItem('kale-token');
}

async function api(path, options) {
  // X-Kale-Request: a header no other site's page can send (see kale/web/protect.py).
  const headers = { 'X-Kale-Request': '1' };
  const bearer = token();
  if (bearer) headers.Authorization = 'Bearer ' + bearer;
  const response = await fetch('api/' + path, Object.assign({ headers }, options || {}));
  const body = await response.json().catch(() => ({ error: response.statusText }));
  if (response.status === 401) {
    const given = window.prompt('This Kale dashboard needs its bearer token (KALE_WEB_TOKEN):');
    if (given) { sessionStorage.setItem('kale-token', given); return api(path, options); }
  }
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function banner(text) {
  const node = document.getElementById('banner');
  node.textContent = text || '';
  node.hidden = !text;
}

function absolute(iso) { return iso ? new Date(iso).toLocaleString() : ''; }

// "3m ago", with the absolute time on hover.
function ago(iso) {
  if (!iso) return el('span', { class: 'muted' }, '-');
  const seconds = (Date.now() - Date.parse(iso)) / 1000;
  let text;
  if (seconds < 60) text = Math.max(0, Math.round(seconds)) + 's ago';
  else if (seconds < 3600) text = Math.round(seconds / 60) + 'm ago';
  else if (seconds < 86400) text = Math.round(seconds / 3600) + 'h ago';
  else text = absolute(iso);
  return el('time', { datetime: iso, title: absolute(iso) + ' (' + iso + ')' }, text);
}

function badge(status) { return el('span', { class: 'badge ' + status }, status); }

// A waiting task whose delay (or retry back-off) has not passed: when it is due.
function due(t) {
  if ((t.status !== 'queued' && t.status !== 'scheduled') || !t.next_attempt_at) return '';
  const seconds = (Date.parse(t.next_attempt_at) - Date.now()) / 1000;
  if (seconds <= 0) return '';
  const text = seconds < 60 ? Math.round(seconds) + 's' : seconds < 3600
    ? Math.round(seconds / 60) + 'm' : Math.round(seconds / 3600) + 'h';
  return el('span', { class: 'due muted', title: absolute(t.next_attempt_at) }, ' due in ' + text);
}

function short(name) { return name ? name.split('.').pop() : '-'; }
function labelsText(labels) {
  return Object.entries(labels || {}).map(([k, v]) => k + '=' + v).join(' ');
}

async function copy(text) {
  try {
    await navigator.clipboard.writeText(text);
    banner('copied ' + text);
  } catch (error) {
    window.prompt('Copy the task id:', text);
  }
}

// A full task id: opens the task, with a button that copies it.
function taskId(id) {
  return el('span', { class: 'task-id' },
    el('a', { class: 'id mono', onclick: () => showTask(id) }, id),
    el('button', { class: 'copy', title: 'copy the id', onclick: () => copy(id) }, 'copy'));
}

// --- the filter -----------------------------------------------------------------------

// The filter as query parameters; without the status for the cards, which
// count every status of the same filter.
function filterParams(withStatus) {
  const params = new URLSearchParams();
  if (withStatus && state.status) params.set('status', state.status);
  if (state.task) params.set('task', state.task);
  if (state.queue) params.set('queue', state.queue);
  if (state.sinceSec) params.set('since', String(Date.now() / 1000 - Number(state.sinceSec)));
  if (state.labels) for (const [k, v] of state.labels) params.set('label.' + k, v);
  return params;
}

function tasksQuery() {
  const params = filterParams(true);
  params.set('limit', String(PAGE * state.pages));
  return params.toString();
}

function filterText() {
  const parts = [];
  if (state.task) parts.push('task ' + state.task);
  if (state.queue) parts.push('queue ' + state.queue);
  if (state.sinceSec) parts.push(document.getElementById('filter-since').selectedOptions[0].text);
  if (state.labels) parts.push(state.labels.map((l) => l.join('=')).join(' '));
  return parts.join(', ');
}

// --- rendering ------------------------------------------------------------------------

function renderCounts(summary) {
  const box = document.getElementById('counts');
  box.replaceChildren(...STATUSES.map((status) => el('div', {
    class: 'card', 'data-status': status, title: 'show ' + status + ' tasks',
    onclick: () => selectStatus(status),
  }, el('div', { class: 'n', style: 'color: var(--' + status + ')' }, summary.by_status[status] || 0),
  el('div', { class: 'label' }, status))));
}

function renderQueues(answer) {
  const body = document.querySelector('#queues tbody');
  const select = document.getElementById('filter-queue');
  if (select.options.length === 1) {
    for (const q of answer.queues) select.append(el('option', { value: q.name }, q.name));
    select.value = state.queue;
  }
  body.replaceChildren(...answer.queues.map((q) => el('tr', { 'data-queue': q.name },
    el('td', {}, q.name), el('td', { class: 'num' }, q.priority),
    el('td', { class: 'num' }, q.visible ?? '-'), el('td', { class: 'num' }, q.in_flight ?? '-'),
    el('td', { class: 'num' }, q.delayed ?? '-'), el('td', { class: 'num' }, q.dead_letters ?? '-'),
    el('td', { class: 'num' }, q.throughput_per_min ?? 0),
    el('td', {}, q.dead_letters ? el('button', { onclick: () => redrive(q.name) }, 'redrive') : '',
      el('button', { class: 'danger', onclick: () => purge(q.name) }, 'purge')))));
}

// Running and lost workers, and those stopped within a day; older stopped
// ones behind a button.
function renderWorkers(answer) {
  const body = document.querySelector('#workers tbody');
  const old = (w) => w.state === 'stopped' && w.stopped_at && Date.now() - Date.parse(w.stopped_at) > DAY_MS;
  const hidden = answer.workers.filter(old);
  const shown = state.oldWorkers ? answer.workers : answer.workers.filter((w) => !old(w));
  const rows = shown.slice(0, 50).map((w) => el('tr', { class: old(w) ? 'old' : '' },
    el('td', {}, badge(w.state)),
    el('td', { class: 'mono', title: w.id }, w.id + (w.role === 'supervisor' ? ' (supervisor)' : '')),
    el('td', {}, (w.queues || []).join(', ') || 'all'),
    el('td', { class: 'mono' }, w.current_task ? short(w.current_task_name) + ' ' + w.current_task : '-'),
    el('td', {}, labelsText(w.counts)), el('td', {}, ago(w.heartbeat_at))));
  body.replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 6, class: 'muted' }, 'no workers recorded yet'))]));
  const button = document.getElementById('old-workers');
  button.hidden = !hidden.length;
  button.textContent = state.oldWorkers ? 'hide workers stopped more than a day ago'
    : 'show ' + hidden.length + ' workers stopped more than a day ago';
}

function sortedRows(rows) {
  if (!state.sort) return rows;
  const key = state.sort;
  const value = (t) => (key === 'labels' ? labelsText(t.labels) : t[key] ?? '');
  const sorted = rows.slice().sort((a, b) => {
    const x = value(a); const y = value(b);
    return typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
  });
  return state.descending ? sorted.reverse() : sorted;
}

function renderTasks(answer, total) {
  state.rows = answer.tasks;
  const body = document.querySelector('#tasks tbody');
  const rows = sortedRows(answer.tasks).map((t) => el('tr', { 'data-id': t.id },
    el('td', {}, taskId(t.id)),
    el('td', { title: t.task }, short(t.task)), el('td', {}, badge(t.status), due(t)),
    el('td', { class: 'num' }, t.attempts),
    el('td', { class: 'mono' }, labelsText(t.labels)), el('td', {}, ago(t.published_at)),
    el('td', { class: 'wrap' }, t.error_type ? t.error_type + ': ' + (t.error_message || '') : ''),
    el('td', {}, actions(t))));
  body.replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 8, class: 'muted' }, 'no tasks'))]));
  document.querySelectorAll('#tasks th[data-sort]').forEach((th) => {
    th.classList.toggle('sorted', th.dataset.sort === state.sort);
    th.classList.toggle('descending', th.dataset.sort === state.sort && state.descending);
  });
  document.getElementById('shown').textContent = 'showing ' + answer.tasks.length + ' of ' + total;
  document.getElementById('more').hidden = answer.tasks.length >= total;
  const retryable = !state.status || state.status.split(',').includes('failed');
  document.getElementById('bulk-retry').hidden = !(retryable && answer.tasks.some((t) => t.status === 'failed'));
}

function actions(t) {
  const box = el('span', { class: 'actions' });
  if ((t.status === 'failed' || t.status === 'cancelled') && !t.retried_as) {
    box.append(el('button', { onclick: () => act(t.id, 'retry') }, 'retry'));
  }
  if (t.retried_as && !t.retried_as.startsWith('retrying:')) {
    box.append(el('span', { class: 'muted' }, 'retried as '),
      el('a', { class: 'id mono', onclick: () => showTask(t.retried_as) }, t.retried_as.slice(0, 8)));
  }
  if (t.status === 'queued' || t.status === 'scheduled') {
    box.append(el('button', { onclick: () => act(t.id, 'cancel') }, 'cancel'));
  }
  return box;
}

// --- the task detail ----------------------------------------------------------------------

function field(name, ...value) { return [el('dt', {}, name), el('dd', {}, ...value)]; }

function json(value) { return el('pre', { class: 'json' }, JSON.stringify(value, null, 2)); }

function renderDetail(record) {
  document.getElementById('detail-id').textContent = record.id;
  document.getElementById('detail-actions').replaceChildren(actions(record));
  const facts = el('dl', { class: 'facts' },
    ...field('status', badge(record.status), due(record)),
    ...field('task', record.task), ...field('queue', record.queue),
    ...field('attempts', String(record.attempts)),
    ...field('labels', labelsText(record.labels) || '-'),
    ...field('published', ago(record.published_at), ' ', el('span', { class: 'muted' }, absolute(record.published_at))),
    ...field('started', ago(record.started_at)), ...field('finished', ago(record.finished_at)),
    ...field('duration', record.duration_sec === null ? '-' : record.duration_sec.toFixed(3) + ' s'),
    ...field('worker', record.worker || '-'));
  for (const [name, key] of [['retry of', 'labels'], ['duplicate of', 'duplicate_of'], ['retried as', 'retried_as']]) {
    const id = key === 'labels' ? (record.labels || {}).retry_of : record[key];
    if (id && !id.startsWith('retrying:')) facts.append(...field(name, el('a', { class: 'id mono', onclick: () => showTask(id) }, id)));
  }
  if (record.dead_letter_reason) facts.append(...field('dead-letter reason', record.dead_letter_reason));
  const parts = [facts, el('h3', {}, 'Arguments')];
  parts.push(record.inputs ? json({ args: record.inputs.args, kwargs: record.inputs.kwargs })
    : el('p', { class: 'muted' }, 'not recorded (record_args = False)'));
  if (record.result !== null && record.result !== undefined) parts.push(el('h3', {}, 'Result'), json(record.result));
  if (record.error_type) {
    parts.push(el('h3', {}, 'Error'), el('p', { class: 'error' }, record.error_type + ': ' + (record.error_message || '')));
    if (record.error_traceback) parts.push(el('pre', { class: 'traceback' }, record.error_traceback));
  }
  const history = record.attempt_history || [];
  parts.push(el('h3', {}, 'Attempts'), history.length ? el('table', { class: 'attempts' },
    el('thead', {}, el('tr', {}, ...['#', 'outcome', 'started', 'duration', 'worker', 'error'].map((h) => el('th', {}, h)))),
    el('tbody', {}, ...history.map((a) => el('tr', {},
      el('td', { class: 'num' }, a.attempt), el('td', {}, badge(a.status)),
      el('td', {}, ago(a.started_at)),
      el('td', { class: 'num' }, a.duration_sec === null ? '-' : a.duration_sec.toFixed(3) + ' s'),
      el('td', { class: 'mono' }, a.worker || '-'),
      el('td', { class: 'wrap' }, a.error_type ? a.error_type + ': ' + (a.error_message || '') : '')))))
    : el('p', { class: 'muted' }, 'not started yet'));
  document.getElementById('detail-body').replaceChildren(...parts);
}

// Open the task's page; ``quiet``: leave the banner as it is (after an action).
async function showTask(id, quiet) {
  try {
    const record = await api('tasks/' + encodeURIComponent(id));
    state.detail = record.id;
    renderDetail(record);
    const panel = document.getElementById('detail');
    panel.hidden = false;
    if (!quiet) { panel.scrollIntoView(); banner(''); }
  } catch (error) { banner(error.message); }
}

// --- charts --------------------------------------------------------------------------------

function windowLabel(seconds) {
  return seconds >= 7 * 86400 ? 'last week' : seconds >= 86400 ? 'last day' : 'last hour';
}

function drawChart(id, series, value, unit, windowSec) {
  const box = document.getElementById(id);
  const names = Object.keys(series);
  const points = names.flatMap((n) => series[n].map((p) => [Date.parse(p.t), value(p)]))
    .filter(([, v]) => v !== null);
  const width = 520; const height = 170; const left = 40; const bottom = 18;
  const chart = svg('svg', { viewBox: '0 0 ' + width + ' ' + (height + bottom), preserveAspectRatio: 'none' });
  const now = Date.now(); const start = now - windowSec * 1000;
  const top = Math.max(1e-9, ...points.map(([, v]) => v)) * 1.1;
  const x = (t) => left + (width - left) * (t - start) / (now - start);
  const y = (v) => height - height * v / top;
  chart.append(svg('line', { class: 'axis', x1: left, y1: height, x2: width, y2: height }));
  for (const fraction of [0.5, 1]) {
    chart.append(svg('line', { class: 'axis', x1: left, y1: y(top * fraction / 1.1), x2: width, y2: y(top * fraction / 1.1) }));
    const label = svg('text', { x: 2, y: y(top * fraction / 1.1) + 3 });
    label.textContent = (top * fraction / 1.1).toPrecision(2) + unit;
    chart.append(label);
  }
  const span = windowSec >= 86400 ? [windowSec / 86400, 'd'] : [windowSec / 60, 'm'];
  for (const [offset, text] of [[0, '-' + span[0] + span[1]], [0.5, '-' + span[0] / 2 + span[1]], [1, 'now']]) {
    const label = svg('text', { x: left + (width - left) * offset - (offset ? 20 : 0), y: height + 14 });
    label.textContent = text;
    chart.append(label);
  }
  const legend = el('div', { class: 'legend' });
  names.forEach((name, i) => {
    const color = PALETTE[i % PALETTE.length];
    const own = series[name].map((p) => [Date.parse(p.t), value(p)]).filter(([, v]) => v !== null);
    if (!own.length) return;
    chart.append(svg('polyline', { fill: 'none', stroke: color, 'stroke-width': 2,
      points: own.map(([t, v]) => x(t).toFixed(1) + ',' + y(v).toFixed(1)).join(' ') }));
    for (const [t, v] of own) chart.append(svg('circle', { cx: x(t), cy: y(v), r: 2.5, fill: color }));
    legend.append(el('span', {}, el('i', { style: 'background:' + color }), short(name)));
  });
  box.replaceChildren(chart, points.length ? legend : el('div', { class: 'muted' }, 'nothing finished in the last week'));
}

function renderTimeline(answer) {
  const perMinute = 60 / answer.bucket_sec;
  document.querySelectorAll('.charts .window').forEach((node) => { node.textContent = windowLabel(answer.window_sec); });
  drawChart('chart-throughput', answer.series,
    (p) => (p.succeeded + p.failed + p.cancelled) * perMinute, '', answer.window_sec);
  drawChart('chart-duration', answer.series, (p) => p.mean_duration_sec, 's', answer.window_sec);
}

// --- refreshing ------------------------------------------------------------------------------

async function refresh() {
  if (state.busy) return;
  state.busy = true;
  try {
    const [summary, tasks, count, workers, timeline] = await Promise.all([
      api('tasks/summary?' + filterParams(false)), api('tasks?' + tasksQuery()),
      api('tasks/count?' + filterParams(true)), api('workers'), api('timeline?window=auto')]);
    renderCounts(summary); renderTasks(tasks, count.count); renderWorkers(workers);
    renderTimeline(timeline);
    try { renderQueues(await api('queues')); } catch (error) { banner('queues: ' + error.message); }
    document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    document.body.dataset.loaded = 'true';
  } catch (error) {
    banner(error.message);
  } finally {
    state.busy = false;
  }
}

function selectStatus(status) {
  state.status = status;
  state.pages = 1;
  document.querySelectorAll('#tabs button').forEach((b) => b.classList.toggle('active', b.dataset.status === status));
  const filter = filterText();
  document.getElementById('tasks-title').textContent = (status === 'failed' ? 'Recent failures'
    : (status ? 'Tasks: ' + status : 'All tasks')) + (filter ? ' (' + filter + ')' : '');
  refresh();
}

// --- actions ----------------------------------------------------------------------------------

async function act(id, action) {
  try {
    const answer = await api('tasks/' + encodeURIComponent(id) + '/' + action, { method: 'POST' });
    if (action === 'retry') {
      banner((answer.published ? 'published again as ' : 'retried before, as ') + answer.id);
    } else {
      banner('cancelled ' + id);
    }
    if (state.detail === id) showTask(id, true);
    refresh();
  } catch (error) { banner(error.message); }
}

async function bulkRetry() {
  const filter = filterText();
  if (!window.confirm('Publish again every failed task' + (filter ? ' of ' + filter : '') + ' (each once)?')) return;
  try {
    const params = filterParams(false);
    params.set('status', 'failed');
    const answer = await api('tasks/retry?' + params, { method: 'POST' });
    banner('published ' + answer.published.length + ' again; ' + answer.already_retried
      + ' retried before' + (answer.refused.length ? '; ' + answer.refused.length + ' refused: ' + answer.refused[0].error : ''));
    refresh();
  } catch (error) { banner(error.message); }
}

async function redrive(queue) {
  if (!window.confirm('Move the dead letters of ' + queue + ' back to it, to run again?')) return;
  try {
    const answer = await api('queues/' + encodeURIComponent(queue) + '/redrive', { method: 'POST' });
    banner('moved ' + answer.moved + ' dead letters back to ' + queue);
    refresh();
  } catch (error) { banner(error.message); }
}

async function purge(queue) {
  const typed = window.prompt('Purging deletes every message in ' + queue + ', for good. Type the queue name to confirm:');
  if (typed === null) return;
  if (typed !== queue) { banner('purge of ' + queue + ' cancelled: the name typed was not ' + queue); return; }
  try {
    const answer = await api('queues/' + encodeURIComponent(queue) + '/purge?confirm=' + encodeURIComponent(typed), { method: 'POST' });
    banner('purged ' + queue + '; ' + answer.records_marked_purged + ' waiting task records marked purged');
    refresh();
  } catch (error) { banner(error.message); }
}

function search(event) {
  event.preventDefault();
  const text = document.getElementById('search-text').value.trim();
  if (!text) return;
  if (text.includes('=')) {
    state.labels = text.split(/\s+/).map((pair) => pair.split('=', 2));
    selectStatus('');
  } else {
    showTask(text);
  }
}

function applyFilters(event) {
  event.preventDefault();
  state.task = document.getElementById('filter-task').value.trim();
  state.queue = document.getElementById('filter-queue').value;
  state.sinceSec = document.getElementById('filter-since').value;
  selectStatus(state.status);
}

function sortBy(key) {
  state.descending = state.sort === key ? !state.descending : false;
  state.sort = key;
  renderTasks({ tasks: state.rows }, Number(document.getElementById('shown').textContent.split(' of ')[1] || state.rows.length));
}

document.getElementById('search').addEventListener('submit', search);
document.getElementById('filters').addEventListener('submit', applyFilters);
document.getElementById('search-clear').addEventListener('click', () => {
  document.getElementById('search-text').value = ''; state.labels = null; selectStatus(state.status);
});
document.getElementById('detail-close').addEventListener('click', () => { document.getElementById('detail').hidden = true; state.detail = null; });
document.getElementById('detail-copy').addEventListener('click', () => copy(document.getElementById('detail-id').textContent));
document.getElementById('bulk-retry').addEventListener('click', bulkRetry);
document.getElementById('more').addEventListener('click', () => { state.pages += 1; refresh(); });
document.getElementById('old-workers').addEventListener('click', () => { state.oldWorkers = !state.oldWorkers; refresh(); });
document.querySelectorAll('#tabs button').forEach((b) => b.addEventListener('click', () => selectStatus(b.dataset.status)));
document.querySelectorAll('#tasks th[data-sort]').forEach((th) => th.addEventListener('click', () => sortBy(th.dataset.sort)));
document.getElementById('auto').addEventListener('change', (e) => {
  clearInterval(state.timer);
  if (e.target.checked) state.timer = setInterval(refresh, REFRESH_MS);
});
state.timer = setInterval(refresh, REFRESH_MS);
refresh();
