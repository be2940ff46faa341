// The tensorgate dashboard: one EventSource on /dashboard/api/events delivers a server snapshot a
// second (src/metrics/snapshot.ts); this file keeps five minutes of them for the charts and
// redraws the cards in place. Plain DOM and uPlot, no build step. Text from the server goes in
// with textContent only.
import uPlot from '/dashboard/assets/uPlot.esm.js';

const HISTORY_S = 300;
const RETRY_MS = 3000;
const STAGES = ['decode', 'preprocess', 'queue', 'transfer', 'compute', 'postprocess', 'encode'];
/** Only models with processing have these; others leave them out of the bar and its legend. */
const PROCESSING_STAGES = new Set(['preprocess', 'postprocess']);
const STAGE_COLORS = {
  decode: '#f59e0b',
  preprocess: '#d97706',
  postprocess: '#0ea5e9',
  queue: '#ef4444',
  transfer: '#8b5cf6',
  compute: '#10b981',
  encode: '#3b82f6',
};
const params = new URLSearchParams(location.search);
const windowS = Number(params.get('window')) || 60;

/** key "model@version" -> { card, fields, charts, history } */
const versions = new Map();

// ---- formatting ------------------------------------------------------------------------------

function fmtMs(ms, requests = 1) {
  if (!requests) return '–';
  if (ms >= 100) return `${Math.round(ms)}`;
  if (ms >= 10) return ms.toFixed(1);
  return Number(ms.toPrecision(2)).toString();
}

function fmtRate(x) {
  if (x === 0) return '0';
  if (x >= 100) return `${Math.round(x)}`;
  return Number(x.toPrecision(2)).toString();
}

function fmtBytes(bytes) {
  if (bytes === undefined || bytes === null) return '–';
  if (bytes >= 2 ** 30) return `${(bytes / 2 ** 30).toFixed(1)} GiB`;
  if (bytes >= 2 ** 20) return `${(bytes / 2 ** 20).toFixed(bytes >= 100 * 2 ** 20 ? 0 : 1)} MiB`;
  if (bytes >= 2 ** 10) return `${Math.round(bytes / 2 ** 10)} KiB`;
  return `${bytes} B`;
}

/**
 * A worker's memory: its proportional set size, where the server could read it, else its resident
 * memory (which counts the pages a forked worker shares with its fork server in every worker).
 */
function workerMemory(worker) {
  return worker.pss_bytes ?? worker.rss_bytes;
}

function fmtDuration(s) {
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

/** Epoch seconds as HH:MM:SS, local time. */
function clock(t) {
  const d = new Date(t * 1000);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
}

function fmtNumber(x) {
  if (!Number.isFinite(x)) return String(x);
  const abs = Math.abs(x);
  if (abs !== 0 && (abs >= 1e5 || abs < 1e-3)) return x.toExponential(2);
  return Number(x.toPrecision(4)).toString();
}

// ---- DOM helpers -----------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') node.className = v;
    else if (k === 'text') node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}

function kpi(field, label) {
  const value = el('div', { class: 'value', 'data-field': field, text: '–' });
  return { node: el('div', { class: 'kpi' }, value, el('div', { class: 'label', text: label })), value };
}

function set(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

// ---- charts ----------------------------------------------------------------------------------

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function chart(container, title, series, unit) {
  const axisColor = cssVar('--muted');
  const gridColor = cssVar('--grid');
  const axis = { stroke: axisColor, grid: { stroke: gridColor, width: 1 }, ticks: { stroke: gridColor } };
  const opts = {
    title,
    width: Math.max(240, container.clientWidth),
    height: 150,
    cursor: { drag: { x: false, y: false } },
    legend: { live: true },
    scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] } },
    axes: [
      { ...axis, space: 70, values: (_u, ticks) => ticks.map(clock) },
      { ...axis, size: 72, values: (_u, ticks) => ticks.map((t) => `${fmtNumber(t)}${unit}`) },
    ],
    series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.color, width: 1.5, spanGaps: false }))],
  };
  return new uPlot(opts, [[], ...series.map(() => [])], container);
}

