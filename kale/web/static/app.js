// The Kale dashboard: plain JavaScript, no dependencies, nothing from a CDN.
// It reads the REST API next to it (relative URLs, so it also works mounted
// under a prefix) every few seconds and draws tables, two SVG charts and,
// for a workflow opened, its graph in SVG.
'use strict';

const STATUSES = ['queued', 'running', 'scheduled', 'succeeded', 'failed', 'cancelled', 'purged',
  'deduplicated', 'pending'];
// The series' colours; app.css gives the legend's .swatch-N the same (no inline style: the CSP).
const PALETTE = ['#1f6feb', '#2f855a', '#c53030', '#b7791f', '#805ad5', '#0d9488', '#db2777',
  '#4b5563'];
const REFRESH_MS = 3000;
// A refresh slower than this doubles the pause before the next one, up to MAX_REFRESH_MS.
const SLOW_MS = 1000;
const MAX_REFRESH_MS = 60000;
const PAGE = 25;
const DAY_MS = 24 * 3600 * 1000;

// What the page shows: the status tab, the filters, how many rows, the sort,
// whether old stopped workers are listed, the task open in the detail panel,
// and the workflows' own.
const state = {
  status: 'failed', labels: null, task: '', queue: '', sinceSec: '', pages: 1,
  sort: null, descending: false, oldWorkers: false, detail: null,
  timer: null, busy: false, rows: [], delay: REFRESH_MS,
  // The workflows listed (status, pages) and the one open in its panel.
  workflowStatus: '', workflowPages: 1, workflow: null, workflowShown: null,
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

// The last answer to each GET, with its ETag: asked again with If-None-Match,
// an answer that did not change is a 304 and the same object comes back.
const answers = new Map();

async function api(path, options) {
  // X-Kale-Request: a header no other site's page can send (see kale/web/protect.py).
  const headers = { 'X-Kale-Request': '1' };
  const bearer = token();
  if (bearer) headers.Authorization = 'Bearer ' + bearer;
  const known = options ? null : answers.get(path);
  if (known) headers['If-None-Match'] = known.etag;
  const response = await fetch('api/' + path, Object.assign({ headers, cache: 'no-store' }, options || {}));
  if (response.status === 304 && known) return known.body;
  const body = await response.json().catch(() => ({ error: response.statusText }));
  if (!options && response.ok && response.headers.get('ETag')) answers.set(path, { etag: response.headers.get('ETag'), body });
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
    ? Math.round(seconds / 60) + 'm' : seconds < 172800 ? Math.round(seconds / 3600) + 'h'
      : Math.round(seconds / 86400) + 'd';
  return el('span', { class: 'due muted', title: absolute(t.next_attempt_at) }, ' due in ' + text);
}

// A task's short name: a class path's last part (app.tasks.Resize: Resize);
// a name with a kind before a colon keeps all after it (executor:resize.sh).
function short(name) {
  if (!name) return '-';
  const colon = name.indexOf(':');
  return colon >= 0 ? name.slice(colon + 1) : name.split('.').pop();
}
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
  }, el('div', { class: 'n' }, summary.by_status[status] || 0),
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

// The outbox (OUTBOX_URL): rows committed and not yet sent by a relay.
function renderOutbox(answer) {
  const line = document.getElementById('outbox');
  line.hidden = !answer.configured;
  if (!answer.configured) return;
  const age = answer.oldest_age_sec === null ? '' : ', the oldest waiting ' + answer.oldest_age_sec.toFixed(1) + ' s';
  line.textContent = 'outbox: ' + answer.pending + ' waiting for the relay' + age;
  line.classList.toggle('warn', answer.oldest_age_sec !== null && answer.oldest_age_sec > 60);
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

// Schedules: each periodic task, when it runs next, its last tick and that
// tick's task (a click opens it); "run now" publishes one run at once.
function renderSchedules(answer) {
  const body = document.querySelector('#schedules tbody');
  const rows = answer.schedules.map((s) => el('tr', { 'data-schedule': s.name },
    el('td', { class: 'mono' }, s.name), el('td', { title: s.task }, short(s.task)),
    el('td', {}, s.schedule + (s.kind === 'cron' ? ' (' + s.tz + ')' : '')),
    el('td', {}, ...s.next_runs.map((t) => el('div', { title: t }, absolute(t)))),
    el('td', {}, ago(s.last_tick)),
    el('td', {}, s.last_task_id ? taskId(s.last_task_id) : '-', ' ',
      s.last_task_id ? badge(s.last_task_status || 'unrecorded') : ''),
    el('td', {}, el('button', { onclick: () => runSchedule(s.name) }, 'run now'))));
  // A broken schedule is not run by the scheduler: its row says why.
  rows.push(...(answer.broken || []).map((b) => el('tr', { 'data-schedule': b.name, class: 'broken' },
    el('td', { class: 'mono' }, b.name), el('td', { title: b.task || '' }, b.task ? short(b.task) : '-'),
    el('td', {}, badge('broken')), el('td', { colspan: 4, class: 'error' }, b.error))));
  body.replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 7, class: 'muted' },
    answer.searched ? 'no schedules' : 'no schedules: set TASK_MODULES or SCHEDULES'))]));
  const leader = answer.leader;
  document.getElementById('schedules-leader').textContent = !rows.length ? ''
    : leader ? 'leading scheduler: ' + leader.holder + ', since ' + absolute(leader.since)
      : answer.records ? 'no scheduler leads: start kale scheduler or kale worker --scheduler'
        : 'task records are off: a scheduler needs RECORDS_URL';
}

