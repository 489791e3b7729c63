// The views: each has frame(route), drawn once when its address is opened
// (headings, forms, empty tables), and fill(route), which fetches its data
// and fills the frame, on opening and at every refresh.
'use strict';

const TASK_TABS = [['all', ''], ['failed', 'failed'], ['pending', 'pending'],
  ['succeeded', 'succeeded'], ['cancelled', 'cancelled'], ['purged', 'purged,deduplicated']];
const WORKFLOW_TABS = [['all', ''], ['running', 'running'], ['succeeded', 'succeeded'],
  ['failed', 'failed'], ['cancelled', 'cancelled']];
const SINCE = [['', 'any time'], ['3600', 'last hour'], ['86400', 'last day'], ['604800', 'last week']];

function heading(text, ...after) { return el('div', { class: 'title' }, el('h1', {}, text), ...after); }

function byId(id) { return document.getElementById(id); }

function fillBody(id, rows, empty, columns) {
  const body = document.querySelector('#' + id + ' tbody');
  if (!body) return;
  body.replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: columns, class: 'muted' }, empty))]));
}

// --- counts, tasks' filter ---------------------------------------------------------------------

function countCards(summary, params) {
  const box = byId('counts');
  if (!box) return;
  box.replaceChildren(...STATUSES.map((status) => {
    const target = new URLSearchParams(params || '');
    target.set('status', status);
    return el('a', { class: 'card', 'data-status': status, href: '#/tasks?' + target },
      el('span', { class: 'n' }, summary.by_status[status] || 0), el('span', { class: 'label' }, status));
  }));
}

// The tasks' filter a route names, as API query parameters (the status apart).
function taskFilter(params) {
  const filter = new URLSearchParams();
  for (const name of ['task', 'queue']) if (params.get(name)) filter.set(name, params.get(name));
  if (params.get('since')) filter.set('since', String(Date.now() / 1000 - Number(params.get('since'))));
  for (const [name, value] of params) if (name.startsWith('label.')) filter.set(name, value);
  return filter;
}

function filterText(params) {
  const parts = [];
  if (params.get('task')) parts.push('task ' + params.get('task'));
  if (params.get('queue')) parts.push('queue ' + params.get('queue'));
  const since = SINCE.find(([value]) => value && value === params.get('since'));
  if (since) parts.push(since[1]);
  for (const [name, value] of params) if (name.startsWith('label.')) parts.push(name.slice(6) + '=' + value);
  return parts.join(', ');
}

function taskActions(t) {
  const box = el('span', { class: 'actions' });
  if ((t.status === 'failed' || t.status === 'cancelled') && !t.retried_as && !t.dead_of) {
    box.append(el('button', { type: 'button', onclick: () => action(null, 'tasks/' + encodeURIComponent(t.id) + '/retry',
      (answer) => (answer.published ? 'published again as ' : 'retried before, as ') + answer.id) }, 'retry'));
  }
  if (t.retried_as && !t.retried_as.startsWith('retrying:')) {
    box.append(el('span', { class: 'muted' }, 'retried as '), a(link('tasks', t.retried_as), t.retried_as.slice(0, 8), { class: 'id mono' }));
  }
  if (t.status === 'queued' || t.status === 'scheduled') {
    box.append(el('button', { type: 'button', onclick: () => action(null, 'tasks/' + encodeURIComponent(t.id) + '/cancel', 'cancelled ' + t.id) }, 'cancel'));
  }
  return box;
}

function taskRows(tasks) {
  return tasks.map((t) => el('tr', { 'data-id': t.id },
    el('td', {}, taskId(t.id)), el('td', { title: t.task }, short(t.task)),
    el('td', {}, badge(t.status), due(t)), el('td', { class: 'num' }, t.attempts),
    el('td', {}, a(link('queues', t.queue), t.queue)),
    el('td', { class: 'mono' }, labelsText(t.labels)), el('td', {}, ago(t.published_at)),
    el('td', { class: 'wrap' }, t.error_type ? t.error_type + ': ' + (t.error_message || '') : ''),
    el('td', {}, taskActions(t))));
}

const TASK_HEADERS = ['task id', 'task', 'status', 'attempts #', 'queue', 'labels', 'published', 'error', 'actions'];

// --- overview ----------------------------------------------------------------------------------