function resizeCharts(entries = versions.values()) {
  for (const v of entries) {
    for (const c of v.charts) c.plot.setSize({ width: Math.max(240, c.container.clientWidth), height: 150 });
  }
}

// ---- a model version's card ------------------------------------------------------------------

function makeCard(model, version) {
  const key = `${model}@${version}`;
  const state = el('span', { class: 'badge', 'data-field': 'state' });
  const meta = el('div', { class: 'meta', 'data-field': 'meta' });
  const head = el(
    'div',
    { class: 'card-head' },
    el('div', { class: 'name' }, el('span', { text: model }), el('span', { class: 'version', text: `v${version}` })),
    state,
  );
  const kpis = {
    requests: kpi('requests', 'requests'),
    rps: kpi('rps', 'req/s'),
    p50: kpi('p50', 'P50 ms'),
    p90: kpi('p90', 'P90 ms'),
    p99: kpi('p99', 'P99 ms'),
    errors: kpi('errors', 'errors'),
    batch: kpi('batch', 'avg batch'),
    queue: kpi('queue', 'queued'),
  };
  const stageBar = el('div', { class: 'stagebar', 'data-field': 'stages' });
  const stageLegend = el('div', { class: 'stagelegend' });
  const batches = el('div', { class: 'batches', 'data-field': 'batches' });
  const topErrors = el('div', { class: 'toperrors', 'data-field': 'top-errors' });
  const latencyBox = el('div', { class: 'chart' });
  const trafficBox = el('div', { class: 'chart' });
  const error = el('div', { class: 'error', 'data-field': 'error', hidden: '' });
  const idle = el('div', { class: 'idle-note', 'data-field': 'idle' });
  const card = el(
    'article',
    { class: 'card', 'data-model': model, 'data-version': version },
    head,
    meta,
    error,
    idle,
    el('div', { class: 'kpis' }, ...Object.values(kpis).map((k) => k.node)),
    el('div', { class: 'section-label', text: 'where the time goes (mean per request)' }),
    stageBar,
    stageLegend,
    topErrors,
    el('div', { class: 'charts' }, latencyBox, trafficBox),
    el('div', { class: 'section-label', text: 'forward passes by batch size, since load' }),
    batches,
  );
  document.getElementById('models').append(card);
  const latency = chart(
    latencyBox,
    'latency',
    [
      { label: 'P50', color: '#10b981' },
      { label: 'P90', color: '#f59e0b' },
      { label: 'P99', color: '#ef4444' },
    ],
    ' ms',
  );
  const traffic = chart(
    trafficBox,
    'traffic',
    [
      { label: 'req/s', color: '#3b82f6' },
      { label: 'errors/s', color: '#ef4444' },
    ],
    '',
  );
  const entry = {
    key,
    card,
    state,
    meta,
    error,
    idle,
    kpis,
    stageBar,
    stageLegend,
    batches,
    topErrors,
    charts: [
      { plot: latency, container: latencyBox },
      { plot: traffic, container: trafficBox },
    ],
    history: { t: [], p50: [], p90: [], p99: [], rps: [], eps: [] },
  };
  versions.set(key, entry);
  return entry;
}

function renderStages(entry, w) {
  const means = STAGES.map((s) => [s, w.stages_ms[s]?.mean ?? 0]).filter(
    ([s, ms]) => !PROCESSING_STAGES.has(s) || ms > 0,
  );
  const sum = means.reduce((a, [, ms]) => a + ms, 0);
  entry.stageBar.replaceChildren();
  entry.stageLegend.replaceChildren();
  if (!w.succeeded || sum <= 0) {
    entry.stageBar.append(el('div', { class: 'stage empty', text: 'no requests in the window' }));
    return;
  }
  for (const [stage, ms] of means) {
    const share = ms / sum;
    if (share >= 0.005) {
      const seg = el('div', { class: 'stage', 'data-stage': stage, title: `${stage}: ${fmtMs(ms)} ms` });
      seg.style.width = `${(share * 100).toFixed(2)}%`;
      seg.style.background = STAGE_COLORS[stage];
      if (share > 0.12) seg.textContent = `${Math.round(share * 100)}%`;
      entry.stageBar.append(seg);
    }
    const swatch = el('span', { class: 'swatch' });
    swatch.style.background = STAGE_COLORS[stage];
    entry.stageLegend.append(el('span', { class: 'legend-item' }, swatch, `${stage} ${fmtMs(ms)} ms`));
  }
}