async function runSchedule(name) {
  if (!window.confirm('Publish one run of ' + name + ' now?')) return;
  try {
    const answer = await api('schedules/' + encodeURIComponent(name) + '/run', { method: 'POST' });
    banner('published a run of ' + name + ' as ' + answer.task_id);
    refresh();
  } catch (error) { banner(error.message); }
}

// Webhooks: where the events of each topic are delivered (header values and
// secrets are never sent here). "deliveries" lists the webhook's delivery tasks.
function renderWebhooks(answer) {
  const body = document.querySelector('#webhooks tbody');
  const rows = answer.webhooks.map((w) => el('tr', { 'data-webhook': w.id },
    el('td', { class: 'mono' }, w.id), el('td', {}, w.topic),
    el('td', { class: 'wrap' }, w.method + ' ' + w.url), el('td', {}, labelsText(w.labels) || '-'),
    el('td', {}, w.active ? 'active' : 'disabled'),
    el('td', {}, el('button', { onclick: () => webhookDeliveries(w.id) }, 'deliveries'),
      el('button', { onclick: () => toggleWebhook(w) }, w.active ? 'disable' : 'enable'))));
  body.replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 6, class: 'muted' }, 'no webhooks'))]));
}

function webhookDeliveries(id) {
  document.getElementById('search-text').value = 'webhook=' + id;
  state.labels = [['webhook', id]];
  selectStatus('');
}

async function toggleWebhook(w) {
  try {
    await api('webhooks/' + encodeURIComponent(w.id) + '/' + (w.active ? 'disable' : 'enable'), { method: 'POST' });
    banner('webhook ' + w.id + (w.active ? ' disabled' : ' enabled'));
    refresh();
  } catch (error) { banner(error.message); }
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
  if ((t.status === 'failed' || t.status === 'cancelled') && !t.retried_as && !t.dead_of) {
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
  for (const [name, key] of [['retry of', 'labels'], ['duplicate of', 'duplicate_of'], ['retried as', 'retried_as'], ['dead run of', 'dead_of']]) {
    const id = key === 'labels' ? (record.labels || {}).retry_of : record[key];
    if (id && !id.startsWith('retrying:')) facts.append(...field(name, el('a', { class: 'id mono', onclick: () => showTask(id) }, id)));
  }
  if (due(record)) facts.append(...field('due', absolute(record.next_attempt_at)));
  if (record.dead_letter_reason) facts.append(...field('dead-letter reason', record.dead_letter_reason));
  const parts = [facts, el('h3', {}, 'Arguments')];
  parts.push(record.inputs ? json({ args: record.inputs.args, kwargs: record.inputs.kwargs })
    : el('p', { class: 'muted' }, 'not recorded (record_args = False)'));
  if (record.result !== null && record.result !== undefined) parts.push(el('h3', {}, 'Result'), json(record.result));
  if (record.error_type) {
    parts.push(el('h3', {}, 'Error'), el('p', { class: 'error' }, record.error_type + ': ' + (record.error_message || '')));
    if (record.error_traceback) parts.push(el('pre', { class: 'traceback' }, record.error_traceback));
  }
  if (record.stderr) parts.push(el('h3', {}, 'Standard error (its end)'), el('pre', { class: 'traceback stderr' }, record.stderr));
  const history = record.attempt_history || [];
  parts.push(el('h3', {}, 'Attempts'), history.length ? el('table', { class: 'attempts' },
    el('thead', {}, el('tr', {}, ...['#', 'outcome', 'started', 'duration', 'worker', 'error', 'retried after'].map((h) => el('th', {}, h)))),
    el('tbody', {}, ...history.map((a) => el('tr', {},
      el('td', { class: 'num' }, a.attempt), el('td', {}, badge(a.status)),
      el('td', {}, ago(a.started_at)),
      el('td', { class: 'num' }, a.duration_sec === null ? '-' : a.duration_sec.toFixed(3) + ' s'),
      el('td', { class: 'mono' }, a.worker || '-'),
      el('td', { class: 'wrap' }, a.error_type ? a.error_type + ': ' + (a.error_message || '') : ''),
      el('td', { class: 'num' }, a.retry_delay_sec === null || a.retry_delay_sec === undefined ? '' : a.retry_delay_sec + ' s')))))
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
    legend.append(el('span', {}, el('i', { class: 'swatch-' + (i % PALETTE.length) }), short(name)));
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

// --- workflows -------------------------------------------------------------------------------

const WORKFLOW_PAGE = 10;
// The DAG's geometry, in pixels: a node's box, and the gaps between layers
// (left to right) and between the boxes of one layer (top to bottom).
const BOX = { width: 180, height: 46, gapX: 64, gapY: 16, pad: 16 };

function nodeStates(counts) {
  return el('span', { class: 'node-states' }, ...Object.entries(counts || {}).map(([s, n]) =>
    el('span', { class: 'state-text ' + s }, n + ' ' + s)));
}

function renderWorkflows(answer) {
  const body = document.querySelector('#workflows tbody');
  const rows = answer.workflows.map((w) => el('tr', { 'data-id': w.id },
    el('td', {}, el('a', { class: 'id mono', onclick: () => showWorkflow(w.id) }, w.id)),
    el('td', {}, badge(w.status)), el('td', {}, nodeStates(w.node_states)),
    el('td', { class: 'mono' }, labelsText(w.labels)), el('td', {}, ago(w.created_at)),
    el('td', {}, ago(w.finished_at))));
  body.replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 6, class: 'muted' }, 'no workflows'))]));
  document.getElementById('workflows-more').hidden = !answer.next;
}

