// fleetprof web UI: a hash router (#/view?params: every view's state is in the URL, so a link
// reproduces it) and the views. Data comes only from the query API (api.js).
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import './app.css';
import { get, fmtValue, fmtPct, fmtCount, fmtTime, EVENT_TYPES, ApiError } from './api.js';
import { FlameGraph, kindSwatch } from './flame.js';
import { insightsSection } from './insights.js';
import { kpmSection, searchView } from './kpmview.js';

const $main = () => document.getElementById('main');

// ---- tiny DOM helper: h('tag.class', {attrs}, ...children) ----
function h(tag, attrs, ...kids) {
  const [t, ...cls] = tag.split('.');
  const e = document.createElement(t || 'div');
  if (cls.length) e.className = cls.join(' ');
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'value') e.value = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const k of kids.flat()) if (k != null && k !== false) e.append(k instanceof Node ? k : String(k));
  return e;
}

// ---- routing ----
function parseHash() {
  const s = location.hash.replace(/^#\/?/, '');
  const [view, q] = s.split('?');
  return { view: view || 'services', params: new URLSearchParams(q || '') };
}

export function href(view, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {}))
    for (const x of Array.isArray(v) ? v : [v]) if (x !== undefined && x !== null && x !== '') q.append(k, x);
  const s = q.toString();
  return '#/' + view + (s ? '?' + s : '');
}

function go(view, params, replace) {
  const u = href(view, params);
  if (replace) history.replaceState(null, '', u);
  else location.hash = u;
}

// params -> plain object (repeated keys -> arrays for the known repeatable ones)
const REPEAT = new Set(['version', 'include', 'exclude', 'fold', 'group']);
function obj(params) {
  const o = {};
  for (const [k, v] of params) {
    if (REPEAT.has(k)) (o[k] = o[k] || []).push(v);
    else o[k] = v;
  }
  return o;
}

let renderSeq = 0;
async function route() {
  const { view, params } = parseHash();
  const seq = ++renderSeq;
  const main = $main();
  main.replaceChildren(h('p.loading', {}, 'Loading…'));
  document.body.dataset.view = view;
  document.body.dataset.ready = '0';
  const fn = VIEWS[view] || viewNotFound;
  try {
    const el = await fn(obj(params));
    if (seq !== renderSeq) return;
    main.replaceChildren(el);
    if (el.onMounted) await el.onMounted();
  } catch (e) {
    if (seq !== renderSeq) return;
    main.replaceChildren(errorBox(e));
  }
  document.body.dataset.ready = '1';
}

function errorBox(e) {
  return h('div.error', {}, h('b', {}, e instanceof ApiError ? `Error ${e.status}` : 'Error'), ' ',
    e.message, e.parameter ? ` (parameter: ${e.parameter})` : '');
}

function viewNotFound() { return h('p', {}, 'Unknown view. ', h('a', { href: '#/' }, 'Services')); }

function nav(svc) {
  const n = document.getElementById('nav');
  n.replaceChildren(h('a', { href: '#/' }, 'Services'), h('a', { href: href('reports', {}) }, 'Reports'));
  if (svc)
    n.append(h('span.sep', {}, svc + ':'),
      h('a', { href: href('service', { service: svc }) }, 'Timeline'),
      h('a', { href: href('flame', { service: svc }) }, 'Flame graph'),
      h('a', { href: href('spans', { service: svc }) }, 'Spans'),
      h('a', { href: href('endpoints', { service: svc }) }, 'Endpoints'),
      h('a', { href: href('search', { service: svc }) }, 'Search'),
      h('a', { href: href('incidents', { service: svc }) }, 'Incidents'),
      h('a', { href: href('reports', { service: svc }) }, 'Reports'));
}

// ---- charts (uPlot) ----
function seriesColor(i) {
  // Okabe-Ito: colour-blind safe
  return ['#0072B2', '#E69F00', '#009E73', '#CC79A7', '#56B4E9', '#D55E00', '#F0E442', '#000000'][i % 8];
}

// series: [{version, points:[{bucket, width, value}]}] -> uPlot data (x: unix seconds,
// y: value per second of the bucket). Bucket is a unix time in seconds (the API's).
function toPlotData(series) {
  const xs = new Set();
  for (const s of series) for (const p of s.points) xs.add(bucketSec(p));
  const x = [...xs].sort((a, b) => a - b);
  const idx = new Map(x.map((v, i) => [v, i]));
  const ys = series.map((s) => {
    const y = new Array(x.length).fill(null);
    for (const p of s.points) y[idx.get(bucketSec(p))] = p.value / Math.max(widthSec(p), 1e-9);
    return y;
  });
  return [x, ...ys];
}
function bucketSec(p) { return p.bucket > 1e14 ? p.bucket / 1e9 : p.bucket; }
function widthSec(p) { return p.width > 1e6 ? p.width / 1e9 : p.width; }

function rateLabel(unit) { return unit === 'bytes' ? 'per s' : 'per s (core-seconds/s = ns/s ÷ 1e9)'; }

function sparkline(el, data, w, hgt) {
  return new uPlot({
    width: w, height: hgt, legend: { show: false }, cursor: { show: false }, select: { show: false },
    scales: { x: { time: true } }, axes: [{ show: false }, { show: false }],
    series: [{}, { stroke: '#0072B2', fill: 'rgba(0,114,178,0.15)', width: 1, spanGaps: true }],
  }, data, el);
}

// ---- views ----
const VIEWS = {};

VIEWS.services = async () => {
  nav(null);
  const { services } = await get('services');
  const rows = services.map((s) => {
    const spark = h('div.spark');
    const vers = h('div.versions');
    const tr = h('tr', {}, h('td', {}, h('a.svc', { href: href('service', { service: s.name }) }, s.name)),
      h('td', {}, spark), h('td', {}, vers), h('td.num', {}, fmtCount(s.samples.cpu || 0)),
      h('td', {}, fmtTime(s.last_ns)));
    // filled in after the table is shown
    tr.fill = async () => {
      const [ts, vs] = await Promise.all([get('timeseries', { service: s.name, type: 'cpu' }),
        get(`services/${encodeURIComponent(s.name)}/versions`)]);
      const sum = new Map();
      for (const se of ts.series) for (const p of se.points) sum.set(bucketSec(p), (sum.get(bucketSec(p)) || 0) + p.value / widthSec(p) / 1e9);
      const x = [...sum.keys()].sort((a, b) => a - b);
      if (x.length > 1) sparkline(spark, [x, x.map((k) => sum.get(k))], 220, 40);
      for (const v of vs.versions)
        vers.append(h('a.chip', { href: href('flame', { service: s.name, version: v.version }), title: `first seen ${fmtTime(v.first_ns)}` }, v.version));
    };
    return tr;
  });
  const el = h('section', {}, h('h1', {}, 'Services'),
    services.length ? h('table.grid', {}, h('thead', {}, h('tr', {}, h('th', {}, 'service'), h('th', {}, 'CPU (cores)'),
      h('th', {}, 'versions'), h('th.num', {}, 'CPU samples'), h('th', {}, 'last seen'))), h('tbody', {}, rows))
      : h('p', {}, 'No data yet: run a service under the agent (fleetprof run).'));
  el.onMounted = () => Promise.all(rows.map((r) => r.fill().catch(() => {})));
  return el;
};