function renderBatches(entry, batches) {
  const sizes = Object.entries(batches).map(([size, n]) => [Number(size), n]);
  entry.batches.replaceChildren();
  if (sizes.length === 0) {
    entry.batches.append(el('span', { class: 'empty', text: 'none yet' }));
    return;
  }
  const max = Math.max(...sizes.map(([, n]) => n));
  for (const [size, n] of sizes) {
    const bar = el('div', { class: 'bar' });
    bar.style.height = `${Math.max(2, (n / max) * 36)}px`;
    entry.batches.append(
      el(
        'div',
        { class: 'batch', title: `${n} forward passes of ${size} rows` },
        bar,
        el('span', { text: String(size) }),
      ),
    );
  }
}

function renderVersion(model, v, time) {
  const key = `${model.name}@${v.version}`;
  const entry = versions.get(key) ?? makeCard(model.name, v.version);
  entry.seen = true;
  const w = v.window;
  set(entry.state, v.state);
  entry.state.dataset.state = v.state;
  const memory = v.workers.reduce((a, worker) => a + workerMemory(worker), 0);
  const gpuMem = v.workers.reduce((a, worker) => a + (worker.gpu_memory_bytes ?? 0), 0);
  set(
    entry.meta,
    [
      v.device ?? '–',
      `${v.busy}/${v.instances} instances busy`,
      `weights ${fmtBytes(v.loaded_bytes)}`,
      `workers ${fmtBytes(memory)}${gpuMem ? ` + ${fmtBytes(gpuMem)} GPU` : ''}`,
      v.restarts ? `${v.restarts} restarts` : '',
      v.version === model.default_version ? 'default' : '',
    ]
      .filter(Boolean)
      .join(' · '),
  );
  entry.error.hidden = !v.error;
  set(entry.error, v.error ?? '');
  const k = entry.kpis;
  set(k.requests.value, String(w.requests));
  set(k.rps.value, fmtRate(w.throughput_rps));
  set(k.p50.value, fmtMs(w.latency_ms.p50, w.succeeded));
  set(k.p90.value, fmtMs(w.latency_ms.p90, w.succeeded));
  set(k.p99.value, fmtMs(w.latency_ms.p99, w.succeeded));
  set(
    k.errors.value,
    w.requests ? `${(w.error_rate * 100).toFixed(w.error_rate && w.error_rate < 0.1 ? 1 : 0)}%` : '–',
  );
  k.errors.value.dataset.bad = w.failed > 0 ? 'true' : 'false';
  set(k.batch.value, w.succeeded ? fmtNumber(w.batch_size_avg) : '–');
  set(k.queue.value, String(v.queued));
  set(entry.topErrors, w.top_errors.map((e) => `${e.code} ×${e.count}`).join('   '));
  renderStages(entry, w);
  renderBatches(entry, v.batches);

  const h = entry.history;
  // Versions without traffic in the charts' five minutes fold to one line; busy ones come first.
  const wasIdle = entry.card.classList.contains('idle');
  const isIdle = w.requests === 0 && h.rps.every((x) => x === 0) && h.eps.every((x) => x === 0);
  entry.card.classList.toggle('idle', isIdle);
  set(entry.idle, isIdle ? `idle: no requests in the last ${Math.round(w.window_s)} s` : '');
  // Coarse ranks (steps of about 40% in req/s) so two similarly busy models do not swap every second.
  entry.rank = Math.round(Math.log2(1 + w.throughput_rps) * 2);
  h.t.push(time / 1000);
  const has = w.succeeded > 0;
  h.p50.push(has ? w.latency_ms.p50 : null);
  h.p90.push(has ? w.latency_ms.p90 : null);
  h.p99.push(has ? w.latency_ms.p99 : null);
  h.rps.push(w.throughput_rps);
  h.eps.push(w.failed / w.window_s);
  while (h.t.length > 0 && (h.t[0] ?? 0) < time / 1000 - HISTORY_S) for (const arr of Object.values(h)) arr.shift();
  entry.charts[0].plot.setData([h.t, h.p50, h.p90, h.p99]);
  entry.charts[1].plot.setData([h.t, h.rps, h.eps]);
  if (wasIdle && !isIdle) resizeCharts([entry]);
}