function workflowsQuery() {
  const params = new URLSearchParams({ limit: String(WORKFLOW_PAGE * state.workflowPages) });
  if (state.workflowStatus) params.set('status', state.workflowStatus);
  return params.toString();
}

// Each node's layer: the longest path to it from a root (Kahn's order).
function layersOf(nodes) {
  const layer = new Map(nodes.map((n) => [n.task_id, 0]));
  const waiting = new Map(nodes.map((n) => [n.task_id, n.upstream.filter((u) => layer.has(u)).length]));
  const ready = nodes.filter((n) => waiting.get(n.task_id) === 0).map((n) => n.task_id);
  const byId = new Map(nodes.map((n) => [n.task_id, n]));
  while (ready.length) {
    const id = ready.shift();
    for (const later of byId.get(id).downstream) {
      if (!layer.has(later)) continue;
      layer.set(later, Math.max(layer.get(later), layer.get(id) + 1));
      waiting.set(later, waiting.get(later) - 1);
      if (waiting.get(later) === 0) ready.push(later);
    }
  }
  return layer;
}

// Where each node's box goes: layers left to right; in a layer, nodes in
// the mean order of their upstream nodes, so that edges cross less.
function placeNodes(nodes) {
  const layer = layersOf(nodes);
  const columns = [];
  nodes.forEach((n, index) => {
    const column = layer.get(n.task_id);
    (columns[column] = columns[column] || []).push({ node: n, index });
  });
  const row = new Map();
  for (const column of columns) {
    if (!column) continue;
    const weight = (item) => {
      const rows = item.node.upstream.filter((u) => row.has(u)).map((u) => row.get(u));
      return rows.length ? rows.reduce((a, b) => a + b, 0) / rows.length : item.index;
    };
    column.sort((a, b) => weight(a) - weight(b) || a.index - b.index);
    column.forEach((item, i) => row.set(item.node.task_id, i));
  }
  const tallest = Math.max(1, ...columns.map((c) => (c ? c.length : 0)));
  const place = new Map();
  columns.forEach((column, c) => {
    const offset = (tallest - column.length) * (BOX.height + BOX.gapY) / 2;
    column.forEach((item, i) => place.set(item.node.task_id, {
      x: BOX.pad + c * (BOX.width + BOX.gapX),
      y: BOX.pad + offset + i * (BOX.height + BOX.gapY), layer: c }));
  });
  return { place, width: 2 * BOX.pad + columns.length * BOX.width + (columns.length - 1) * BOX.gapX,
    height: 2 * BOX.pad + tallest * BOX.height + (tallest - 1) * BOX.gapY };
}

function fitted(text, chars) { return text.length > chars ? text.slice(0, chars - 1) + '\u2026' : text; }