const overview = {
  frame() {
    return el('div', { class: 'stack' }, heading('Overview'),
      el('section', { id: 'counts', class: 'cards', 'aria-label': 'tasks by status' }),
      el('section', { class: 'panel charts', 'aria-label': 'charts' },
        chartFigure('chart-queue-throughput', 'Tasks finished per minute, per queue'),
        chartFigure('chart-queue-duration', 'Mean duration (s), per queue'),
        chartFigure('chart-failures', 'Failures and retries per minute (stacked)'),
        chartFigure('chart-throughput', 'Tasks finished per minute, per task'),
        chartFigure('chart-duration', 'Mean duration (s), per task')),
      panel('Queues', table(['queue', 'state', 'visible #', 'in flight #', 'dead letters #', 'done / min #'], [], 'loading', { id: 'queues' })),
      panel('Recent failures', table(TASK_HEADERS, [], 'loading', { id: 'tasks' }),
        el('p', {}, a(link('tasks', { status: 'failed' }), 'every failure'))));
  },
  async fill(route) {
    const [{ summary, timeline }, activity, failures] = await loaded(route, Promise.all([
      summaryAndTimeline('', true), api('activity?by=queue&window=auto'),
      api('tasks?status=failed&limit=5')]));
    countCards(summary);
    throughputChart(byId('chart-queue-throughput').closest('figure'), activity);
    durationChart(byId('chart-queue-duration').closest('figure'), activity);
    failuresChart(byId('chart-failures').closest('figure'), activity);
    throughputChart(byId('chart-throughput').closest('figure'), timeline);
    durationChart(byId('chart-duration').closest('figure'), timeline);
    fillBody('tasks', taskRows(failures.tasks), 'no failures', TASK_HEADERS.length);
    const queues = await loaded(route, api('queues').catch((error) => { banner('queues: ' + error.message); return { queues: [] }; }));
    fillBody('queues', queues.queues.map((q) => el('tr', { 'data-queue': q.name },
      el('td', {}, a(link('queues', q.name), q.name)), el('td', {}, q.paused_at ? badge('paused') : badge('active')),
      el('td', { class: 'num' }, q.visible ?? '-'), el('td', { class: 'num' }, q.in_flight ?? '-'),
      el('td', { class: 'num' }, q.dead_letters ?? '-'), el('td', { class: 'num' }, q.throughput_per_min ?? 0))),
    'no queues', 6);
  },
};

// --- tasks -----------------------------------------------------------------------------------------

const tasks = {
  frame(route) {
    const params = route.params;
    const status = params.get('status') || '';
    const filter = filterText(params);
    const tab = (label, value) => {
      const target = new URLSearchParams(params);
      target.delete('limit');
      if (value) target.set('status', value); else target.delete('status');
      return a('#/tasks?' + target, label, { class: value === status ? 'tab active' : 'tab',
        'aria-current': value === status ? 'true' : null, 'data-status': value });
    };
    const since = el('select', { id: 'filter-since', name: 'since' }, ...SINCE.map(([value, text]) =>
      el('option', { value, selected: value === (params.get('since') || '') }, text)));
    const queue = el('select', { id: 'filter-queue', name: 'queue' }, el('option', { value: '' }, 'any queue'));
    if (params.get('queue')) queue.append(el('option', { value: params.get('queue'), selected: true }, params.get('queue')));
    const form = el('form', { id: 'filters', class: 'filters', autocomplete: 'off' },
      el('label', { for: 'filter-task' }, 'task'), el('input', { id: 'filter-task', name: 'task', value: params.get('task') || '', placeholder: 'task name' }),
      el('label', { for: 'filter-queue' }, 'queue'), queue,
      el('label', { for: 'filter-since' }, 'published'), since,
      el('button', { type: 'submit' }, 'Filter'),
      filter ? a('#/tasks' + (status ? '?status=' + encodeURIComponent(status) : ''), 'clear the filter') : '');
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const target = new URLSearchParams();
      if (status) target.set('status', status);
      for (const name of ['task', 'queue', 'since']) {
        const value = form.elements[name].value.trim();
        if (value) target.set(name, value);
      }
      for (const [name, value] of params) if (name.startsWith('label.')) target.set(name, value);
      go('#/tasks?' + target);
    });
    const title = (status === 'failed' ? 'Failed tasks' : status ? 'Tasks: ' + status : 'Tasks') + (filter ? ' (' + filter + ')' : '');
    return el('div', { class: 'stack' }, heading(title),
      el('section', { id: 'counts', class: 'cards', 'aria-label': 'tasks of this filter by status' }),
      el('section', { class: 'panel' },
        el('nav', { class: 'tabs', 'aria-label': 'status', id: 'tabs' }, ...TASK_TABS.map(([label, value]) => tab(label, value))),
        form,
        el('div', { class: 'table-actions' }, el('button', { type: 'button', id: 'bulk-retry', hidden: true, onclick: () => bulkRetry(route) }, 'retry all failed of this filter')),
        table(TASK_HEADERS.map((h) => sortHeader(h, route)), [], 'loading', { id: 'tasks' }),
        el('div', { class: 'pager' }, el('span', { id: 'shown', class: 'muted' }),
          el('button', { type: 'button', id: 'more', hidden: true, onclick: () => more(route) }, 'show ' + PAGE + ' more'))));
  },
  async fill(route) {
    const params = route.params;
    const filter = taskFilter(params);
    const withStatus = new URLSearchParams(filter);
    if (params.get('status')) withStatus.set('status', params.get('status'));
    const listed = new URLSearchParams(withStatus);
    listed.set('limit', params.get('limit') || String(PAGE));
    const [{ summary }, found, count, queues] = await loaded(route, Promise.all([summaryAndTimeline(filter, false),
      api('tasks?' + listed), api('tasks/count?' + withStatus), knownQueues()]));
    countCards(summary, params);
    document.querySelectorAll('#tasks th[data-sort] a.sort').forEach((sort) => {
      sort.setAttribute('href', sortHref(sort.parentElement.dataset.sort, params));
    });
    const select = byId('filter-queue');
    if (select && select.options.length <= 2) {
      for (const name of queues) if (name !== params.get('queue')) select.append(el('option', { value: name }, name));
    }
    fillBody('tasks', taskRows(sorted(found.tasks, params)), 'no tasks', TASK_HEADERS.length);
    byId('shown').textContent = 'showing ' + found.tasks.length + ' of ' + count.count;
    byId('more').hidden = found.tasks.length >= count.count;
    const retryable = !params.get('status') || params.get('status').split(',').includes('failed');
    byId('bulk-retry').hidden = !(retryable && found.tasks.some((t) => t.status === 'failed'));
  },
};