// ---- the rest of the page --------------------------------------------------------------------

function renderSummary(s) {
  const all = s.models.flatMap((m) => m.versions);
  const ready = all.filter((v) => v.state === 'ready').length;
  const rps = all.reduce((a, v) => a + v.window.throughput_rps, 0);
  const requests = all.reduce((a, v) => a + v.window.requests, 0) + s.unattributed.failed;
  const failed = all.reduce((a, v) => a + v.window.failed, 0) + s.unattributed.failed;
  const memory = all.reduce((a, v) => a + v.workers.reduce((b, w) => b + workerMemory(w), 0), 0);
  const items = [
    ['models', `${s.models.length}`, `${ready}/${all.length} versions ready`],
    ['throughput', `${fmtRate(rps)}/s`, `${requests} requests in ${Math.round(s.window_s)} s`],
    ['errors', requests ? `${((failed / requests) * 100).toFixed(1)}%` : '–', `${failed} failed`],
    ['worker memory', fmtBytes(memory), 'proportional (PSS), all workers'],
  ];
  const summary = document.getElementById('summary');
  summary.replaceChildren(
    ...items.map(([label, value, sub]) =>
      el(
        'div',
        { class: 'tile', 'data-summary': label },
        el('div', { class: 'label', text: label }),
        el('div', { class: 'value', text: value }),
        el('div', { class: 'sub', text: sub }),
      ),
    ),
  );
  set(document.getElementById('server'), `tensorgate ${s.tensorgate} · up ${fmtDuration(s.uptime_s)}`);
  set(document.getElementById('window'), String(Math.round(s.window_s)));
}

function renderGpus(gpus) {
  const section = document.getElementById('gpus');
  section.hidden = !gpus || gpus.length === 0;
  if (section.hidden) return;
  section.replaceChildren(
    ...gpus.map((g) => {
      const fill = el('div', { class: 'fill' });
      fill.style.width = `${Math.round(g.utilization * 100)}%`;
      return el(
        'div',
        { class: 'tile gpu', 'data-gpu': String(g.index) },
        el('div', { class: 'label', text: `GPU ${g.index} · ${g.name}` }),
        el('div', { class: 'value', text: `${Math.round(g.utilization * 100)}%` }),
        el('div', { class: 'meter' }, fill),
        el('div', { class: 'sub', text: `${fmtBytes(g.memory_used_bytes)} of ${fmtBytes(g.memory_total_bytes)}` }),
      );
    }),
  );
}

function renderTraining(runs) {
  const section = document.getElementById('training');
  section.hidden = runs.length === 0;
  document.getElementById('runs').replaceChildren(
    ...runs.map((r) =>
      el(
        'tr',
        { 'data-run': r.id },
        el('td', { text: r.id }),
        el('td', {}, el('span', { class: 'badge', 'data-state': r.state, text: r.state })),
        el('td', { text: String(r.step) }),
        el('td', { text: String(r.world_size) }),
        el('td', {
          text: Object.entries(r.latest)
            .map(([k, v]) => `${k} ${fmtNumber(v)}`)
            .join(' · '),
        }),
      ),
    ),
  );
}