// Service view: time series per event type per version, deploy markers, range selection.
VIEWS.service = async (p) => {
  const svc = p.service;
  nav(svc);
  const [vs, et] = await Promise.all([get(`services/${encodeURIComponent(svc)}/versions`), get('event-types', { service: svc })]);
  const types = et.event_types.filter((t) => t.samples > 0).map((t) => t.name);
  const shown = p.type ? [p.type] : types;
  const selVersions = p.version || [];
  const versions = vs.versions.map((v) => v.version);
  const state = { from: p.from, to: p.to };
  const rangeText = h('span.range');
  const showRange = () => {
    rangeText.textContent = state.from ? `selected ${fmtTime(state.from * 1e9)} – ${fmtTime(state.to * 1e9)}` : 'whole history (drag on a chart to select a range)';
  };
  showRange();
  const common = () => ({ service: svc, version: selVersions, label: p.label, from: state.from, to: state.to });
  const typeSel = h('select', { onchange: (e) => go('service', { ...common(), type: e.target.value }) },
    h('option', { value: '' }, 'all types'), ...EVENT_TYPES.map((t) => h('option', { value: t, selected: t === p.type }, t)));
  const vboxes = versions.map((v) => h('label.chk', {}, h('input', { type: 'checkbox', value: v, checked: selVersions.includes(v),
    onchange: () => go('service', { ...common(), type: p.type, version: vboxes.map((l) => l.firstChild).filter((c) => c.checked).map((c) => c.value) }) }), v));
  const label = h('input', { placeholder: 'label key:value', value: p.label || '', size: 18,
    onchange: (e) => go('service', { ...common(), type: p.type, label: e.target.value }) });
  const actions = h('div.actions', {},
    h('a.button', { href: '#', onclick: (e) => { e.preventDefault(); go('flame', { ...common(), type: p.type || 'cpu' }); } }, 'Flame graph of the selection'),
    h('a.button', { href: '#', onclick: (e) => { e.preventDefault(); go('spans', { service: svc, from: state.from, to: state.to, type: p.type || 'cpu' }); } }, 'Costliest spans'),
    h('a.button', { href: '#', onclick: (e) => { e.preventDefault(); if (state.from) go('service', { ...common(), type: p.type, base_from: state.from, base_to: state.to }); } }, 'Use as base range'),
    p.base_from ? h('a.button', { href: '#', onclick: (e) => { e.preventDefault(); if (state.from) go('diff', { service: svc, type: p.type || 'cpu', base_from: p.base_from, base_to: p.base_to, test_from: state.from, test_to: state.to, version: selVersions[0], label: p.label }); } },
      `Compare with base range ${fmtTime(p.base_from * 1e9)}…`) : null);
  const charts = h('div.charts');
  const deploys = [...vs.versions].sort((a, b) => a.first_ns - b.first_ns);
  const dlist = h('ul.deploys', {}, deploys.map((v, i) => h('li', {}, h('b', {}, v.version), ` first seen ${fmtTime(v.first_ns)}`,
    i > 0 ? [' · ', h('a.compare', { href: href('diff', { service: svc, base: deploys[i - 1].version, test: v.version, type: p.type || 'cpu', label: p.label }) }, `compare with previous version (${deploys[i - 1].version})`),
      ' · ', h('a.compare-endpoints', { href: href('endpointdiff', { service: svc, base: deploys[i - 1].version, test: v.version }) }, 'per endpoint')] : null,
    ' · ', h('a', { href: href('flame', { service: svc, version: v.version }) }, 'flame graph'))));
  const insights = insightsSection(h, href, { ...p, version: selVersions });
  const kpms = kpmSection(h, href, { ...p, version: selVersions });
  const el = h('section', {}, h('h1', {}, svc),
    h('div.controls', {}, 'type ', typeSel, ' versions ', vboxes, ' ', label), h('div.controls', {}, rangeText, actions),
    charts, h('h2', {}, 'Insights'), insights, h('h2', {}, 'Key performance metrics'), kpms,
    h('h2', {}, 'Deploys'), dlist);
  const plots = [];
  el.onMounted = async () => {
    insights.load();
    kpms.load();
    const sync = uPlot.sync('svc');
    // incidents (agent flight-recorder captures) as red markers; a click opens one
    const incidents = (await get('incidents', { service: svc }).catch(() => ({ incidents: [] }))).incidents;
    for (const t of shown) {
      const ts = await get('timeseries', { service: svc, type: t, label: p.label });
      let series = ts.series;
      if (selVersions.length) series = series.filter((s) => selVersions.includes(s.version));
      if (!series.length) continue;
      const data = toPlotData(series);
      const box = h('div.chart', {}, h('h3', {}, `${t} (${ts.unit === 'bytes' ? 'bytes/s' : 'cores'})${p.label ? ` · label ${p.label}` : ''}`));
      charts.append(box);
      const scaleY = ts.unit === 'bytes' ? 1 : 1e-9;
      const d2 = [data[0], ...data.slice(1).map((y) => y.map((v) => (v == null ? null : v * scaleY)))];
      const markers = deploys.filter((v) => !selVersions.length || selVersions.includes(v.version));
      const plot = new uPlot({
        width: Math.max(400, charts.clientWidth - 20), height: 180,
        cursor: { sync: { key: sync.key }, drag: { x: true, y: false } },
        scales: { x: { time: true } },
        series: [{}, ...series.map((s, i) => ({ label: s.version, stroke: seriesColor(versions.indexOf(s.version)), width: 1.5, spanGaps: true,
          value: (u, v) => (v == null ? '-' : ts.unit === 'bytes' ? fmtValue(v, 'bytes') + '/s' : v.toFixed(3) + ' cores') }))],
        axes: [{}, { size: 80, values: (u, vals) => vals.map((v) => (ts.unit === 'bytes' ? fmtValue(v, 'bytes') : v.toFixed(2))) }],
        hooks: {
          draw: [(u) => {
            const c = u.ctx;
            c.save();
            c.setLineDash([4, 3]);
            c.strokeStyle = '#555';
            c.fillStyle = '#333';
            c.font = `${11 * devicePixelRatio}px sans-serif`;
            for (const v of markers) {
              const x = u.valToPos(v.first_ns / 1e9, 'x', true);
              if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
              c.beginPath(); c.moveTo(x, u.bbox.top); c.lineTo(x, u.bbox.top + u.bbox.height); c.stroke();
              c.fillText('▼ ' + v.version, x + 3, u.bbox.top + 12 * devicePixelRatio);
            }
            c.strokeStyle = '#c00';
            c.fillStyle = '#c00';
            for (const x0 of incidents) {
              const x = u.valToPos(x0.trigger_ns / 1e9, 'x', true);
              if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
              c.beginPath(); c.moveTo(x, u.bbox.top); c.lineTo(x, u.bbox.top + u.bbox.height); c.stroke();
              c.fillText('⚠ ' + x0.trigger, x + 3, u.bbox.top + u.bbox.height - 4 * devicePixelRatio);
            }
            c.restore();
          }],
          setSelect: [(u) => {
            if (u.select.width < 3) return;
            const a = Math.floor(u.posToVal(u.select.left, 'x')), b = Math.ceil(u.posToVal(u.select.left + u.select.width, 'x'));
            state.from = a; state.to = b;
            history.replaceState(null, '', href('service', { ...common(), type: p.type, base_from: p.base_from, base_to: p.base_to }));
            showRange();
            for (const o of plots) if (o !== u) o.setSelect({ left: u.select.left, width: u.select.width, top: 0, height: o.bbox.height / devicePixelRatio }, false);
          }],
        },
      }, d2, box);
      // a click on a deploy marker: compare that version with the previous one
      plot.over.dataset.incidents = String(incidents.length);
      plot.over.addEventListener('click', (e) => {
        const r = plot.over.getBoundingClientRect();
        for (const x0 of incidents)
          if (Math.abs(plot.valToPos(x0.trigger_ns / 1e9, 'x') - (e.clientX - r.left)) < 5) return go('incident', { id: x0.id });
        for (let i = 1; i < deploys.length; i++) {
          const x = plot.valToPos(deploys[i].first_ns / 1e9, 'x');
          if (Math.abs(x - (e.clientX - r.left)) < 5)
            go('diff', { service: svc, base: deploys[i - 1].version, test: deploys[i].version, type: t, label: p.label });
        }
      });
      sync.sub(plot);
      plots.push(plot);
      if (state.from) {
        const l = plot.valToPos(+state.from, 'x'), rr = plot.valToPos(+state.to, 'x');
        plot.setSelect({ left: l, width: rr - l, top: 0, height: plot.bbox.height / devicePixelRatio }, false);
      }
    }
  };
  return el;
};

