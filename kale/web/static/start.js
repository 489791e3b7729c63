// Wires the page up: the router, the search box, the refresh's timer.
'use strict';

function search(event) {
  event.preventDefault();
  const text = document.getElementById('search-text').value.trim();
  if (!text) return;
  if (text.includes('=')) {
    const params = new URLSearchParams();
    for (const pair of text.split(/\s+/)) {
      const [key, value] = pair.split('=', 2);
      params.set('label.' + key, value || '');
    }
    go('#/tasks?' + params);
  } else {
    go(link('tasks', text));
  }
}

// The refresh's timer: every REFRESH_MS while auto-refresh is on.
function startRefresh() {
  clearInterval(page.timer);
  page.timer = document.getElementById('auto').checked ? setInterval(refresh, REFRESH_MS) : null;
}

document.getElementById('search').addEventListener('submit', search);
document.getElementById('auto').addEventListener('change', startRefresh);
window.addEventListener('hashchange', route);
page.focus = false;             // the first view keeps the focus where the browser put it
route();
startRefresh();