function renderJobs(jobs) {
  document.getElementById('jobs').hidden = jobs.length === 0;
  document
    .getElementById('job-rows')
    .replaceChildren(
      ...jobs.map((j) =>
        el(
          'tr',
          { 'data-job': j.id },
          el('td', { text: j.id.slice(0, 8), title: `${j.id}: results in ${j.results}` }),
          el('td', { text: j.model ?? `${j.workflow} (workflow)` }),
          el('td', { text: `${j.done} / ${j.items}` }),
          el('td', { text: String(j.failed) }),
          el('td', { text: j.items_per_second === undefined ? '-' : fmtNumber(j.items_per_second) }),
          el('td', { text: j.eta_s === undefined ? '-' : `${j.eta_s} s` }),
        ),
      ),
    );
}

function render(s) {
  renderSummary(s);
  renderGpus(s.gpus);
  for (const v of versions.values()) v.seen = false;
  for (const model of s.models) for (const v of model.versions) renderVersion(model, v, s.time);
  const ranked = [...versions.values()].sort((a, b) => b.rank - a.rank || a.key.localeCompare(b.key));
  ranked.forEach((v, i) => {
    v.card.style.order = String(i);
  });
  // A model unregistered since: drop its card.
  for (const [key, v] of versions) {
    if (v.seen) continue;
    for (const c of v.charts) c.plot.destroy();
    v.card.remove();
    versions.delete(key);
  }
  document.getElementById('no-models').hidden = s.models.length > 0;
  renderTraining(s.training);
  renderJobs(s.jobs ?? []);
}

function setStatus(state, text) {
  const status = document.getElementById('status');
  status.dataset.state = state;
  set(document.getElementById('status-text'), text);
}

function connect() {
  const events = new EventSource(`/dashboard/api/events?window=${windowS}`);
  events.addEventListener('open', () => setStatus('live', 'live'));
  events.addEventListener('snapshot', (e) => {
    setStatus('live', 'live');
    render(JSON.parse(e.data));
  });
  events.addEventListener('error', () => {
    setStatus('down', 'disconnected, retrying');
    // The browser retries a dropped connection by itself but gives up after an HTTP error (a
    // proxy's 502 while the server restarts, or a 401 once a session or its key is gone): look
    // again then, which asks for a login where one is needed.
    if (events.readyState === EventSource.CLOSED) setTimeout(start, RETRY_MS);
  });
}

// ---- login (servers with auth on) ------------------------------------------------------------

const loginForm = document.getElementById('login');

function showLogin(message = '') {
  document.getElementById('main').hidden = true;
  loginForm.hidden = false;
  set(document.getElementById('login-error'), message);
  setStatus('down', 'sign in to watch');
  document.getElementById('login-token').focus();
}

/** Asks for one snapshot first: a 401 or 403 means a login is needed; anything else, stream. */
async function start() {
  const probe = await fetch(`/dashboard/api/snapshot?window=${windowS}`).catch(() => null);
  if (probe?.status === 401) return showLogin();
  if (probe?.status === 403) return showLogin("This credential's roles may not read the server's metrics.");
  loginForm.hidden = true;
  document.getElementById('main').hidden = false;
  connect();
}

loginForm.addEventListener('submit', async (e) => {
  e.preventDefault();
  const input = document.getElementById('login-token');
  const res = await fetch('/dashboard/login', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ token: input.value }),
  }).catch(() => null);
  if (res?.status === 204) {
    input.value = '';
    document.getElementById('logout').hidden = false;
    start();
    return;
  }
  const body = res ? await res.json().catch(() => ({})) : { error: 'the server did not answer' };
  set(document.getElementById('login-error'), body.error ?? `HTTP ${res?.status}`);
});

document.getElementById('logout').addEventListener('click', async () => {
  await fetch('/dashboard/logout', { method: 'POST' }).catch(() => null);
  location.reload();
});

let resizeTimer;
window.addEventListener('resize', () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(resizeCharts, 150);
});
start();