// Filters (include/exclude/fold/group) and common profile parameters from the URL.
function profileParams(p) {
  return { service: p.service, type: p.type || 'cpu', version: p.version, from: p.from, to: p.to, label: p.label,
    include: p.include, exclude: p.exclude, fold: p.fold, group: p.group, pid: p.pid };
}

function filterControls(p, view) {
  const box = (name, ph) => h('label.filter', {}, name + ' ',
    h('textarea', { rows: 1, placeholder: ph, 'data-filter': name,
      onchange: (e) => go(view, { ...p, [name]: e.target.value.split('\n').map((x) => x.trim()).filter(Boolean), focus: undefined }) },
    (p[name] || []).join('\n')));
  return h('div.controls.filters', {}, box('include', 'regex: keep stacks with'), box('exclude', 'regex: drop stacks with'),
    box('fold', 'regex: fold into caller'), box('group', 'PATTERN->NAME'));
}

function topTable(top, unit, onPick) {
  return h('table.grid.top', {}, h('thead', {}, h('tr', {}, h('th.num', {}, 'self'), h('th.num', {}, '%'), h('th.num', {}, 'total'), h('th.num', {}, '%'), h('th', {}, 'function'))),
    h('tbody', {}, top.functions.map((f) => h('tr', {}, h('td.num', {}, fmtValue(f.self, unit)), h('td.num', {}, fmtPct(f.self_share)),
      h('td.num', {}, fmtValue(f.total, unit)), h('td.num', {}, fmtPct(f.total_share)),
      h('td', {}, h('a.fn', { href: '#', title: f.module, onclick: (e) => { e.preventDefault(); onPick(f.name); } }, f.name))))));
}

