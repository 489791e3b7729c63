// The Kale dashboard: plain JavaScript, no dependencies, nothing from a CDN.
// It reads the REST API next to it (relative URLs, so it also works mounted
// under a prefix) every few seconds and draws tables and two SVG charts.
'use strict';

const STATUSES = ['queued', 'running', 'scheduled', 'succeeded', 'failed', 'cancelled', 'purged',
  'deduplicated', 'pending'];
const PALETTE = ['#1f6feb', '#2f855a', '#c53030', '#b7791f', '#805ad5', '#0d9488', '#db2777',
  '#4b5563'];
const REFRESH_MS = 3000;
const state = { status: 'failed', labels: null, timer: null, busy: false };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === 'class') node.className = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
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
  if (match) sessionStorage.setItem('kale-token', decodeURIComponent(match[1]));
  return sessionStorage.getItem('kale-token');
}

async function api(path, options) {
  const headers = {};
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

function ago(iso) {
  if (!iso) return '-';
  const seconds = (Date.now() - Date.parse(iso)) / 1000;
  if (seconds < 60) return Math.max(0, Math.round(seconds)) + 's ago';
  if (seconds < 3600) return Math.round(seconds / 60) + 'm ago';
  if (seconds < 86400) return Math.round(seconds / 3600) + 'h ago';
  return new Date(iso).toLocaleString();
}

function badge(status) { return el('span', { class: 'badge ' + status }, status); }

// A waiting task whose delay (or retry back-off) has not passed: when it is due.
function due(t) {
  if ((t.status !== 'queued' && t.status !== 'scheduled') || !t.next_attempt_at) return '';
  const seconds = (Date.parse(t.next_attempt_at) - Date.now()) / 1000;
  if (seconds <= 0) return '';
  const text = seconds < 60 ? Math.round(seconds) + 's' : seconds < 3600
    ? Math.round(seconds / 60) + 'm' : Math.round(seconds / 3600) + 'h';
  return el('span', { class: 'due muted', title: new Date(t.next_attempt_at).toLocaleString() },
    ' due in ' + text);
}
function short(name) { return name ? name.split('.').pop() : '-'; }
function labelsText(labels) {
  return Object.entries(labels || {}).map(([k, v]) => k + '=' + v).join(' ');
}

function tasksQuery() {
  const params = new URLSearchParams({ limit: '25' });
  if (state.status) params.set('status', state.status);
  if (state.labels) for (const [k, v] of state.labels) params.set('label.' + k, v);
  return params.toString();
}

function renderCounts(summary) {
  const box = document.getElementById('counts');
  box.replaceChildren(...STATUSES.map((status) => el('div', {
    class: 'card', 'data-status': status,
    onclick: () => selectStatus(status),
  }, el('div', { class: 'n', style: 'color: var(--' + status + ')' }, summary.by_status[status] || 0),
  el('div', { class: 'label' }, status))));
}

function renderQueues(answer) {
  const body = document.querySelector('#queues tbody');
  body.replaceChildren(...answer.queues.map((q) => el('tr', {},
    el('td', {}, q.name), el('td', { class: 'num' }, q.priority),
    el('td', { class: 'num' }, q.visible ?? '-'), el('td', { class: 'num' }, q.in_flight ?? '-'),
    el('td', { class: 'num' }, q.delayed ?? '-'), el('td', { class: 'num' }, q.dead_letters ?? '-'),
    el('td', { class: 'num' }, q.throughput_per_min ?? 0),
    el('td', {}, q.dead_letters ? el('button', { onclick: () => redrive(q.name) }, 'redrive') : ''))));
}

function renderWorkers(answer) {
  const body = document.querySelector('#workers tbody');
  const rows = answer.workers.slice(0, 30).map((w) => el('tr', {},
    el('td', {}, badge(w.state)),
    el('td', { class: 'mono' }, w.host + ':' + w.pid + (w.role === 'supervisor' ? ' (supervisor)' : '')),
    el('td', {}, (w.queues || []).join(', ') || 'all'),
    el('td', { class: 'mono' }, w.current_task ? short(w.current_task_name) + ' ' + w.current_task.slice(0, 12) : '-'),
    el('td', {}, labelsText(w.counts)), el('td', {}, ago(w.heartbeat_at))));
  body.replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 6, class: 'muted' }, 'no workers recorded yet'))]));
}

