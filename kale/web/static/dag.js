// A workflow's graph in SVG: a box per node, coloured and labelled by its
// state, laid out in layers left to right, and an arrow per edge. A node
// whose task was published is a link to the task's view (Enter opens it too).
'use strict';

// The graph's geometry, in pixels: a node's box, and the gaps between layers
// (left to right) and between the boxes of one layer (top to bottom).
const BOX = { width: 180, height: 46, gapX: 64, gapY: 16, pad: 16 };

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
    group.setAttribute('aria-label', 'task ' + short(node.task) + ', ' + node.state);
    group.addEventListener('click', () => go(link('tasks', node.task_id)));
    group.addEventListener('keydown', (e) => { if (e.key === 'Enter') go(link('tasks', node.task_id)); });
  }
  return group;
}

// The workflow's graph: a box per node, coloured and labelled by its state,
// and an arrow per edge from the right side of one box to the left of the next.
function drawDag(wf, placed) {
  const { place, width, height } = placed;
  const chart = svg('svg', { width, height, viewBox: '0 0 ' + width + ' ' + height,
    role: 'group', 'aria-label': 'the graph of workflow ' + wf.id });
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