// Flame graph + breadcrumb + search + top functions + sandwich, for a tree-returning API call.
function flamePanel(p, view, tree, top, unit, extra) {
  const crumbs = h('div.crumbs');
  const found = h('span.found');
  const side = h('div.side');
  const holder = h('div.flame');
  const fg = new FlameGraph(holder, {
    fmtValue,
    onZoom: (path) => { history.replaceState(null, '', href(view, { ...p, focus: path.join(';') })); p.focus = path.join(';'); drawCrumbs(); },
    onSelect: (fn) => pick(fn),
  });
  // a function picked (shift-click, top table): its callers/callees where the view has them,
  // else (span view) a highlight of its frames
  const pick = (fn) => (view === 'span' ? go(view, { ...p, search: '/^' + fn.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + '$/' }) : go(view, { ...p, fn }));
  window.fpFlame = fg;
  const drawCrumbs = () => {
    crumbs.replaceChildren(...fg.ancestors(fg.zoom).map((k, i, a) => [i ? ' › ' : '',
      i === a.length - 1 ? h('b', {}, fg.name[k]) : h('a', { href: '#', onclick: (e) => { e.preventDefault(); fg.zoomTo(k); fg.render(); p.focus = fg.pathOf(k).join(';'); history.replaceState(null, '', href(view, { ...p, focus: p.focus || undefined })); drawCrumbs(); } }, fg.name[k])]).flat());
  };
  const doSearch = (s) => {
    const r = fg.setSearch(s);
    found.textContent = r ? `${r.frames} frames match: ${fmtPct(r.share, 2)} of the total (${fmtValue(r.value, unit)})` : '';
    fg.render();
  };
  const search = h('input.search', { type: 'search', placeholder: 'search functions (text or /regex/)', value: p.search || '',
    oninput: (e) => { p.search = e.target.value; history.replaceState(null, '', href(view, { ...p })); doSearch(e.target.value); } });
  // the layout shown, as a two-way switch whose pressed side is what is drawn (a single button
  // labelled with what a click would do read as the current state)
  const modeBtns = [['icicle', 'Icicle (root on top)'], ['flame', 'Flame (root at bottom)']].map(([m, label]) =>
    h('button', { 'data-mode': m, onclick: () => { p.mode = m; fg.setMode(m); fg.render(); showMode(); history.replaceState(null, '', href(view, { ...p })); } }, label));
  const showMode = () => modeBtns.forEach((b) => { const on = b.dataset.mode === (p.mode === 'flame' ? 'flame' : 'icicle'); b.classList.toggle('on', on); b.setAttribute('aria-pressed', String(on)); });
  showMode();
  const modeBtn = h('span.seg', { role: 'group', 'aria-label': 'layout' }, 'Layout: ', ...modeBtns);
  const resetBtn = h('button', { onclick: () => { fg.zoomTo(0); fg.render(); p.focus = undefined; history.replaceState(null, '', href(view, { ...p })); drawCrumbs(); } }, 'Reset zoom');
  // the colours' key: the kinds of code present (not in a diff, coloured by change instead)
  const legend = h('span.legend', { 'aria-label': 'frame colours' });
  const el = h('div.flame-panel', {}, h('div.controls', {}, modeBtn, ' ', resetBtn, ' ', search, ' ', found, ' ', legend), crumbs,
    h('div.flame-row', {}, holder, side));
  if (top) side.append(h('h3', {}, 'Top functions (self)'), topTable(top, unit, pick));
  if (extra) side.prepend(extra);
  el.onMounted = () => {
    const t0 = performance.now();
    fg.setData(tree, unit);
    if (p.diffSig) fg.setDiff(p.diffSig);
    else legend.replaceChildren(...fg.kinds().map(([kind, label]) => {
      const sw = h('i');
      sw.style.background = kindSwatch(kind); // a CSSOM property: the CSP forbids style attributes
      return h('span.kind', { 'data-kind': kind }, sw, label);
    }));
    fg.setMode(p.mode);
    if (p.focus) fg.zoomToPath(p.focus.split(';'));
    if (p.search) fg.setSearch(p.search);
    fg.render();
    fg.firstMs = performance.now() - t0;
    performance.mark('fp-rendered');
    requestAnimationFrame(() => performance.mark('fp-painted'));
    if (p.search) doSearch(p.search);
    drawCrumbs();
  };
  return { el, fg };
}

async function sandwich(p, unit, fetcher) {
  if (!p.fn) return null;
  try {
    const c = await fetcher();
    unit = unit || c.unit;
    const list = (title, arr) => h('div', {}, h('h4', {}, title), arr.length ? h('table.grid', {}, h('tbody', {}, arr.map((e) =>
      h('tr', {}, h('td.num', {}, fmtValue(e.value, unit)), h('td.num', {}, fmtPct(c.total ? e.value / c.total : 0)), h('td', {}, e.name))))) : h('p.muted', {}, 'none'));
    return h('div.sandwich', { id: 'sandwich' }, h('h3', {}, 'Callers / callees of ', h('code', {}, p.fn)),
      h('p', {}, `total ${fmtValue(c.total, unit)}, self ${fmtValue(c.self, unit)}, ${fmtCount(c.samples)} samples `,
        h('a', { href: '#', onclick: (e) => { e.preventDefault(); p.search = '/^' + p.fn.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + '$/'; const q = { ...p }; delete q.fn; delete q._view; go(p._view, q); } }, 'highlight')),
      list('callers', c.callers), list('callees', c.callees));
  } catch (e) { return errorBox(e); }
}

VIEWS.search = async (p) => { nav(p.service); return searchView(h, href, go, p); };

VIEWS.flame = async (p) => {
  nav(p.service);
  p._view = undefined;
  const q = profileParams(p);
  const [tree, top, vs, sw] = await Promise.all([
    get('profile', { ...q, view: 'tree', limit: p.nodes || 10000, min_share: p.min_share || 0.0001 }),
    get('profile', { ...q, view: 'top', limit: 30 }),
    get(`services/${encodeURIComponent(p.service)}/versions`),
    sandwich({ ...p, _view: 'flame' }, '', () => get('profile', { ...q, view: 'callers', function: p.fn }))]);
  const typeSel = h('select', { onchange: (e) => go('flame', { ...p, type: e.target.value, focus: undefined, fn: undefined }) },
    EVENT_TYPES.map((t) => h('option', { value: t, selected: t === (p.type || 'cpu') }, t)));
  const vsel = h('select', { multiple: true, size: Math.min(4, vs.versions.length), onchange: (e) => go('flame', { ...p, version: [...e.target.selectedOptions].map((o) => o.value), focus: undefined }) },
    vs.versions.map((v) => h('option', { value: v.version, selected: (p.version || []).includes(v.version) }, v.version)));
  const label = h('input', { placeholder: 'label key:value', value: p.label || '', size: 16, onchange: (e) => go('flame', { ...p, label: e.target.value }) });
  const { el } = flamePanel(p, 'flame', tree.tree.root, top, tree.unit, sw);
  const title = `${p.service} · ${p.type || 'cpu'} · ${(p.version || []).join(', ') || 'all versions'}${p.pid ? ` · pid ${p.pid}` : ''}${p.from ? ` · ${fmtTime(p.from * 1e9)} – ${fmtTime(p.to * 1e9)}` : ''}`;
  const sec = h('section', {}, h('h1', {}, 'Flame graph'), h('p.sub', {}, title,
    ` · total ${fmtValue(tree.tree.total, tree.unit)}, ${fmtCount(tree.tree.samples)} samples, ${tree.nodes} frames`,
    tree.truncated ? ` (${tree.truncated} small call paths folded into "(other)")` : ''),
  h('div.controls', {}, 'type ', typeSel, ' versions ', vsel, ' ', label), filterControls(p, 'flame'), el);
  sec.onMounted = el.onMounted;
  return sec;
};

// ---- diff ----
// Merges the base and test trees by call path; each node gets base and test rates (per second
// or per request, scaled as the diff's totals) and width = their mean (additive, so a parent
// stays as wide as its children).
function mergeTrees(bt, tt, sb, st) {
  const mk = (name, module) => ({ name, module, base: 0, test: 0, bself: 0, tself: 0, samples: 0, kids: new Map() });
  const root = mk('(all)', '');
  const add = (m, n, side, s) => {
    m[side] += n.total * s;
    m[side === 'base' ? 'bself' : 'tself'] += n.self * s;
    m.samples += n.samples || 0;
    for (const c of n.children || []) {
      let k = m.kids.get(c.name);
      if (!k) { k = mk(c.name, c.module); m.kids.set(c.name, k); }
      add(k, c, side, s);
    }
  };
  add(root, bt, 'base', sb);
  add(root, tt, 'test', st);
  const out = (m) => ({ name: m.name, module: m.module, base: m.base, test: m.test, total: (m.base + m.test) / 2,
    self: (m.bself + m.tself) / 2, samples: m.samples,
    children: [...m.kids.values()].map(out).sort((a, b) => b.total - a.total) });
  return out(root);
}

