// The Kale dashboard: plain JavaScript, nothing to build, nothing from a CDN.
// It reads the REST API next to it (relative URLs, so it also works mounted
// under a prefix). Each view has its own URL (#/tasks?status=failed,
// #/tasks/ID, #/workflows/ID, #/queues/NAME, #/workers/ID...), so back and
// forward work and a link can be pasted anywhere. The files:
//   app.js     helpers, the API, the router and the refresh (this file)
//   charts.js  the charts (uPlot, vendored: uplot.min.js, uplot-LICENSE)
//   dag.js     a workflow's graph, in SVG
//   views.js   one function per view
//   start.js   wires the page up
'use strict';

const STATUSES = ['queued', 'running', 'scheduled', 'succeeded', 'failed', 'cancelled', 'purged',
  'deduplicated', 'pending'];
const REFRESH_MS = 3000;
// A refresh slower than this doubles the pause before the next one, up to MAX_REFRESH_MS.
const SLOW_MS = 1000;
const MAX_REFRESH_MS = 60000;
const PAGE = 25;
const DAY_MS = 24 * 3600 * 1000;

// --- helpers ---------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === '' || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  return node;
}

// The hash of a view: link('tasks', id) is '#/tasks/ID'; params become its query.
function link(...parts) {
  let params = null;
  if (parts.length && typeof parts[parts.length - 1] === 'object') params = parts.pop();
  const path = '#/' + parts.map((p) => encodeURIComponent(p)).join('/');
  const query = params ? new URLSearchParams(Object.entries(params).filter(([, v]) => v !== '' && v !== null && v !== undefined)).toString() : '';
  return path + (query ? '?' + query : '');
}

function a(href, text, attrs) { return el('a', Object.assign({ href }, attrs || {}), text); }

// The bearer token: taken from the address only in the dashboard's own form,
// #token=TOKEN at the start of its hash (a token= further on, as in a label
// searched for or a pasted link's filter, is the view's and changes nothing);
// else the one this tab keeps.
function token() {
  const match = location.hash.match(/^#token=([^&]+)/);
  if (match) {
    sessionStorage.setItem('kale-token', decodeURIComponent(match[1]));
    // The token leaves the address bar and the history at once.
    history.replaceState(null, '', location.pathname + location.search + '#/');
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

function post(path) { return api(path, { method: 'POST' }); }

// The counts by status of a filter, and (when asked) the timeline of tasks
// finished per task: the two requests the refresh makes most, fetched here only.
async function summaryAndTimeline(filter, withTimeline) {
  const [summary, timeline] = await Promise.all([api('tasks/summary?' + filter),
    withTimeline ? api('timeline?window=auto') : null]);
  return { summary, timeline };
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
    window.prompt('Copy the id:', text);
  }
}

// A full task id: a link to its view, and a button that copies it.
function taskId(id) {
  return el('span', { class: 'task-id' }, a(link('tasks', id), id, { class: 'id mono' }),
    el('button', { type: 'button', class: 'copy', 'aria-label': 'copy the id ' + id, onclick: () => copy(id) }, 'copy'));
}

function field(name, ...value) { return [el('dt', {}, name), el('dd', {}, ...value)]; }

function table(headers, rows, empty, attrs) {
  return el('table', attrs || {},
    el('thead', {}, el('tr', {}, ...headers.map((h) => (h instanceof Node ? h : el('th', { scope: 'col', class: h.endsWith(' #') ? 'num' : '' }, h.replace(/ #$/, '')))))),
    el('tbody', {}, ...(rows.length ? rows : [el('tr', {}, el('td', { colspan: headers.length, class: 'muted' }, empty))])));
}

function panel(title, ...children) {
  return el('section', { class: 'panel' }, title ? el('h2', {}, title) : '', ...children);
}

// Ask, POST, say what happened, refresh: every action of the dashboard.
async function action(question, path, said) {
  if (question && !window.confirm(question)) return null;
  try {
    const answer = await post(path);
    banner(typeof said === 'function' ? said(answer) : said);
    refresh();
    return answer;
  } catch (error) { banner(error.message); return null; }
}

// --- the router ---------------------------------------------------------------------------

// The view a hash names: {name, id, params, key}.
function parseRoute() {
  const hash = location.hash.replace(/^#\/?/, '');
  const [path, query] = hash.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(query || '');
  const section = parts[0] || 'overview';
  const name = parts.length > 1 ? section.replace(/s$/, '') : section;
  return { name, section, id: parts.slice(1).join('/'), params, key: hash };
}

const page = { route: null, view: null, busy: false, timer: null, again: false, delay: REFRESH_MS };

// Show the view the address names: its frame at once, its data as it comes.
function route() {
  token();
  const next = parseRoute();
  const view = VIEWS[next.name] || VIEWS.missing;
  page.route = next;
  page.view = view;
  document.querySelectorAll('#nav a').forEach((nav) => {
    if (nav.dataset.view === next.section) nav.setAttribute('aria-current', 'page');
    else nav.removeAttribute('aria-current');
  });
  const main = document.getElementById('view');
  const frame = view.frame(next);
  main.replaceChildren(frame);
  main.dataset.view = next.name;
  document.title = (frame.querySelector('h1') ? frame.querySelector('h1').textContent + ' · ' : '') + 'Kale';
  document.body.dataset.loaded = 'false';
  if (page.focus) main.focus({ preventScroll: true });
  page.focus = true;
  window.scrollTo(0, 0);
  refresh();
}

// What ``promise`` gives, for a view filling ``route``: when another address
// was opened while it came (a second click on a column's sort, a filter), it
// throws instead, so that a fill never writes its rows into the frame of the
// address that replaced its own (refresh says nothing of it, and fills anew).
async function loaded(route, promise) {
  const value = await promise;
  if (route !== page.route) throw new Error('left ' + location.hash);
  return value;
}

// Fill the current view with fresh data (every few seconds, and after an action).
async function refresh() {
  if (page.busy) { page.again = true; return; }
  page.busy = true;
  const shown = page.route;
  const started = performance.now();
  let failed = false;
  try {
    await page.view.fill(shown);
    if (shown !== page.route) return;
    document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    document.body.dataset.loaded = 'true';
  } catch (error) {
    failed = true;
    // A view left while its data came has nothing to say (its elements are gone).
    if (shown === page.route) banner(error.message);
  } finally {
    page.busy = false;
    // Slow answers (or none): wait twice as long before the next; fast ones: the usual pause.
    const slow = failed || performance.now() - started > SLOW_MS;
    page.delay = slow ? Math.min(MAX_REFRESH_MS, page.delay * 2) : REFRESH_MS;
    document.body.dataset.refreshMs = page.delay;
    if (page.again) { page.again = false; refresh(); }
  }
}

function go(hash) { location.hash = hash; }
