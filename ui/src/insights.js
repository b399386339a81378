// The Insights section of the service page: GET /api/v1/insights over the page's range (its
// selection, else the whole history) and version, each insight with its figures, what it means,
// the usual fix and its evidence, every site opening the flame graph filtered to it.
import { get } from './api.js';

function score(x) {
  if (x.unit === 'share') return `${(x.score * 100).toFixed(1)}% (threshold ${(x.threshold * 100).toFixed(0)}%)`;
  if (x.unit === 'bytes/s') return `${(x.score / 1024).toFixed(0)} KiB/s (threshold ${(x.threshold / 1024).toFixed(0)} KiB/s)`;
  return `${x.score.toFixed(0)} ${x.unit} (threshold ${x.threshold.toFixed(0)})`;
}

function value(x, e) {
  if (x.unit === 'share') return `${(e.share * 100).toFixed(1)}% of it`;
  if (x.unit === 'bytes/s') return `${(e.value / 1024).toFixed(0)} KiB/s (R² ${e.share.toFixed(2)})`;
  return `${e.value.toFixed(0)} ${x.unit}`;
}

// h, href: main.js's DOM helper and link builder; p: the service page's parameters.
export function insightsSection(h, href, p) {
  const box = h('div.insights', {}, h('p.muted', {}, 'analysing…'));
  box.load = async () => {
    const q = { service: p.service, version: (p.version || [])[0], from: p.from || 0, to: p.to };
    let r;
    try { r = await get('insights', q); } catch (e) { box.replaceChildren(h('p.error', {}, `insights: ${e.message}`)); return; }
    const items = r.insights.map((x) => h('div.insight', { 'data-rule': x.rule },
      h('h3', {}, x.title, h('span.score', {}, ' · ', score(x))),
      h('p', {}, x.summary),
      h('ul.evidence', {}, x.evidence.map((e) => h('li', {},
        e.include ? h('a', { href: href('flame', { service: p.service, version: q.version, type: x.type, from: q.from || undefined, to: q.to, include: e.include }) }, e.name) : e.name,
        ` — ${value(x, e)}`))),
      h('p.explain', {}, h('b', {}, 'What it means: '), x.explain),
      h('p.explain', {}, h('b', {}, 'Usual fix: '), x.fix)));
    box.replaceChildren(...(items.length ? items
      : [h('p.muted', {}, `Nothing to report: ${r.evaluated} rules evaluated at their default thresholds.`)]));
  };
  return box;
}