// "what could have been seen": the diff's minimum detectable effect (issue 30)
function mdeLine(d) {
  const m = d.min_detectable_effect;
  if (!m || m.new_function_share == null) return null;
  const pct = (x) => `${(x * 100).toPrecision(2)}%`;
  const ch = (m.changed_function || []).filter((c) => c.change != null).map((c) => `a ${pct(c.share)} function changed by ≥ ${pct(c.change)}`);
  return h('p.mde', {}, `minimum detectable effect (found with ${pct(m.power)} probability with these samples): a new function taking ≥ ${pct(m.new_function_share)} of the samples`,
    ch.length ? '; ' + ch.join('; ') : '');
}

function findingsTable(d, unit) {
  const incl = d.tested_cost === 'total';
  const rows = d.entries.filter((e) => e.class !== 'untested').map((e) => {
    // a finding of a caller's total cost (the default diff tests callers too) shows that cost
    const tot = incl || e.by_inclusive;
    const b = tot ? e.base_total : e.base_self, t = tot ? e.test_total : e.test_self;
    return h('tr', { class: 'cls-' + e.class }, h('td', {}, e.class), h('td.num', {}, fmtValue(b, unit)), h('td.num', {}, fmtValue(t, unit)),
      h('td.num', {}, b > 0 ? `${t >= b ? '+' : ''}${((t - b) / b * 100).toFixed(1)}%` : t > 0 ? 'new' : '-'),
      h('td.num', {}, fmtPct(e.overweight)), h('td.num', {}, fmtPct(e.responsibility)),
      h('td.num', {}, e.q == null ? '-' : e.q.toPrecision(2)), h('td.num', {}, `${fmtCount(e.base_samples)} / ${fmtCount(e.test_samples)}`),
      h('td.fnname', {}, e.name, !incl && e.by_inclusive ? h('span.by-inclusive', { title: 'found by its total cost (with what it calls), not its own' }, ' (total cost)') : null));
  });
  // what each column means, on hover and in the note under the table (issue 35)
  const tips = { change: 'change of the tested cost per unit of work',
    overweight: "the function's total-cost change over what it would be had it grown like the whole profile (100% = grew like the total); '-' when the total moved by less than 1%",
    'respons.': "the function's share of the whole profile's change; '-' when the total moved by less than 1%",
    q: 'Benjamini-Hochberg q-value of the count test (significant at q <= ' + d.q_level + ')' };
  return h('div', {}, h('table.grid.findings', {}, h('thead', {}, h('tr', {}, ['class', 'base', 'test', 'change', 'overweight', 'respons.', 'q', 'samples b/t', `function (${incl ? 'total' : 'self'} cost)`].map((x, i) => h(i && i < 8 ? 'th.num' : 'th', tips[x] ? { title: tips[x] } : {}, x)))),
    h('tbody', {}, rows)),
  h('p.legend.columns', {}, 'overweight: ', tips.overweight, '. respons.: ', tips['respons.'], '.'));
}

VIEWS.diff = async (p) => {
  nav(p.service);
  const byTime = !!p.base_from;
  const f = { include: p.include, exclude: p.exclude, fold: p.fold, group: p.group, label: p.label, endpoint: p.endpoint };
  const dq = { service: p.service, type: p.type || 'cpu', per: p.per, inclusive: p.inclusive, limit: 100, ...f,
    ...(byTime ? { base_from: p.base_from, base_to: p.base_to, test_from: p.test_from, test_to: p.test_to, version: p.version }
      : { base: p.base, test: p.test }) };
  const side = (which) => ({ service: p.service, type: p.type || 'cpu', view: 'tree', limit: p.nodes || 10000, min_share: p.min_share || 0.0001, ...f,
    ...(byTime ? { from: p[which + '_from'], to: p[which + '_to'], version: p.version } : { version: p[which] }) });
  const [d, bt, tt] = await Promise.all([get('diff', dq), get('profile', side('base')), get('profile', side('test'))]);
  const unit = d.unit;
  const sig = new Map();
  for (const e of d.entries) if (e.class === 'regression') sig.set(e.name, 1); else if (e.class === 'improvement') sig.set(e.name, -1);
  // scale raw tree weights to the diff's rates (per process-second or per request)
  const sb = bt.tree.total ? d.base_total / bt.tree.total : 0, st = tt.tree.total ? d.test_total / tt.tree.total : 0;
  const merged = mergeTrees(bt.tree.root, tt.tree.root, sb, st);
  const perLabel = d.endpoint ? `per call of ${d.endpoint}` : d.per === 'request' ? 'per request' : 'per process-second';
  const fmtRate = (v) => `${fmtValue(v, unit)} ${perLabel}`;
  const pp = { ...p, diffSig: sig };
  const { el, fg } = flamePanel(pp, 'diff', merged, null, unit, null);
  fg.opts.fmtRate = fmtRate;
  delete pp.diffSig;
  // keep diffSig out of URLs: flamePanel copies p into hrefs
  const fixSig = el.onMounted;
  el.onMounted = () => { pp.diffSig = sig; fixSig(); delete pp.diffSig; };
  const sides = byTime ? `${fmtTime(p.base_from * 1e9)}… vs ${fmtTime(p.test_from * 1e9)}…` : `${p.base} → ${p.test}`;
  const perBtn = h('button', { onclick: () => go('diff', { ...p, per: d.per === 'request' ? 'second' : 'request', focus: undefined }) },
    d.per === 'request' ? 'Compare per second' : 'Compare per request');
  const change = d.base_total > 0 ? (d.test_total - d.base_total) / d.base_total : 0;
  const summary = h('div.summary', {},
    h('p', {}, `${d.event_type} ${perLabel}: base ${fmtValue(d.base_total, unit)}, test ${fmtValue(d.test_total, unit)} (${change >= 0 ? '+' : ''}${(change * 100).toFixed(2)}%)`),
    h('p', {}, `samples: base ${fmtCount(d.base_samples)} in ${d.base_replicates} replicates, test ${fmtCount(d.test_samples)} in ${d.test_replicates} replicates`),
    d.common_ratio != null ? h('p', {}, `common factor (load or a uniform change, not attributed to functions): ${((d.common_ratio - 1) * 100).toFixed(2)}%`) : null,
    h('p', {}, `${d.tested} functions tested (${d.tested_cost} cost, ${d.test}, BH q ≤ ${d.q_level}): `,
      h('b.reg', {}, `${d.regressions} regressions`), ', ', h('b.imp', {}, `${d.improvements} improvements`)),
    mdeLine(d),
    ...d.warnings.map((w) => h('p.warn', {}, 'warning: ' + w)),
    d.hint ? h('p.hint', {}, 'hint: ' + d.hint + ' ', h('a', { href: href('diff', { ...p, inclusive: '1', focus: undefined }) }, 'test inclusive cost')) : null);
  const legend = h('p.legend', {}, h('span.sw.sw-red', {}), ' slower (significant) ', h('span.sw.sw-pale-red', {}), ' slower, not significant ',
    h('span.sw.sw-blue', {}), ' faster (significant) ', h('span.sw.sw-pale-blue', {}), ' faster, not significant · width: mean of base and test');
  const sec = h('section', {}, h('h1', {}, `Diff: ${p.service} ${sides}`), h('div.controls', {}, perBtn, ' ',
    h('select', { onchange: (e) => go('diff', { ...p, type: e.target.value, focus: undefined }) }, EVENT_TYPES.map((t) => h('option', { value: t, selected: t === (p.type || 'cpu') }, t)))),
  filterControls(p, 'diff'), summary, legend, el, h('h2', {}, 'Findings'), findingsTable(d, unit));
  sec.onMounted = el.onMounted;
  return sec;
};