function dagNode(node, at) {
  const group = svg('g', { class: 'node ' + node.state, 'data-task-id': node.task_id,
    'data-state': node.state, 'data-layer': at.layer, transform: 'translate(' + at.x + ',' + at.y + ')' });
  const title = svg('title');
  title.textContent = node.task + '\n' + node.task_id + ' (' + node.queue + ')'
    + (node.reason ? '\n' + node.reason : '') + (node.published ? '' : '\nnot published: no task yet');
  const name = svg('text', { class: 'task', x: 10, y: 19 });
  name.textContent = fitted(short(node.task), 24);
  const said = svg('text', { class: 'state', x: 10, y: 36 });
  said.textContent = node.state;
  group.append(title, svg('rect', { width: BOX.width, height: BOX.height, rx: 6 }), name, said);
  if (node.published) {
    group.classList.add('link');
    group.setAttribute('tabindex', '0');
    group.setAttribute('role', 'link');
    group.addEventListener('click', () => showTask(node.task_id));
    group.addEventListener('keydown', (e) => { if (e.key === 'Enter') showTask(node.task_id); });
  }
  return group;
}

// The workflow's graph: a box per node, coloured and labelled by its state,
// and an arrow per edge from the right side of one box to the left of the next.
function drawDag(wf, placed) {
  const { place, width, height } = placed;
  const chart = svg('svg', { width, height, viewBox: '0 0 ' + width + ' ' + height,
    role: 'img', 'aria-label': 'the graph of workflow ' + wf.id });
  const marker = svg('marker', { id: 'dag-arrow', viewBox: '0 0 10 10', refX: 10, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' });
  marker.append(svg('path', { class: 'arrow', d: 'M0,0 L10,5 L0,10 z' }));
  const defs = svg('defs');
  defs.append(marker);
  chart.append(defs);
  for (const [from, to] of wf.edges) {
    const a = place.get(from); const b = place.get(to);
    if (!a || !b) continue;
    const x1 = a.x + BOX.width; const y1 = a.y + BOX.height / 2;
    const x2 = b.x; const y2 = b.y + BOX.height / 2; const middle = (x1 + x2) / 2;
    chart.append(svg('path', { class: 'edge', 'data-from': from, 'data-to': to,
      'marker-end': 'url(#dag-arrow)',
      d: 'M' + x1 + ',' + y1 + ' C' + middle + ',' + y1 + ' ' + middle + ',' + y2 + ' ' + x2 + ',' + y2 }));
  }
  for (const node of wf.nodes) chart.append(dagNode(node, place.get(node.task_id)));
  return el('div', { class: 'dag' }, chart);
}

function renderWorkflow(wf) {
  state.workflowShown = JSON.stringify(wf);
  document.getElementById('workflow-id').textContent = wf.id;
  document.getElementById('workflow-status').replaceChildren(badge(wf.status));
  document.getElementById('workflow-cancel').hidden = wf.status !== 'running';
  document.getElementById('workflow-retry').hidden = wf.status !== 'failed' && wf.status !== 'cancelled';
  const facts = el('dl', { class: 'facts' },
    ...field('nodes', String(wf.node_count), ': ', nodeStates(wf.node_states)),
    ...field('labels', labelsText(wf.labels) || '-'),
    ...field('created', ago(wf.created_at), ' ', el('span', { class: 'muted' }, absolute(wf.created_at))),
    ...field('finished', ago(wf.finished_at)));
  if (wf.deadline_at) facts.append(...field('deadline', absolute(wf.deadline_at)));
  const placed = placeNodes(wf.nodes);
  const at = (n) => placed.place.get(n.task_id);
  const inOrder = wf.nodes.slice().sort((a, b) => at(a).x - at(b).x || at(a).y - at(b).y);
  const table = el('table', { class: 'nodes' },
    el('thead', {}, el('tr', {}, ...['node (its task)', 'task', 'state', 'queue', 'reason'].map((h) => el('th', {}, h)))),
    el('tbody', {}, ...inOrder.map((n) => el('tr', { 'data-id': n.task_id },
      el('td', {}, n.published ? taskId(n.task_id) : el('span', { class: 'mono muted', title: 'not published: no task yet' }, n.task_id)),
      el('td', { title: n.task }, short(n.task)), el('td', {}, badge(n.state)),
      el('td', {}, n.queue), el('td', { class: 'wrap' }, n.reason || '')))));
  document.getElementById('workflow-body').replaceChildren(facts, drawDag(wf, placed), table);
}

// Open the workflow's panel; ``quiet``: a refresh, which redraws only what changed.
async function showWorkflow(id, quiet) {
  try {
    const wf = await api('workflows/' + encodeURIComponent(id));
    if (quiet && state.workflow !== wf.id) return;          // closed or another opened meanwhile
    state.workflow = wf.id;
    if (!quiet || JSON.stringify(wf) !== state.workflowShown) renderWorkflow(wf);
    const panel = document.getElementById('workflow');
    panel.hidden = false;
    if (!quiet) { panel.scrollIntoView(); banner(''); }
  } catch (error) { banner(error.message); }
}

// A workflow panel's action (cancel, retry), asked first; the panel and the page refresh.
async function workflowAction(action, question, done) {
  const id = state.workflow;
  if (!id || !window.confirm(question.replace('%s', id))) return;
  try {
    renderWorkflow(await api('workflows/' + encodeURIComponent(id) + '/' + action, { method: 'POST' }));
    banner(done + ' workflow ' + id);
    refresh();
  } catch (error) { banner(error.message); }
}

function cancelWorkflow() {
  return workflowAction('cancel', 'Cancel workflow %s? Its nodes that have not ended will never run.', 'cancelled');
}

function retryWorkflow() {
  return workflowAction('retry', 'Retry workflow %s? Its nodes that failed, were cancelled or never ran run again; those that succeeded keep their results.', 'retrying');
}

function selectWorkflowStatus(status) {
  state.workflowStatus = status;
  state.workflowPages = 1;
  document.querySelectorAll('#workflow-tabs button').forEach((b) => b.classList.toggle('active', b.dataset.status === status));
  refresh();
}

// --- refreshing ------------------------------------------------------------------------------

async function refresh() {
  if (state.busy) return;
  state.busy = true;
  const started = performance.now();
  let failed = false;
  try {
    const [summary, tasks, count, workers, timeline] = await Promise.all([
      api('tasks/summary?' + filterParams(false)), api('tasks?' + tasksQuery()),
      api('tasks/count?' + filterParams(true)), api('workers'), api('timeline?window=auto')]);
    if (summary !== state.summary) renderCounts(summary);
    renderTasks(tasks, count.count); renderWorkers(workers);
    if (timeline !== state.timeline) renderTimeline(timeline);
    Object.assign(state, { summary, timeline });
    try { renderQueues(await api('queues')); } catch (error) { banner('queues: ' + error.message); }
    try { renderOutbox(await api('outbox')); } catch (error) { banner('outbox: ' + error.message); }
    try { renderWorkflows(await api('workflows?' + workflowsQuery())); } catch (error) { banner('workflows: ' + error.message); }
    try { renderSchedules(await api('schedules')); } catch (error) { banner('schedules: ' + error.message); }
    try { renderWebhooks(await api('webhooks')); } catch (error) { banner('webhooks: ' + error.message); }
    if (state.workflow) await showWorkflow(state.workflow, true);
    document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    document.body.dataset.loaded = 'true';
  } catch (error) {
    failed = true;
    banner(error.message);
  } finally {
    state.busy = false;
    // Slow answers (or none): wait twice as long before the next; fast ones: the usual pause.
    const slow = failed || performance.now() - started > SLOW_MS;
    state.delay = slow ? Math.min(MAX_REFRESH_MS, state.delay * 2) : REFRESH_MS;
    document.body.dataset.refreshMs = state.delay;
  }
}

// The next refresh, unless automatic refresh is off or the tab is hidden
// (it refreshes at once when shown again).
function schedule() {
  clearTimeout(state.timer);
  state.timer = null;
  if (!document.getElementById('auto').checked || document.visibilityState === 'hidden') return;
  state.timer = setTimeout(() => refresh().then(schedule), state.delay);
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
document.getElementById('workflow-close').addEventListener('click', () => { document.getElementById('workflow').hidden = true; state.workflow = null; });
document.getElementById('workflow-cancel').addEventListener('click', cancelWorkflow);
document.getElementById('workflow-retry').addEventListener('click', retryWorkflow);
document.getElementById('workflows-more').addEventListener('click', () => { state.workflowPages += 1; refresh(); });
document.querySelectorAll('#workflow-tabs button').forEach((b) => b.addEventListener('click', () => selectWorkflowStatus(b.dataset.status)));
document.querySelectorAll('#tabs button').forEach((b) => b.addEventListener('click', () => selectStatus(b.dataset.status)));
document.querySelectorAll('#tasks th[data-sort]').forEach((th) => th.addEventListener('click', () => sortBy(th.dataset.sort)));
document.getElementById('auto').addEventListener('change', schedule);
document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'hidden') schedule();
  else refresh().then(schedule);
});
refresh().then(schedule);