let queueNames = null;
async function knownQueues() {
  if (!queueNames) queueNames = api('queues').then((answer) => answer.queues.map((q) => q.name)).catch(() => []);
  return queueNames;
}

// Sorting a column sorts the rows shown; the sort is part of the address.
const SORTABLE = { 'task id': 'id', task: 'task', status: 'status', 'attempts #': 'attempts', queue: 'queue', labels: 'labels', published: 'published_at', error: 'error_type' };

function sortHeader(header, route) {
  const key = SORTABLE[header];
  const text = header.replace(/ #$/, '');
  if (!key) return el('th', { scope: 'col' }, text);
  const current = route.params.get('sort');
  const descending = current === '-' + key;
  return el('th', { scope: 'col', class: header.endsWith(' #') ? 'num' : '', 'data-sort': key,
    'aria-sort': current === key ? 'ascending' : descending ? 'descending' : null },
  a(sortHref(key, route.params), text, { class: 'sort' }));
}

// The address that sorts by ``key`` (the other way when it sorts by it already).
function sortHref(key, params) {
  const target = new URLSearchParams(params);
  target.set('sort', params.get('sort') === key ? '-' + key : key);
  return '#/tasks?' + target;
}

function sorted(rows, params) {
  const sort = params.get('sort');
  if (!sort) return rows;
  const key = sort.replace(/^-/, '');
  const value = (t) => (key === 'labels' ? labelsText(t.labels) : t[key] ?? '');
  const out = rows.slice().sort((x, y) => {
    const p = value(x); const q = value(y);
    return typeof p === 'number' && typeof q === 'number' ? p - q : String(p).localeCompare(String(q));
  });
  return sort.startsWith('-') ? out.reverse() : out;
}

function more(route) {
  const target = new URLSearchParams(route.params);
  target.set('limit', String(Number(route.params.get('limit') || PAGE) + PAGE));
  history.replaceState(null, '', '#/tasks?' + target);
  page.route = parseRoute();
  refresh();
}

async function bulkRetry(route) {
  const filter = filterText(route.params);
  const params = taskFilter(route.params);
  params.set('status', 'failed');
  await action('Publish again every failed task' + (filter ? ' of ' + filter : '') + ' (each once)?',
    'tasks/retry?' + params, (answer) => 'published ' + answer.published.length + ' again; ' + answer.already_retried
      + ' retried before' + (answer.refused.length ? '; ' + answer.refused.length + ' refused: ' + answer.refused[0].error : ''));
}

// --- one task ------------------------------------------------------------------------------------

function json(value) { return el('pre', { class: 'json' }, JSON.stringify(value, null, 2)); }

const task = {
  frame(route) {
    return el('div', { class: 'stack' },
      heading('Task', el('span', { id: 'detail-id', class: 'mono' }, route.id),
        el('button', { type: 'button', class: 'copy', id: 'detail-copy', onclick: () => copy(byId('detail-id').textContent) }, 'copy id'),
        el('span', { id: 'detail-actions' })),
      el('section', { class: 'panel', id: 'detail' }, el('div', { id: 'detail-body' }, el('p', { class: 'muted' }, 'loading'))),
      el('section', { class: 'panel charts', 'aria-label': "this task's charts" },
        chartFigure('chart-task-throughput', 'This task: finished per minute'),
        chartFigure('chart-task-duration', 'This task: mean duration (s)')));
  },
  async fill(route) {
    const record = await loaded(route, api('tasks/' + encodeURIComponent(route.id)));
    if (record.id !== route.id) {          // a prefix: the address gets the whole id, the same view
      history.replaceState(null, '', link('tasks', record.id));
      Object.assign(route, parseRoute());
    }
    byId('detail-id').textContent = record.id;
    byId('detail-actions').replaceChildren(taskActions(record));
    byId('detail-body').replaceChildren(...taskDetail(record));
    const { timeline } = await loaded(route, summaryAndTimeline('task=' + encodeURIComponent(record.task), true));
    throughputChart(byId('chart-task-throughput').closest('figure'), timeline, [record.task]);
    durationChart(byId('chart-task-duration').closest('figure'), timeline, [record.task]);
  },
};

function taskDetail(record) {
  const facts = el('dl', { class: 'facts' },
    ...field('status', badge(record.status), due(record)),
    ...field('task', record.task), ...field('queue', a(link('queues', record.queue), record.queue)),
    ...field('attempts', String(record.attempts)),
    ...field('labels', labelsText(record.labels) || '-'),
    ...field('published', ago(record.published_at), ' ', el('span', { class: 'muted' }, absolute(record.published_at))),
    ...field('started', ago(record.started_at)), ...field('finished', ago(record.finished_at)),
    ...field('duration', record.duration_sec === null ? '-' : record.duration_sec.toFixed(3) + ' s'),
    ...field('worker', record.worker ? a(link('workers', record.worker), record.worker, { class: 'mono' }) : '-'));
  for (const [name, key] of [['retry of', 'labels'], ['duplicate of', 'duplicate_of'], ['retried as', 'retried_as'], ['dead run of', 'dead_of']]) {
    const id = key === 'labels' ? (record.labels || {}).retry_of : record[key];
    if (id && !id.startsWith('retrying:')) facts.append(...field(name, a(link('tasks', id), id, { class: 'id mono' })));
  }
  if (due(record)) facts.append(...field('due', absolute(record.next_attempt_at)));
  if (record.dead_letter_reason) facts.append(...field('dead-letter reason', record.dead_letter_reason));
  const parts = [facts, el('h2', {}, 'Arguments')];
  parts.push(record.inputs ? json({ args: record.inputs.args, kwargs: record.inputs.kwargs })
    : el('p', { class: 'muted' }, 'not recorded (record_args = False)'));
  if (record.result !== null && record.result !== undefined) parts.push(el('h2', {}, 'Result'), json(record.result));
  if (record.error_type) {
    parts.push(el('h2', {}, 'Error'), el('p', { class: 'error' }, record.error_type + ': ' + (record.error_message || '')));
    if (record.error_traceback) parts.push(el('pre', { class: 'traceback' }, record.error_traceback));
  }
  if (record.stderr) parts.push(el('h2', {}, 'Standard error (its end)'), el('pre', { class: 'traceback stderr' }, record.stderr));
  const history = record.attempt_history || [];
  parts.push(el('h2', {}, 'Attempts'), history.length ? table(
    ['# #', 'outcome', 'started', 'duration #', 'worker', 'error', 'retried after #'],
    history.map((t) => el('tr', {},
      el('td', { class: 'num' }, t.attempt), el('td', {}, badge(t.status)), el('td', {}, ago(t.started_at)),
      el('td', { class: 'num' }, t.duration_sec === null ? '-' : t.duration_sec.toFixed(3) + ' s'),
      el('td', { class: 'mono' }, t.worker || '-'),
      el('td', { class: 'wrap' }, t.error_type ? t.error_type + ': ' + (t.error_message || '') : ''),
      el('td', { class: 'num' }, t.retry_delay_sec === null || t.retry_delay_sec === undefined ? '' : t.retry_delay_sec + ' s'))),
    '', { class: 'attempts' }) : el('p', { class: 'muted' }, 'not started yet'));
  return parts;
}

// --- workflows --------------------------------------------------------------------------------

const WORKFLOW_PAGE = 10;

function nodeStates(counts) {
  return el('span', { class: 'node-states' }, ...Object.entries(counts || {}).map(([s, n]) =>
    el('span', { class: 'state-text ' + s }, n + ' ' + s)));
}

const workflows = {
  frame(route) {
    const status = route.params.get('status') || '';
    return el('div', { class: 'stack' }, heading('Workflows'),
      el('section', { class: 'panel' },
        el('nav', { class: 'tabs', id: 'workflow-tabs', 'aria-label': 'status' }, ...WORKFLOW_TABS.map(([label, value]) =>
          a(link('workflows', value ? { status: value } : {}), label, { class: value === status ? 'tab active' : 'tab', 'data-status': value, 'aria-current': value === status ? 'true' : null }))),
        table(['workflow id', 'status', 'nodes', 'labels', 'created', 'finished'], [], 'loading', { id: 'workflows' }),
        el('div', { class: 'pager' }, el('button', { type: 'button', id: 'workflows-more', hidden: true, onclick: () => {
          const target = new URLSearchParams(route.params);
          target.set('limit', String(Number(route.params.get('limit') || WORKFLOW_PAGE) + WORKFLOW_PAGE));
          history.replaceState(null, '', '#/workflows?' + target);
          page.route = parseRoute();
          refresh();
        } }, 'show ' + WORKFLOW_PAGE + ' more'))));
  },
  async fill(route) {
    const params = new URLSearchParams({ limit: route.params.get('limit') || String(WORKFLOW_PAGE) });
    if (route.params.get('status')) params.set('status', route.params.get('status'));
    const answer = await loaded(route, api('workflows?' + params));
    fillBody('workflows', answer.workflows.map((w) => el('tr', { 'data-id': w.id },
      el('td', {}, a(link('workflows', w.id), w.id, { class: 'id mono' })),
      el('td', {}, badge(w.status)), el('td', {}, nodeStates(w.node_states)),
      el('td', { class: 'mono' }, labelsText(w.labels)), el('td', {}, ago(w.created_at)),
      el('td', {}, ago(w.finished_at)))), 'no workflows', 6);
    byId('workflows-more').hidden = !answer.next;
  },
};

const workflow = {
  frame(route) {
    const ask = (verb, question, said) => action(question.replace('%s', route.id),
      'workflows/' + encodeURIComponent(route.id) + '/' + verb, said + ' workflow ' + route.id);
    return el('div', { class: 'stack', id: 'workflow' },
      heading('Workflow', el('span', { id: 'workflow-id', class: 'mono' }, route.id), el('span', { id: 'workflow-status' }),
        el('button', { type: 'button', class: 'danger', id: 'workflow-cancel', hidden: true,
          onclick: () => ask('cancel', 'Cancel workflow %s? Its nodes that have not ended will never run.', 'cancelled') }, 'cancel workflow'),
        el('button', { type: 'button', id: 'workflow-retry', hidden: true,
          onclick: () => ask('retry', 'Retry workflow %s? Its nodes that failed, were cancelled or never ran run again; those that succeeded keep their results.', 'retrying') }, 'retry workflow')),
      el('section', { class: 'panel' }, el('div', { id: 'workflow-body' }, el('p', { class: 'muted' }, 'loading'))));
  },
  async fill(route) {
    const wf = await loaded(route, api('workflows/' + encodeURIComponent(route.id)));
    const shown = JSON.stringify(wf);
    if (shown === page.workflowShown && byId('workflow-body').querySelector('svg')) return;
    page.workflowShown = shown;
    byId('workflow-status').replaceChildren(badge(wf.status));
    byId('workflow-cancel').hidden = wf.status !== 'running';
    byId('workflow-retry').hidden = wf.status !== 'failed' && wf.status !== 'cancelled';
    const facts = el('dl', { class: 'facts' },
      ...field('nodes', String(wf.node_count), ': ', nodeStates(wf.node_states)),
      ...field('labels', labelsText(wf.labels) || '-'),
      ...field('created', ago(wf.created_at), ' ', el('span', { class: 'muted' }, absolute(wf.created_at))),
      ...field('finished', ago(wf.finished_at)));
    if (wf.deadline_at) facts.append(...field('deadline', absolute(wf.deadline_at)));
    const placed = placeNodes(wf.nodes);
    const at = (n) => placed.place.get(n.task_id);
    const inOrder = wf.nodes.slice().sort((x, y) => at(x).x - at(y).x || at(x).y - at(y).y);
    const nodes = table(['node (its task)', 'task', 'state', 'queue', 'reason'], inOrder.map((n) => el('tr', { 'data-id': n.task_id },
      el('td', {}, n.published ? taskId(n.task_id) : el('span', { class: 'mono muted', title: 'not published: no task yet' }, n.task_id)),
      el('td', { title: n.task }, short(n.task)), el('td', {}, badge(n.state)),
      el('td', {}, a(link('queues', n.queue), n.queue)), el('td', { class: 'wrap' }, n.reason || ''))), 'no nodes', { class: 'nodes' });
    byId('workflow-body').replaceChildren(facts, drawDag(wf, placed), nodes);
  },
};

// --- queues -------------------------------------------------------------------------------------

function queueActions(q) {
  const name = encodeURIComponent(q.name);
  return el('span', { class: 'actions' },
    q.paused_at
      ? el('button', { type: 'button', class: 'resume', onclick: () => action(null, 'queues/' + name + '/resume', 'resumed ' + q.name + ': workers receive from it again within seconds') }, 'resume')
      : el('button', { type: 'button', class: 'pause', onclick: () => action('Pause ' + q.name + '? Every worker stops receiving from it within seconds; its messages wait in SQS.', 'queues/' + name + '/pause', 'paused ' + q.name + ': workers stop receiving from it within seconds') }, 'pause'),
    q.dead_letters ? el('button', { type: 'button', onclick: () => action('Move the dead letters of ' + q.name + ' back to it, to run again?', 'queues/' + name + '/redrive', (answer) => 'moved ' + answer.moved + ' dead letters back to ' + q.name) }, 'redrive') : '',
    el('button', { type: 'button', class: 'danger', onclick: () => purge(q.name) }, 'purge'));
}

async function purge(queue) {
  const typed = window.prompt('Purging deletes every message in ' + queue + ', for good. Type the queue name to confirm:');
  if (typed === null) return;
  if (typed !== queue) { banner('purge of ' + queue + ' cancelled: the name typed was not ' + queue); return; }
  await action(null, 'queues/' + encodeURIComponent(queue) + '/purge?confirm=' + encodeURIComponent(typed),
    (answer) => 'purged ' + queue + '; ' + answer.records_marked_purged + ' waiting task records marked purged');
}

function queueState(q) {
  return q.paused_at ? el('span', {}, badge('paused'), ' ', el('span', { class: 'muted' }, 'since ', ago(q.paused_at))) : badge('active');
}

const QUEUE_HEADERS = ['queue', 'state', 'priority #', 'visible #', 'in flight #', 'delayed #', 'dead letters #', 'done / min #', 'actions'];

function queueRow(q) {
  return el('tr', { 'data-queue': q.name, class: q.paused_at ? 'paused' : '' },
    el('td', {}, a(link('queues', q.name), q.name)), el('td', {}, queueState(q)), el('td', { class: 'num' }, q.priority),
    el('td', { class: 'num' }, q.visible ?? '-'), el('td', { class: 'num' }, q.in_flight ?? '-'),
    el('td', { class: 'num' }, q.delayed ?? '-'), el('td', { class: 'num' }, q.dead_letters ?? '-'),
    el('td', { class: 'num' }, q.throughput_per_min ?? 0), el('td', {}, queueActions(q)));
}

const queues = {
  frame() {
    return el('div', { class: 'stack' }, heading('Queues'),
      panel('', table(QUEUE_HEADERS, [], 'loading', { id: 'queues' }),
        el('p', { class: 'muted' }, 'A paused queue: no worker receives from it; its messages wait in SQS.')));
  },
  async fill(route) {
    const answer = await loaded(route, api('queues'));
    fillBody('queues', answer.queues.map(queueRow), 'no queues', QUEUE_HEADERS.length);
  },
};

const queue = {
  frame(route) {
    return el('div', { class: 'stack' },
      heading('Queue', el('span', { class: 'mono', id: 'queue-name' }, route.id), el('span', { id: 'queue-state' }), el('span', { id: 'queue-actions' })),
      el('section', { class: 'panel' }, el('div', { id: 'queue-facts' }, el('p', { class: 'muted' }, 'loading')),
        el('p', {}, a(link('tasks', { queue: route.id }), 'its tasks'), ' · ', a(link('tasks', { queue: route.id, status: 'failed' }), 'its failures'))),
      el('section', { class: 'panel charts', 'aria-label': "this queue's charts" },
        chartFigure('chart-q-throughput', 'Finished per minute'),
        chartFigure('chart-q-failures', 'Failures and retries per minute (stacked)'),
        chartFigure('chart-q-duration', 'Mean duration (s)')),
      panel('Workers serving it', table(['state', 'worker', 'running now'], [], 'loading', { id: 'queue-workers' })));
  },
  async fill(route) {
    const [answer, activity, found] = await loaded(route, Promise.all([api('queues'), api('activity?by=queue&window=auto'), api('workers?state=running')]));
    const q = answer.queues.find((row) => row.name === route.id);
    if (!q) throw new Error('no queue ' + route.id + ' in the queue config');
    byId('queue-state').replaceChildren(queueState(q));
    byId('queue-actions').replaceChildren(queueActions(q));
    byId('queue-facts').replaceChildren(el('dl', { class: 'facts' },
      ...field('priority', String(q.priority)), ...field('visible', String(q.visible ?? '-')),
      ...field('in flight', String(q.in_flight ?? '-')), ...field('delayed', String(q.delayed ?? '-')),
      ...field('dead letters', String(q.dead_letters ?? '-')), ...field('done in the last minute', String(q.throughput_per_min ?? 0))));
    throughputChart(byId('chart-q-throughput').closest('figure'), activity, [q.name]);
    failuresChart(byId('chart-q-failures').closest('figure'), activity, [q.name]);
    durationChart(byId('chart-q-duration').closest('figure'), activity, [q.name]);
    const serving = found.workers.filter((w) => w.role === 'worker' && (!w.queues.length || w.queues.includes(q.name)));
    fillBody('queue-workers', serving.map((w) => el('tr', {}, el('td', {}, workerState(w)),
      el('td', {}, a(link('workers', w.id), w.id, { class: 'mono' })),
      el('td', { class: 'mono' }, w.current_task ? a(link('tasks', w.current_task), short(w.current_task_name) + ' ' + w.current_task) : '-'))),
    'no worker serves it now', 3);
  },
};

// --- workers -------------------------------------------------------------------------------------

function workerState(w) {
  return w.state === 'running' && w.stop_requested_at ? badge('stopping') : badge(w.state);
}

function stopButton(w) {
  if (w.state === 'stopped' || w.stop_requested_at) return '';
  const what = w.role === 'supervisor' ? 'supervisor ' + w.id + ' and all its workers' : 'worker ' + w.id;
  return el('button', { type: 'button', class: 'danger stop', 'aria-label': 'stop ' + w.id,
    onclick: () => action('Stop ' + what + '? It receives no more, finishes what it runs and exits.',
      'workers/' + encodeURIComponent(w.id) + '/stop', 'asked ' + w.id + ' to stop') }, 'stop');
}

const WORKER_HEADERS = ['state', 'process', 'queues', 'running now', 'counts', 'heartbeat', 'actions'];

const workers = {
  frame(route) {
    const all = route.params.get('all') === '1';
    return el('div', { class: 'stack' }, heading('Workers'),
      panel('', table(WORKER_HEADERS, [], 'loading', { id: 'workers' }),
        el('p', {}, a(link('workers', all ? {} : { all: '1' }), all ? 'hide workers stopped more than a day ago' : 'show workers stopped more than a day ago', { id: 'old-workers' }))));
  },
  async fill(route) {
    const answer = await loaded(route, api('workers'));
    const old = (w) => w.state === 'stopped' && w.stopped_at && Date.now() - Date.parse(w.stopped_at) > DAY_MS;
    const all = route.params.get('all') === '1';
    const shown = (all ? answer.workers : answer.workers.filter((w) => !old(w))).slice(0, 100);
    fillBody('workers', shown.map((w) => el('tr', { class: old(w) ? 'old' : '', 'data-worker': w.id },
      el('td', {}, workerState(w)),
      el('td', {}, a(link('workers', w.id), w.id, { class: 'mono' }), w.role === 'supervisor' ? ' (supervisor)' : ''),
      el('td', {}, ...((w.queues || []).length ? w.queues.map((name, i) => [i ? ', ' : '', a(link('queues', name), name)]) : ['all'])),
      el('td', { class: 'mono' }, w.current_task ? a(link('tasks', w.current_task), short(w.current_task_name) + ' ' + w.current_task) : '-'),
      el('td', {}, labelsText(w.counts)), el('td', {}, ago(w.heartbeat_at)), el('td', {}, stopButton(w)))),
    'no workers recorded yet', WORKER_HEADERS.length);
    const hidden = answer.workers.filter(old).length;
    byId('old-workers').textContent = all ? 'hide workers stopped more than a day ago'
      : 'show ' + hidden + ' workers stopped more than a day ago';
    byId('old-workers').hidden = !hidden;
  },
};

const worker = {
  frame(route) {
    return el('div', { class: 'stack' },
      heading('Worker', el('span', { class: 'mono', id: 'worker-id' }, route.id), el('span', { id: 'worker-state' }), el('span', { id: 'worker-actions' })),
      el('section', { class: 'panel' }, el('div', { id: 'worker-facts' }, el('p', { class: 'muted' }, 'loading'))));
  },
  async fill(route) {
    const answer = await loaded(route, api('workers'));
    const w = answer.workers.find((row) => row.id === route.id);
    if (!w) throw new Error('no worker recorded as ' + route.id);
    byId('worker-state').replaceChildren(workerState(w));
    byId('worker-actions').replaceChildren(stopButton(w));
    byId('worker-facts').replaceChildren(el('dl', { class: 'facts' },
      ...field('role', w.role), ...field('host', w.host), ...field('pid', String(w.pid)),
      ...field('version', w.version || '-'),
      ...field('queues', ...((w.queues || []).length ? w.queues.map((name, i) => [i ? ', ' : '', a(link('queues', name), name)]) : ['all'])),
      ...field('started', ago(w.started_at), ' ', el('span', { class: 'muted' }, absolute(w.started_at))),
      ...field('heartbeat', ago(w.heartbeat_at), ' (every ' + w.heartbeat_sec + ' s)'),
      ...field('stopped', ago(w.stopped_at)),
      ...field('stop asked', ago(w.stop_requested_at)),
      ...field('running now', w.current_task ? a(link('tasks', w.current_task), short(w.current_task_name) + ' ' + w.current_task, { class: 'mono' }) : '-'),
      ...field('counts', labelsText(w.counts) || '-')),
    el('p', {}, a(link('tasks', {}), 'tasks'), ' it ran are listed with its id in their worker field'));
  },
};

// --- schedules, webhooks and the outbox ---------------------------------------------------

const SCHEDULE_HEADERS = ['schedule', 'task', 'runs', 'next runs', 'last tick', 'its task', 'actions'];

const schedules = {
  frame() {
    return el('div', { class: 'stack' }, heading('Schedules'),
      panel('', table(SCHEDULE_HEADERS, [], 'loading', { id: 'schedules' }), el('p', { id: 'schedules-leader', class: 'muted' })));
  },
  async fill(route) {
    const answer = await loaded(route, api('schedules'));
    const rows = answer.schedules.map((s) => el('tr', { 'data-schedule': s.name },
      el('td', { class: 'mono' }, s.name), el('td', { title: s.task }, short(s.task)),
      el('td', {}, s.schedule + (s.kind === 'cron' ? ' (' + s.tz + ')' : '')),
      el('td', {}, ...s.next_runs.map((t) => el('div', { title: t }, absolute(t)))),
      el('td', {}, ago(s.last_tick)),
      el('td', {}, s.last_task_id ? taskId(s.last_task_id) : '-', ' ', s.last_task_id ? badge(s.last_task_status || 'unrecorded') : ''),
      el('td', {}, el('button', { type: 'button', onclick: () => action('Publish one run of ' + s.name + ' now?',
        'schedules/' + encodeURIComponent(s.name) + '/run', (ran) => 'published a run of ' + s.name + ' as ' + ran.task_id) }, 'run now'))));
    rows.push(...(answer.broken || []).map((b) => el('tr', { 'data-schedule': b.name, class: 'broken' },
      el('td', { class: 'mono' }, b.name), el('td', { title: b.task || '' }, b.task ? short(b.task) : '-'),
      el('td', {}, badge('broken')), el('td', { colspan: 4, class: 'error' }, b.error))));
    fillBody('schedules', rows, answer.searched ? 'no schedules' : 'no schedules: set TASK_MODULES or SCHEDULES', SCHEDULE_HEADERS.length);
    const leader = answer.leader;
    byId('schedules-leader').textContent = !rows.length ? ''
      : leader ? 'leading scheduler: ' + leader.holder + ', since ' + absolute(leader.since)
        : answer.records ? 'no scheduler leads: start kale scheduler or kale worker --scheduler'
          : 'task records are off: a scheduler needs RECORDS_URL';
  },
};

const WEBHOOK_HEADERS = ['webhook id', 'topic', 'delivered to', 'only labels', 'state', 'actions'];

const webhooks = {
  frame() {
    return el('div', { class: 'stack' }, heading('Webhooks and outbox'),
      panel('Webhooks', table(WEBHOOK_HEADERS, [], 'loading', { id: 'webhooks' })),
      panel('Outbox', el('p', { id: 'outbox', class: 'muted' }, 'loading')));
  },
  async fill(route) {
    const [answer, outbox] = await loaded(route, Promise.all([api('webhooks'), api('outbox')]));
    fillBody('webhooks', answer.webhooks.map((w) => el('tr', { 'data-webhook': w.id },
      el('td', { class: 'mono' }, w.id), el('td', {}, w.topic),
      el('td', { class: 'wrap' }, w.method + ' ' + w.url), el('td', {}, labelsText(w.labels) || '-'),
      el('td', {}, w.active ? 'active' : 'disabled'),
      el('td', {}, a(link('tasks', { 'label.webhook': w.id }), 'deliveries', { class: 'deliveries' }), ' ',
        el('button', { type: 'button', onclick: () => action(null, 'webhooks/' + encodeURIComponent(w.id) + '/' + (w.active ? 'disable' : 'enable'),
          'webhook ' + w.id + (w.active ? ' disabled' : ' enabled')) }, w.active ? 'disable' : 'enable')))),
    'no webhooks', WEBHOOK_HEADERS.length);
    const line = byId('outbox');
    if (!outbox.configured) { line.textContent = 'no outbox: OUTBOX_URL is not set'; return; }
    const age = outbox.oldest_age_sec === null ? '' : ', the oldest waiting ' + outbox.oldest_age_sec.toFixed(1) + ' s';
    line.textContent = 'outbox: ' + outbox.pending + ' waiting for the relay' + age;
    line.classList.toggle('warn', outbox.oldest_age_sec !== null && outbox.oldest_age_sec > 60);
  },
};

const missing = {
  frame(route) { return el('div', { class: 'stack' }, heading('Not found'), el('p', {}, 'No view at #/' + route.key + '. ', a('#/', 'The overview'))); },
  async fill() {},
};

const VIEWS = { overview, tasks, task, workflows, workflow, queues, queue, workers, worker,
  schedules, webhooks, missing };