// Incidents: what the agents' flight recorders captured (agent/README.md, "Incidents").
VIEWS.incidents = async (p) => {
  nav(p.service);
  const { incidents } = await get('incidents', { service: p.service, from: p.from, to: p.to });
  return h('section', {}, h('h1', {}, `Incidents of ${p.service}`),
    incidents.length ? h('table.grid.incidents', {}, h('thead', {}, h('tr', {}, ['when', 'trigger', 'value', 'threshold', 'host', 'pid', 'version', 'captured'].map((x) => h('th', {}, x)))),
      h('tbody', {}, incidents.map((x) => h('tr', {}, h('td', {}, h('a', { href: href('incident', { id: x.id }) }, fmtTime(x.trigger_ns))),
        h('td', {}, x.trigger), h('td.num', {}, x.value.toFixed(3)), h('td.num', {}, x.threshold.toFixed(3)), h('td', {}, x.host), h('td.num', {}, String(x.pid)),
        h('td', {}, x.version), h('td.num', {}, `${((x.end_ns - x.start_ns) / 1e9).toFixed(1)} s${x.complete ? '' : ' (incomplete)'}`)))))
      : h('p', {}, 'No incidents: the flight recorder is off unless the service runs with FLEETPROF_RECORDER=1.'));
};

// Links to the incidents a request, an endpoint's range or a deploy overlaps (the API's
// "incidents" beside them): trigger and time, each opening the incident's page.
function incidentLinks(list) {
  if (!list || !list.length) return null;
  return h('p.incident-links', {}, list.length === 1 ? 'Incident: ' : `Incidents (${list.length}): `,
    list.flatMap((x, i) => [i ? ', ' : '', h('a.incident-link', { href: href('incident', { id: x.id }), title: `${x.host} pid ${x.pid} · ${x.version}` },
      `${x.trigger} at ${fmtTime(x.trigger_ns)}`)]));
}

VIEWS.incident = async (p) => {
  const o = await get('incident', { id: p.id, type: p.type });
  nav(o.service);
  const unit = (o.top && o.top.unit) || 'nanoseconds';
  const rel = (ns) => ((ns - o.trigger_ns) / 1e9).toFixed(1);
  const timeline = h('table.grid.timeline', {}, h('thead', {}, h('tr', {}, h('th', {}, 's from the trigger'), h('th.num', {}, 'samples'), h('th.num', {}, o.event_type))),
    h('tbody', {}, o.timeline.map((c) => h('tr', c.start_ns <= o.trigger_ns && c.end_ns > o.trigger_ns ? { class: 'trigger' } : {},
      h('td', {}, `${rel(c.start_ns)} … ${rel(c.end_ns)}`), h('td.num', {}, String(c.samples)), h('td.num', {}, fmtValue(c.weight, unit))))));
  const stuck = o.stuck_requests.length ? h('ul', {}, o.stuck_requests.map((r) => h('li', {}, h('a', { href: href('span', { trace: r.trace, span: r.span }) }, r.name || r.span),
    ` running ${((o.trigger_ns - r.start_ns) / 1e9).toFixed(1)} s at the trigger${r.ended ? '' : ' (not ended)'}`))) : h('p', {}, 'none');
  const diff = o.diff ? [h('p.sub', {}, `after the trigger against the seconds before, per ${o.diff.per}: ${o.diff.regressions} regressions, ${o.diff.improvements} improvements; first: ${o.diff.entries.length ? o.diff.entries[0].name : '-'}`),
    findingsTable(o.diff, unit)] : h('p', {}, 'no diff');
  const { el } = flamePanel(p, 'incident', o.tree.root, o.top, unit, null);
  const sec = h('section', {}, h('h1', {}, `Incident: ${o.trigger} in ${o.service}`),
    h('p.sub', {}, `${o.host} pid ${o.pid} · ${o.version} · ${fmtTime(o.trigger_ns)} · value ${o.value.toFixed(3)} (threshold ${o.threshold.toFixed(3)}) · captured ${((o.end_ns - o.start_ns) / 1e9).toFixed(1)} s, ${o.chunks} of ${o.parts} chunks`),
    h('h2', {}, 'Timeline'), timeline, h('h2', {}, 'What ran more'), diff, h('h2', {}, 'Stuck requests at the trigger'), stuck,
    h('h2', {}, 'Flame graph of the capture'), el);
  sec.onMounted = el.onMounted;
  return sec;
};

