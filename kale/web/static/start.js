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

// The refresh's timer: the next refresh page.delay after the last ends
// (REFRESH_MS, longer while answers are slow), while auto-refresh is on;
// none while the tab is hidden, one at once when it shows again.
function schedule() {
  clearTimeout(page.timer);
  page.timer = null;
  if (!document.getElementById('auto').checked || document.visibilityState === 'hidden') return;
  page.timer = setTimeout(() => refresh().then(schedule), page.delay);
}

document.getElementById('search').addEventListener('submit', search);
document.getElementById('auto').addEventListener('change', schedule);
document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'hidden') schedule();
  else refresh().then(schedule);
});
window.addEventListener('hashchange', route);
page.focus = false;             // the first view keeps the focus where the browser put it
route();
schedule();