function renderTasks(answer) {
  const body = document.querySelector('#tasks tbody');
  const rows = answer.tasks.map((t) => el('tr', {},
    el('td', { class: 'mono' }, el('a', { class: 'id', onclick: () => showTask(t.id) }, t.id.slice(0, 16))),
    el('td', {}, short(t.task)), el('td', {}, badge(t.status), due(t)),
    el('td', { class: 'num' }, t.attempts),
    el('td', { class: 'mono' }, labelsText(t.labels)), el('td', {}, ago(t.published_at)),
    el('td', { class: 'wrap' }, t.error_type ? t.error_type + ': ' + (t.error_message || '') : ''),
    el('td', {}, actions(t))));
  body.replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 8, class: 'muted' }, 'no tasks'))]));
}

function actions(t) {
  const box = el('span', {});
  if (t.status === 'failed' || t.status === 'cancelled') {
    box.append(el('button', { onclick: () => act(t.id, 'retry') }, 'retry'));
  }
  if (t.status === 'queued' || t.status === 'scheduled') {
    box.append(el('button', { onclick: () => act(t.id, 'cancel') }, 'cancel'));
  }
  return box;
}

function drawChart(id, series, value, unit) {
  const box = document.getElementById(id);
  const names = Object.keys(series);
  const points = names.flatMap((n) => series[n].map((p) => [Date.parse(p.t), value(p)]))
    .filter(([, v]) => v !== null);
  const width = 520; const height = 170; const left = 40; const bottom = 18;
  const chart = svg('svg', { viewBox: '0 0 ' + width + ' ' + (height + bottom), preserveAspectRatio: 'none' });
  const now = Date.now(); const start = now - 3600 * 1000;
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
  for (const [offset, text] of [[0, '-60m'], [0.5, '-30m'], [1, 'now']]) {
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
  box.replaceChildren(chart, points.length ? legend : el('div', { class: 'muted' }, 'nothing finished in the last hour'));
}

function renderTimeline(answer) {
  const perMinute = 60 / answer.bucket_sec;
  drawChart('chart-throughput', answer.series,
    (p) => (p.succeeded + p.failed + p.cancelled) * perMinute, '');
  drawChart('chart-duration', answer.series, (p) => p.mean_duration_sec, 's');
}

async function refresh() {
  if (state.busy) return;
  state.busy = true;
  try {
    const [summary, tasks, workers, timeline] = await Promise.all([
      api('tasks/summary'), api('tasks?' + tasksQuery()), api('workers'), api('timeline')]);
    renderCounts(summary); renderTasks(tasks); renderWorkers(workers); renderTimeline(timeline);
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
  document.querySelectorAll('#tabs button').forEach((b) => b.classList.toggle('active', b.dataset.status === status));
  document.getElementById('tasks-title').textContent = status === 'failed' ? 'Recent failures'
    : (status ? 'Tasks: ' + status : 'All tasks') + (state.labels ? ' with ' + state.labels.map((l) => l.join('=')).join(' ') : '');
  refresh();
}

async function showTask(id) {
  try {
    const record = await api('tasks/' + encodeURIComponent(id));
    document.getElementById('detail-id').textContent = id;
    document.getElementById('detail-body').textContent = JSON.stringify(record, null, 2);
    document.getElementById('detail').hidden = false;
    document.getElementById('detail').scrollIntoView();
    banner('');
  } catch (error) { banner(error.message); }
}

async function act(id, action) {
  try {
    const answer = await api('tasks/' + encodeURIComponent(id) + '/' + action, { method: 'POST' });
    banner(action === 'retry' ? 'published again as ' + answer.id : 'cancelled ' + id);
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

document.getElementById('search').addEventListener('submit', search);
document.getElementById('search-clear').addEventListener('click', () => {
  document.getElementById('search-text').value = ''; state.labels = null; selectStatus(state.status);
});
document.getElementById('detail-close').addEventListener('click', () => { document.getElementById('detail').hidden = true; });
document.querySelectorAll('#tabs button').forEach((b) => b.addEventListener('click', () => selectStatus(b.dataset.status)));
document.getElementById('auto').addEventListener('change', (e) => {
  clearInterval(state.timer);
  if (e.target.checked) state.timer = setInterval(refresh, REFRESH_MS);
});
state.timer = setInterval(refresh, REFRESH_MS);
refresh();