VIEWS.reports = async (p) => {
  nav(p.service);
  const { reports, min_samples: minS, min_samples_reason: why, waiting } = await get('reports', { service: p.service, limit: 100 });
  // a deploy whose report waits for its samples says so (issue 30)
  const wait = waiting ? h('p.waiting', {}, `${waiting.base} → ${waiting.test}: waiting for ${fmtCount(minS)} CPU samples per side (have ${fmtCount(waiting.base_samples)} / ${fmtCount(waiting.test_samples)}): ${why}.`) : null;
  return h('section', {}, h('h1', {}, 'Regression reports', p.service ? ` · ${p.service}` : ''), wait,
    reports.length ? h('table.grid.reports', {}, h('thead', {}, h('tr', {}, ['created', 'service', 'deploy', 'type', 'regressions', 'improvements', 'samples b/t', 'top finding', 'new insights', 'incidents', ''].map((x) => h('th', {}, x)))),
      h('tbody', {}, reports.map((r) => {
        const e0 = r.diff && r.diff.entries && r.diff.entries.find((e) => e.class === 'regression' || e.class === 'improvement');
        return h('tr', {}, h('td', {}, fmtTime(r.created_ns)), h('td', {}, r.service), h('td', {}, `${r.base} → ${r.test}`), h('td', {}, r.event_type),
          h('td.num', {}, r.regressions), h('td.num', {}, r.improvements), h('td.num', {}, `${fmtCount(r.base_samples)} / ${fmtCount(r.test_samples)}`),
          h('td', {}, e0 ? `${e0.class}: ${e0.name}` : '-'),
          h('td.new-insights', {}, ((r.diff && r.diff.new_insights) || []).map((x) => h('a.chip', { href: href('service', { service: r.service, version: r.test }), title: x.summary }, x.title))),
          h('td.incidents', {}, (r.incidents || []).map((x) => h('a.chip.incident-link', { href: href('incident', { id: x.id }), title: fmtTime(x.trigger_ns) }, x.trigger))),
          h('td', {}, h('a.open-diff', { href: href('diff', { service: r.service, base: r.base, test: r.test, type: r.event_type }) }, 'open diff')));
      }))) : h('p', {}, `No reports yet: a report is written when a new version of a service and the one before it have ${minS ? fmtCount(minS) : 'enough'} CPU samples${why ? ` (${why})` : ''}.`));
};

VIEWS.spans = async (p) => {
  nav(p.service);
  const type = p.type || 'cpu';
  const { spans } = await get('spans', { service: p.service, type, from: p.from, to: p.to, limit: p.limit || 50 });
  const traceBox = h('input', { placeholder: 'trace id (32 hex digits)', size: 36, id: 'trace-box' });
  const open = (e) => { e.preventDefault(); const t = traceBox.value.trim().toLowerCase(); if (t) go('span', { trace: t, service: p.service }); };
  const typeSel = h('select', { onchange: (e) => go('spans', { ...p, type: e.target.value }) }, EVENT_TYPES.map((t) => h('option', { value: t, selected: t === type }, t)));
  return h('section', {}, h('h1', {}, `Costliest spans · ${p.service}`),
    h('form.controls', { onsubmit: open }, 'ranked by ', typeSel, ' · ', traceBox, ' ', h('button', {}, 'Open trace')),
    spans.length ? h('table.grid.spans', {}, h('thead', {}, h('tr', {}, ['trace', 'span', 'start', 'duration', ...EVENT_TYPES.map((t) => t + (t === type ? ' ▼' : ''))].map((x) => h('th', {}, x)))),
      h('tbody', {}, spans.map((s) => h('tr', {}, h('td', {}, h('a.trace', { href: href('span', { trace: s.trace_id, service: p.service }) }, s.trace_id.slice(0, 12) + '…')),
        h('td', {}, h('a.span', { href: href('span', { span: s.span_id, trace: s.trace_id, service: p.service, type }) }, s.span_id)),
        h('td', {}, fmtTime(s.start_ns)), h('td.num', {}, fmtValue(s.end_ns - s.start_ns, 'nanoseconds')),
        ...EVENT_TYPES.map((t) => h('td.num', {}, s.cost[t] != null ? fmtValue(s.cost[t], t === 'alloc' || t === 'inuse' ? 'bytes' : 'nanoseconds') : ''))))))
      : h('div.empty', {}, h('p', {}, 'No spans in this range.'),
        h('p', {}, 'A span is a request the program tagged: its threads call fleetprof_span_set() with the request\'s W3C traceparent ',
          '(agent/include/fleetprof.h), and the samples taken meanwhile are the span\'s cost. A program that tags no requests has no spans; ',
          'its whole profile is in the flame graph.'),
        h('p', {}, h('a', { href: href('flame', { service: p.service }) }, 'Flame graph of ' + p.service))));
};

// ---- endpoints (named spans with their real durations) ----
const ns = (v) => fmtValue(v, 'nanoseconds');

function requestsTable(reqs, p) {
  return h('table.grid.requests', {}, h('thead', {}, h('tr', {}, ['request', 'endpoint', 'started', 'duration', 'on CPU', 'off CPU', 'state'].map((x) => h('th', {}, x)))),
    h('tbody', {}, reqs.map((r) => h('tr', {},
      h('td', {}, h('a.request', { href: href('span', { trace: r.trace_id, span: r.span_id, service: p.service }) }, r.span_id)),
      h('td', {}, r.name || '(unnamed)'), h('td', {}, fmtTime(r.start_ns)), h('td.num', {}, ns(r.duration_ns)),
      h('td.num', {}, ns(r.on_cpu_ns)), h('td.num', {}, ns(r.off_cpu_ns)), h('td', {}, r.ended ? 'ended' : 'running')))));
}

VIEWS.endpoints = async (p) => {
  nav(p.service);
  const [{ endpoints }, stuck] = await Promise.all([
    get('endpoints', { service: p.service, from: p.from, to: p.to }),
    get('requests', { service: p.service, stuck: 1, min: p.min || '10s', limit: 20 })]);
  return h('section', {}, h('h1', {}, `Endpoints · ${p.service}`),
    endpoints.length ? h('table.grid.endpoints', {}, h('thead', {}, h('tr', {}, ['endpoint', 'calls', 'p50', 'p90', 'p99 ▼', 'CPU / call', 'wall / call', 'alloc / call', 'CPU share'].map((x) => h('th', {}, x)))),
      h('tbody', {}, endpoints.map((e) => h('tr', {},
        h('td', {}, h('a.endpoint', { href: href('endpoint', { service: p.service, endpoint: e.name, from: p.from, to: p.to }) }, e.name || '(unnamed)')),
        h('td.num', {}, fmtCount(e.calls)), h('td.num', {}, ns(e.p50_ns)), h('td.num', {}, ns(e.p90_ns)), h('td.num', {}, ns(e.p99_ns)),
        h('td.num', {}, ns(e.cpu_per_call_ns)), h('td.num', {}, ns(e.wall_per_call_ns)), h('td.num', {}, fmtValue(e.alloc_per_call_bytes, 'bytes')),
        h('td.num', {}, fmtPct(e.cpu_share))))))
      : h('div.empty', {}, h('p', {}, 'No endpoints in this range.'),
        h('p', {}, 'An endpoint is the name a program gives its requests: fleetprof_span_begin(traceparent, "GET /checkout") when a request starts and ',
          'fleetprof_span_end() when it is done (agent/include/fleetprof.h). Each request\'s real duration is recorded beside its samples.')),
    h('h2', {}, `Stuck now (running for at least ${p.min || '10s'})`),
    stuck.requests.length ? requestsTable(stuck.requests, p) : h('p.stuck-none', {}, 'No request is stuck.'));
};

