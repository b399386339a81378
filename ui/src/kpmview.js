// Key performance metrics in the UI: the service page's KPM section (the service's latest
// interval, every KPM with its unit; each opens the search for it) and the search view (the
// process-intervals where a KPM is highest or rose most over the process's baseline, each
// opening the flame graph of that process and interval). Data: GET /api/v1/kpm, /api/v1/search.
import uPlot from 'uplot';
import { get, fmtTime } from './api.js';

const TYPE_OF = { alloc_rate: 'alloc', alloc_ops: 'alloc', heap_live: 'inuse', heap_growth: 'inuse',
  lock_wait: 'lock', lock_contended: 'lock', io_wait: 'io', io_bytes: 'io', io_calls: 'io', io_bytes_per_call: 'io' };

function fmt(v, unit) {
  if (v == null) return '-';
  if (unit === 'share') return `${(v * 100).toFixed(1)}%`;
  if (unit.startsWith('bytes')) {
    const a = Math.abs(v), s = unit.slice(5);
    if (a >= 1 << 30) return `${(v / (1 << 30)).toFixed(2)} GiB${s}`;
    if (a >= 1 << 20) return `${(v / (1 << 20)).toFixed(2)} MiB${s}`;
    if (a >= 1 << 10) return `${(v / (1 << 10)).toFixed(1)} KiB${s}`;
    return `${v.toFixed(0)} B${s}`;
  }
  return `${Number(v.toPrecision(4))} ${unit}`;
}

// One KPM of the service over time (uPlot) into el.
function kpmChart(h, el, r, k) {
  const pts = r.points;
  el.replaceChildren(h('h3', {}, `${k.name} (${k.unit})`));
  new uPlot({ width: Math.max(400, el.clientWidth || 800), height: 160, scales: { x: { time: true } },
    series: [{}, { label: k.name, stroke: '#0072B2', width: 1.5, spanGaps: true, value: (u, v) => fmt(v, k.unit) }],
    axes: [{}, { size: 80, values: (u, vals) => vals.map((v) => fmt(v, k.unit)) }] },
  [pts.map((x) => x.bucket), pts.map((x) => x.values[k.name])], el);
}

// The service page's section: h, href from main.js; p: service, version[], from, to.
export function kpmSection(h, href, p) {
  const box = h('div.kpms', {}, h('p.muted', {}, 'loading…'));
  box.load = async () => {
    let r;
    try { r = await get('kpm', { service: p.service, version: (p.version || [])[0], from: p.from || 0, to: p.to }); } catch (e) { box.replaceChildren(h('p.error', {}, `kpm: ${e.message}`)); return; }
    const last = r.points[r.points.length - 1];
    if (!last) { box.replaceChildren(h('p.muted', {}, 'No KPMs in this range.')); return; }
    const chart = h('div.kpm-chart');
    const sel = h('select.kpm-select', { onchange: (e) => kpmChart(h, chart, r, r.kpms.find((k) => k.name === e.target.value)) },
      r.kpms.map((k) => h('option', { value: k.name }, k.name)));
    box.replaceChildren(h('div.controls', {}, 'chart ', sel), chart,
      h('p.sub', {}, `latest interval ${fmtTime(last.bucket * 1e9)} (${last.width} s, ${last.processes} processes); click one to find the process-intervals where it is highest`),
      h('table.grid.kpm', {}, h('tbody', {}, r.kpms.map((k) => h('tr', { 'data-kpm': k.name },
        h('td', {}, h('a', { href: href('search', { service: p.service, kpm: k.name, from: p.from, to: p.to }), title: k.help }, k.name)),
        h('td.num', {}, fmt(last.values[k.name], k.unit)), h('td.muted', {}, k.help))))));
    kpmChart(h, chart, r, r.kpms[0]);
  };
  return box;
}

// #/search?service=S&kpm=NAME[&rise=1][&top=N][&from=&to=]
export async function searchView(h, href, go, p) {
  const q = { service: p.service, kpm: p.kpm || 'cpu_cores', rise: p.rise, top: p.top || 20, from: p.from || 0, to: p.to };
  const [r, cat] = await Promise.all([get('search', q), get('kpm', { service: p.service, from: 0, to: 1 })]);
  const sel = h('select', { onchange: (e) => go('search', { ...p, kpm: e.target.value }) },
    cat.kpms.map((k) => h('option', { value: k.name, selected: k.name === q.kpm }, k.name)));
  const rise = h('label.chk', {}, h('input', { type: 'checkbox', checked: p.rise === '1', onchange: (e) => go('search', { ...p, rise: e.target.checked ? '1' : undefined }) }), ' rise over the process\'s baseline');
  const type = TYPE_OF[r.kpm] || 'cpu';
  const rows = r.results.map((x, i) => h('tr', {},
    h('td.num', {}, String(i + 1)), h('td', {}, fmtTime(x.bucket * 1e9)), h('td', {}, `${x.host}:${x.pid}`), h('td', {}, x.version),
    h('td.num', {}, fmt(x.value, r.unit)), h('td.num', {}, fmt(x.baseline, r.unit)),
    h('td', {}, h('a.result', { href: href('flame', { service: p.service, type, pid: x.pid, from: x.bucket, to: x.bucket + x.width }) }, 'profile of this process-interval'))));
  return h('section', {}, h('h1', {}, `Search: ${p.service}`),
    h('div.controls', {}, 'KPM ', sel, ' ', rise),
    h('p.sub', {}, `${r.kpm} (${r.unit}), ranked by ${r.ranked_by}`),
    r.results.length ? h('table.grid.search', {}, h('thead', {}, h('tr', {}, ['#', 'interval', 'host:pid', 'version', 'value', 'baseline', ''].map((x) => h('th', {}, x)))), h('tbody', {}, rows))
      : h('p.muted', {}, 'No process-interval has this KPM in the range.'));
}