VIEWS.endpoint = async (p) => {
  nav(p.service);
  const type = p.type || 'cpu';
  const q = { service: p.service, endpoint: p.endpoint, type, from: p.from, to: p.to };
  const [tree, top, slow] = await Promise.all([
    get('endpoint', { ...q, view: 'tree', limit: 10000, min_share: 0.0001 }),
    get('endpoint', { ...q, view: 'top', limit: 30 }),
    get('requests', { service: p.service, endpoint: p.endpoint, from: p.from, to: p.to, limit: 10 })]);
  const typeSel = h('select', { onchange: (e) => go('endpoint', { ...p, type: e.target.value, focus: undefined }) },
    EVENT_TYPES.map((t) => h('option', { value: t, selected: t === type }, t)));
  const { el } = flamePanel({ ...p, type }, 'endpoint', tree.tree.root, top, tree.unit, null);
  const sec = h('section', {}, h('h1', {}, `Endpoint ${p.endpoint}`),
    h('p.sub', {}, `${p.service} · every request of the endpoint merged · total ${fmtValue(tree.tree.total, tree.unit)}, ${fmtCount(tree.tree.samples)} samples`),
    incidentLinks(tree.incidents), h('div.controls', {}, 'type ', typeSel), el,
    h('h2', {}, 'Slowest requests'), requestsTable(slow.requests, p));
  sec.onMounted = el.onMounted;
  return sec;
};

// Per-endpoint diff of two versions: latency and cost per call side by side, each tested
// (rank test on durations, Welch on costs, BH); a flagged endpoint opens its own diff.
const chg = (t) => t.change == null ? 'new' : `${t.change >= 0 ? '+' : ''}${(t.change * 100).toFixed(1)}%`;
const chgCell = (t) => h('td.num' + (t.class === 'regression' ? '.reg' : t.class === 'improvement' ? '.imp' : ''),
  { title: `${t.class}, q ${t.q.toPrecision(2)}` }, chg(t));
const pair = (x, f) => `${f(x.base)} → ${f(x.test)}`;

VIEWS.endpointdiff = async (p) => {
  nav(p.service);
  const d = await get('endpoint-diff', { service: p.service, base: p.base, test: p.test, from: p.from, to: p.to });
  const bytes = (v) => fmtValue(v, 'bytes');
  return h('section', {}, h('h1', {}, `Endpoints: ${p.service} ${p.base} → ${p.test}`),
    h('p.sub', {}, `${d.tested} tests, ${d.flagged} endpoint(s) flagged (q ≤ ${d.q}, change ≥ ${(d.min_change * 100).toFixed(0)}%) · ${d.test_used}`),
    h('table.grid.epdiff', {}, h('thead', {}, h('tr', {}, ['endpoint', 'calls', 'p50', 'p99', 'latency', 'CPU / call', 'Δ', 'wall / call', 'Δ', 'alloc / call', 'Δ', ''].map((x) => h('th', {}, x)))),
      h('tbody', {}, d.endpoints.map((e) => h('tr' + (e.flagged ? '.flagged' : ''), {},
        h('td', {}, h('a.endpoint', { href: href('endpoint', { service: p.service, endpoint: e.name }) }, e.name || '(unnamed)')),
        h('td.num', {}, pair(e.calls, fmtCount)), h('td.num', {}, pair(e.p50_ns, ns)), h('td.num', {}, pair(e.p99_ns, ns)),
        chgCell(e.tests.latency), h('td.num', {}, pair(e.cpu_per_call_ns, ns)), chgCell(e.tests.cpu),
        h('td.num', {}, pair(e.wall_per_call_ns, ns)), chgCell(e.tests.wall),
        h('td.num', {}, pair(e.alloc_per_call_bytes, bytes)), chgCell(e.tests.alloc),
        h('td', {}, h('a.open-diff', { href: href('diff', { service: p.service, base: p.base, test: p.test, endpoint: e.name }) }, 'functions')))))));
};

// One trace's or span's profile: a flame graph per event type (tabs).
VIEWS.span = async (p) => {
  nav(p.service);
  const id = { trace: p.trace, span: p.span };
  const all = await get('span', id);
  const types = EVENT_TYPES.filter((t) => all.types[t]);
  const type = p.type && types.includes(p.type) ? p.type : types[0];
  // a request no sample landed in (shorter than the sampling period, or off CPU between wall
  // samples) has its duration and nothing to draw
  const tree = type ? await get('span', { ...id, type, view: 'tree', limit: 10000, min_share: 0 }) : null;
  const tabs = h('div.tabs', {}, types.map((t) => h('a' + (t === type ? '.active' : ''), { href: href('span', { ...p, type: t, focus: undefined }) },
    `${t} (${fmtValue(all.types[t].total, all.types[t].unit)})`)));
  const panel = tree ? flamePanel({ ...p, type }, 'span', tree.tree.root, all.types[type], tree.unit, null).el
    : h('p.no-samples', {}, 'No samples landed in this request: it ran between the profiler\'s samples. ',
      'Its duration above is measured, not sampled; the endpoint\'s profile merges every request like it.');
  const rq = all.request; // a named span (a request): its real duration beside its samples
  const sec = h('section', {}, h('h1', {}, rq ? `Request ${rq.name || p.span}` : p.span ? `Span ${p.span}` : `Trace ${p.trace}`),
    p.span && p.trace ? h('p.sub', {}, 'trace ', h('a', { href: href('span', { trace: p.trace, service: p.service }) }, p.trace)) : null,
    rq ? h('p.request-summary', {}, `duration ${ns(rq.duration_ns)} (${rq.ended ? 'ended' : 'still running'}) · on CPU ${ns(rq.on_cpu_ns)} · off CPU ${ns(rq.off_cpu_ns)} · started ${fmtTime(rq.start_ns)}`,
      p.service ? [' · ', h('a', { href: href('endpoint', { service: p.service, endpoint: rq.name }) }, 'endpoint ' + rq.name)] : null) : null,
    incidentLinks(all.incidents), tabs, panel);
  sec.onMounted = panel.onMounted;
  return sec;
};

window.addEventListener('hashchange', route);
window.addEventListener('DOMContentLoaded', route);
