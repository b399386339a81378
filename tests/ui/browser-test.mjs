// The web UI in a real browser (headless Debian chromium, puppeteer-core) against a real
// pipeline that tests/ui/browser-test.sh started and fed with the demo service: v1 and v2 (v2
// adds apply_discount_rules, ~9 % more CPU per checkout) side by side, every request in its
// own span. Each check drives the UI as a user would (clicks, typing) and compares what is
// drawn with the query API's own answer. Screenshots of every view go to the directory given.
//
// usage: node browser-test.mjs SERVER_URL SCREENSHOT_DIR
import { mkdirSync } from 'node:fs';
import { launch, open, nav } from './browser.mjs';

const [server, shots] = process.argv.slice(2);
if (!server || !shots) { console.error('usage: browser-test.mjs SERVER_URL SCREENSHOT_DIR'); process.exit(2); }
mkdirSync(shots, { recursive: true });

let failed = 0, passed = 0;
function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what);
}
async function api(path) {
  const r = await fetch(server + '/api/v1/' + path);
  if (!r.ok) throw new Error(`GET ${path}: ${r.status} ${await r.text()}`);
  return r.json();
}

const { browser, close } = await launch();
const deadline = setTimeout(async () => {
  console.error('browser test: over 150 s, giving up');
  await Promise.race([close(), new Promise((r) => setTimeout(r, 5000))]).catch(() => {});
  process.exit(1);
}, 150000);
const page = await browser.newPage();
await page.setViewport({ width: 1400, height: 900 });
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(e.message));
page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(m.text()); });
const shot = (name) => page.screenshot({ path: `${shots}/${name}.png`, fullPage: true });
const frames = (p = page) => p.evaluate(() => window.fpFlame.frames());
// Clicks the middle of the widest drawn frame called name.
async function clickFrame(name, opts) {
  const f = (await frames()).filter((x) => x.name === name).sort((a, b) => b.w - a.w)[0];
  check(f, `a frame ${name} is drawn`);
  const box = await (await page.$('.flame-canvas')).boundingBox();
  await page.mouse.click(box.x + f.x + f.w / 2, box.y + f.y + f.h / 2, opts);
}

async function test(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    passed++;
    console.log(`ok   ${name.padEnd(40)} ${Date.now() - t0} ms`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.message}`);
    await shot('FAILED-' + name).catch(() => {});
  }
}

await test('services', async () => {
  await open(page, server + '/');
  const text = await page.$eval('#main', (e) => e.innerText);
  check(text.includes('demo'), 'the demo service is listed');
  const chips = await page.$$eval('.chip', (e) => e.map((x) => x.textContent));
  check(chips.includes('v1') && chips.includes('v2'), `its versions are listed: ${chips}`);
  check(await page.$('.spark canvas'), 'a CPU sparkline is drawn');
  await shot('services');
});

await test('service_timeline', async () => {
  await nav(page, '#/service?service=demo');
  const charts = await page.$$('.chart .u-over');
  check(charts.length >= 2, `a chart per event type (${charts.length})`);
  // drag across the first chart: the URL gets the selected range
  const box = await charts[0].boundingBox();
  await page.mouse.move(box.x + box.width * 0.3, box.y + box.height / 2);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.7, box.y + box.height / 2, { steps: 5 });
  await page.mouse.up();
  // the selection reaches the URL after the chart's select hook runs: wait for it (5 s at most)
  await page.waitForFunction(() => /[?&]from=/.test(location.hash) && /[?&]to=/.test(location.hash),
    { timeout: 5000 }).catch(() => {});
  const url = new URL(page.url());
  const q = new URLSearchParams(url.hash.split('?')[1]);
  check(+q.get('to') > +q.get('from') && +q.get('from') > 1e9, `a drag selects a range: ${url.hash}`);
  check((await page.$eval('.range', (e) => e.textContent)).startsWith('selected'), 'the range is shown');
  await shot('service');
  // the label filter: the series of /search requests only (the demo labels every request)
  await page.evaluate(() => { document.body.dataset.ready = '0'; });
  await page.$eval('input[placeholder="label key:value"]', (e) => { e.value = 'endpoint:/search'; e.dispatchEvent(new Event('change')); });
  await page.waitForFunction(() => document.body.dataset.ready === '1', { timeout: 30000 });
  const titles = await page.$$eval('.chart h3', (t) => t.map((x) => x.textContent));
  check(titles.length >= 2 && titles.every((x) => x.includes('label endpoint:/search')), `label charts: ${titles}`);
  check(decodeURIComponent(page.url()).includes('label=endpoint:/search'), 'the label is in the URL');
  // the deploy marker's link: compare with the previous version
  const link = await page.$('a.compare');
  check(link, 'a deploy has a "compare with previous version" link');
  await page.evaluate(() => { document.body.dataset.ready = '0'; });
  await link.click();
  await page.waitForFunction(() => document.body.dataset.ready === '1', { timeout: 30000 });
  check(/#\/diff\?.*base=v1.*test=v2/.test(page.url()), `the link opens the diff v1 -> v2: ${page.url()}`);
});

let sharedUrl, sharedState;
await test('flame_names_zoom_search', async () => {
  // min_share=0: every call path is a frame (the demo has ~50), so the search's share is
  // exactly the API's total_share, up to the display's rounding
  await nav(page, '#/flame?service=demo&version=v2&min_share=0');
  let fs = await frames();
  const names = new Set(fs.map((f) => f.name));
  for (const n of ['handle_checkout', 'handle_search', 'price_cart', 'scan_index', 'apply_discount_rules'])
    check(names.has(n), `the flame graph shows ${n}`);
  await shot('flame');
  // click zooms: handle_checkout becomes the full width, the search subtree disappears
  const width = (await (await page.$('.flame-canvas')).boundingBox()).width;
  await clickFrame('handle_checkout');
  fs = await frames();
  const hc = fs.find((f) => f.name === 'handle_checkout');
  check(hc && Math.abs(hc.w - width) < 2, `after the click handle_checkout is ${hc && hc.w} px of ${width}`);
  check(!fs.some((f) => f.name === 'handle_search' || f.name === 'scan_index'), 'the other subtree is gone');
  const crumbs = await page.$eval('.crumbs', (e) => e.textContent);
  check(crumbs.includes('handle_checkout'), `breadcrumb: ${crumbs}`);
  check(page.url().includes('focus='), 'the zoom is in the URL');
  // search: highlight and share, compared with the API's top functions
  await page.type('input.search', 'price_cart');
  const found = await page.$eval('.found', (e) => e.textContent);
  const m = /(\d+) frames match: ([\d.]+)% of the total/.exec(found);
  check(m, `the search says its share: "${found}"`);
  const top = await api('profile?service=demo&version=v2&view=top&limit=100000');
  const pc = top.functions.find((f) => f.name === 'price_cart');
  check(Math.abs(+m[2] - 100 * pc.total_share) <= 0.0051, `share ${m[2]}% = the API's ${(100 * pc.total_share).toFixed(3)}%`);
  fs = await frames();
  check(fs.some((f) => f.match) && fs.every((f) => f.match === f.name.includes('price_cart')), 'exactly the matching frames are highlighted');
  await shot('flame-search');
  sharedUrl = page.url();
  sharedState = { crumbs: await page.$eval('.crumbs', (e) => e.textContent), found, frames: fs.map((f) => `${f.name}:${Math.round(f.w)}:${f.match}`).join() };
});

await test('flame_tooltip_and_mode', async () => {
  const f = (await frames()).find((x) => x.name === 'price_cart');
  const box = await (await page.$('.flame-canvas')).boundingBox();
  await page.mouse.move(box.x + f.x + f.w / 2, box.y + f.y + f.h / 2);
  const tip = await page.$eval('.flame-tip', (e) => (e.hidden ? '' : e.innerText));
  check(/price_cart/.test(tip) && /total/.test(tip) && /self/.test(tip) && /samples/.test(tip) && /(ms|s)\b/.test(tip), `tooltip: ${tip}`);
  // flame mode: root at the bottom
  const root = async () => { const fs = await frames(); return [fs.find((x) => x.name === '(all)').y, Math.max(...fs.map((x) => x.y))]; };
  const [before] = await root();
  check(before === 0, `icicle: the root on top (y ${before})`);
  // the layout switch shows what is drawn (issue 35: it was labelled with what a click does)
  const pressed = () => page.$$eval('.flame-panel .seg button[aria-pressed="true"]', (b) => b.map((x) => x.textContent));
  let on = await pressed();
  check(on.length === 1 && /^Icicle/.test(on[0]), `icicle drawn, the switch says: ${on}`);
  await page.click('.flame-panel .seg button[data-mode="flame"]');
  const [after, lowest] = await root();
  check(after > 0 && after === lowest, `flame mode draws the root at the bottom (y ${after}, lowest frame ${lowest})`);
  check(page.url().includes('mode=flame'), 'the mode is in the URL');
  on = await pressed();
  check(on.length === 1 && /^Flame/.test(on[0]), `flame drawn, the switch says: ${on}`);
});

// issue 35: at 1400 px the top-functions table beside the flame graph overflowed its panel
await test('flame_side_table_fits', async () => {
  await nav(page, '#/flame?service=demo');
  const m = await page.evaluate(() => {
    const side = document.querySelector('.flame-panel .side'), t = side.querySelector('table.top');
    const sr = side.getBoundingClientRect(), tr = t.getBoundingClientRect();
    return { side: side.clientWidth, table: t.scrollWidth, sideScroll: side.scrollWidth, tRight: tr.right, sRight: sr.right,
      doc: document.documentElement.scrollWidth, vw: window.innerWidth, rows: t.rows.length,
      // a value wider than its cell spills over its neighbour
      spill: [...t.querySelectorAll('td.num, th.num')].filter((c) => c.scrollWidth > c.clientWidth + 1).map((c) => c.textContent) };
  });
  check(m.spill.length === 0, `values wider than their column: ${m.spill.slice(0, 5)}`);
  check(m.rows > 3, `the table has rows (${m.rows})`);
  check(m.table <= m.side && m.sideScroll <= m.side + 1 && m.tRight <= m.sRight + 1,
    `the table fits its panel: table ${m.table} px, panel ${m.side} px (content ${m.sideScroll}), right edges ${m.tRight}/${m.sRight}`);
  check(m.doc <= m.vw, `no horizontal page scroll: ${m.doc} px in a ${m.vw} px window`);
});

await test('shared_link_reproduces_view', async () => {
  const ctx = await browser.createBrowserContext();
  const p2 = await ctx.newPage();
  await p2.setViewport({ width: 1400, height: 900 });
  await open(p2, sharedUrl);
  const st = { crumbs: await p2.$eval('.crumbs', (e) => e.textContent), found: await p2.$eval('.found', (e) => e.textContent),
    frames: (await frames(p2)).map((f) => `${f.name}:${Math.round(f.w)}:${f.match}`).join() };
  check(st.crumbs === sharedState.crumbs, `breadcrumb ${st.crumbs} vs ${sharedState.crumbs}`);
  check(st.found === sharedState.found, `search ${st.found} vs ${sharedState.found}`);
  check(st.frames === sharedState.frames, 'the same frames, widths and highlights');
  await p2.screenshot({ path: `${shots}/flame-shared-link.png` });
  await ctx.close();
});

await test('sandwich_and_filters', async () => {
  await nav(page, '#/flame?service=demo&version=v2');
  // shift-click a frame: its callers and callees
  await page.evaluate(() => { document.body.dataset.ready = '0'; });
  await page.keyboard.down('Shift');
  await clickFrame('price_cart');
  await page.keyboard.up('Shift');
  await page.waitForFunction(() => document.body.dataset.ready === '1', { timeout: 30000 });
  check(page.url().includes('fn=price_cart'), `shift-click selects the function: ${page.url()}`);
  const sw = await page.$eval('#sandwich', (e) => e.innerText);
  check(/callers[\s\S]*handle_checkout/.test(sw), `handle_checkout calls price_cart: ${sw}`);
  // exclude filter: the handle_search stacks disappear from the graph
  await page.evaluate(() => { document.body.dataset.ready = '0'; });
  await page.$eval('textarea[data-filter=exclude]', (e) => { e.value = 'handle_search'; e.dispatchEvent(new Event('change')); });
  await page.waitForFunction(() => document.body.dataset.ready === '1', { timeout: 30000 });
  const fs = await frames();
  check(page.url().includes('exclude=handle_search'), 'the filter is in the URL');
  check(fs.some((f) => f.name === 'price_cart') && !fs.some((f) => f.name === 'handle_search' || f.name === 'scan_index'), 'exclude drops the matching stacks');
  await shot('flame-sandwich');
});

await test('diff_planted_regression', async () => {
  await nav(page, '#/diff?service=demo&base=v1&test=v2');
  const fs = await frames();
  const sat = fs.filter((f) => f.saturated);
  check(sat.length > 0 && sat.every((f) => f.name === 'apply_discount_rules'), `saturated frames: ${[...new Set(sat.map((f) => f.name))]}`);
  check(sat.every((f) => f.fill === 'rgb(178,24,43)'), `the planted function is red: ${sat.map((f) => f.fill)}`);
  // every other frame is a pale tint: no channel more than 30% of the way from the grey
  for (const f of fs.filter((x) => !x.saturated)) {
    const c = f.fill.match(/\d+/g).map(Number);
    check(Math.abs(c[0] - 224) <= 0.3 * 224 + 1 && Math.abs(c[1] - 224) <= 0.3 * 200 + 1 && Math.abs(c[2] - 224) <= 0.3 * 190 + 1, `${f.name} is pale: ${f.fill}`);
  }
  // the findings table is the diff's: apply_discount_rules the only regression
  const rows = await page.$$eval('.findings tbody tr', (t) => t.map((r) => [...r.children].map((c) => c.textContent)));
  const regs = rows.filter((r) => r[0] === 'regression');
  check(regs.length === 1 && regs[0][8] === 'apply_discount_rules', `regressions: ${JSON.stringify(regs)}`);
  const d = await api('diff?service=demo&base=v1&test=v2&limit=100');
  check(rows.length === d.entries.filter((e) => e.class !== 'untested').length, 'one row per tested function');
  // a finding by a caller's total cost says so beside its name, and only those
  const byTotal = d.entries.filter((e) => e.class !== 'untested' && e.by_inclusive).map((e) => e.name + ' (total cost)');
  const marked = rows.filter((r) => r[8].endsWith(' (total cost)')).map((r) => r[8]);
  check(JSON.stringify(marked) === JSON.stringify(byTotal), `marked by total cost: ${JSON.stringify(marked)} (API: ${JSON.stringify(byTotal)})`);
  // what the diff could have seen, and what its columns mean (issues 30 and 35)
  const mde = await page.$eval('.summary .mde', (e) => e.textContent).catch(() => '');
  check(/minimum detectable effect .* a new function taking ≥ [\d.]+% of the samples/.test(mde), `MDE line: ${mde}`);
  const cols = await page.$eval('p.legend.columns', (e) => e.textContent).catch(() => '');
  check(cols.includes('overweight: ') && cols.includes('respons.: '), `column legend: ${cols}`);
  await shot('diff');
  // per request
  await page.evaluate(() => { document.body.dataset.ready = '0'; });
  await page.click('section > .controls button');
  await page.waitForFunction(() => document.body.dataset.ready === '1', { timeout: 30000 });
  check(page.url().includes('per=request'), 'per request is in the URL');
  check((await page.$eval('.summary', (e) => e.innerText)).includes('per request'), 'values per request');
});

await test('reports_open_diff', async () => {
  await nav(page, '#/reports');
  const rows = await page.$$eval('.reports tbody tr', (t) => t.map((r) => r.innerText));
  check(rows.length >= 1 && rows[0].includes('v1 → v2'), `reports: ${rows}`);
  await shot('reports');
  await page.evaluate(() => { document.body.dataset.ready = '0'; });
  await page.click('a.open-diff');
  await page.waitForFunction(() => document.body.dataset.ready === '1', { timeout: 30000 });
  check(/#\/diff\?.*base=v1.*test=v2/.test(page.url()), 'a report opens its diff');
  check(await page.$('.findings'), 'with its findings');
});

await test('spans_and_span_flame', async () => {
  await nav(page, '#/spans?service=demo');
  const n = await page.$$eval('.spans tbody tr', (t) => t.length);
  check(n >= 5, `spans are listed (${n})`);
  await shot('spans');
  const spanId = await page.$eval('.spans tbody tr a.span', (a) => a.textContent);
  const traceId = new URLSearchParams((await page.$eval('.spans tbody tr a.trace', (a) => a.getAttribute('href'))).split('?')[1]).get('trace');
  await page.evaluate(() => { document.body.dataset.ready = '0'; });
  await page.click('.spans tbody tr a.span');
  await page.waitForFunction(() => document.body.dataset.ready === '1', { timeout: 30000 });
  const names = new Set((await frames()).map((f) => f.name));
  const checkout = names.has('handle_checkout'), search = names.has('handle_search');
  check(checkout !== search, `one request kind only: checkout ${checkout}, search ${search}`);
  const foreign = checkout ? ['scan_index', 'rank_results', 'handle_search'] : ['price_cart', 'reserve_stock', 'handle_checkout', 'apply_discount_rules'];
  check(!foreign.some((x) => names.has(x)), `nothing of the other request kind: ${[...names]}`);
  // the graph's total is the span's own cost in the span index
  const s = await api(`span?span=${spanId}&type=cpu&view=tree&min_share=0`);
  const total = await page.evaluate(() => window.fpFlame.total[0]);
  check(total === s.tree.total, `span total ${total} = ${s.tree.total}`);
  const tabs = await page.$$eval('.tabs a', (t) => t.map((x) => x.textContent));
  check(tabs.length >= 1 && tabs[0].startsWith('cpu'), `a tab per event type: ${tabs}`);
  await shot('span');
  // the trace id box
  await nav(page, '#/spans?service=demo');
  await page.type('#trace-box', traceId);
  await page.evaluate(() => { document.body.dataset.ready = '0'; });
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.body.dataset.ready === '1', { timeout: 30000 });
  check(page.url().includes('trace=' + traceId) && (await frames()).length > 2, 'the trace box opens the trace');
});

// issue 31: the endpoints view (the demo names its requests), an endpoint's flame graph and
// slowest requests, and a request's page with its real duration beside on/off-CPU time
await test('endpoints_endpoint_request', async () => {
  await nav(page, '#/endpoints?service=demo');
  const rows = await page.$$eval('.endpoints tbody tr a.endpoint', (t) => t.map((a) => a.textContent));
  check(rows.includes('POST /checkout') && rows.includes('GET /search'), `endpoints listed: ${rows}`);
  const api31 = await api('endpoints?service=demo');
  const shown = await page.$$eval('.endpoints tbody tr', (t) => t.map((r) => r.children[1].textContent));
  check(shown.length === api31.endpoints.length, `a row per endpoint (${shown.length} / ${api31.endpoints.length})`);
  await shot('endpoints');
  await page.evaluate(() => { document.body.dataset.ready = '0'; });
  await page.click('.endpoints tbody tr a.endpoint');
  await page.waitForFunction(() => document.body.dataset.ready === '1', { timeout: 30000 });
  const ep = decodeURIComponent(new URLSearchParams(page.url().split('?')[1]).get('endpoint'));
  const names = new Set((await frames()).map((f) => f.name));
  const want = ep === 'POST /checkout' ? 'handle_checkout' : ep === 'GET /search' ? 'handle_search' : null;
  check(want === null || names.has(want), `endpoint ${ep}: its flame graph holds ${want}`);
  const nreq = await page.$$eval('.requests tbody tr', (t) => t.length);
  check(nreq >= 1, `slowest requests listed (${nreq})`);
  await shot('endpoint');
  await page.evaluate(() => { document.body.dataset.ready = '0'; });
  await page.click('.requests tbody tr a.request');
  await page.waitForFunction(() => document.body.dataset.ready === '1', { timeout: 30000 });
  const summary = await page.$eval('.request-summary', (e) => e.textContent);
  check(/duration .+ on CPU .+ off CPU/.test(summary), `the request's page: ${summary}`);
  check((await page.$eval('h1', (e) => e.textContent)).includes(ep), 'the request page names its endpoint');
  await shot('request');
  // a request no sample landed in (most of the demo's: ~0.2 ms each, 1,500 a second) has a page
  // too: its measured duration, and no flame graph
  const all = await api(`requests?service=demo&endpoint=${encodeURIComponent(ep)}&limit=10000`);
  const here = new URLSearchParams(page.url().split('?')[1]).get('span'); // another than this page's
  const bare = all.requests.find((q) => q.span_id !== here && Object.values(q.cost).every((v) => v === 0));
  check(bare, `a request without samples among ${all.requests.length}`);
  await nav(page, `#/span?trace=${bare.trace_id}&span=${bare.span_id}&service=demo`);
  const s2 = await page.$eval('.request-summary', (e) => e.textContent);
  check(s2.includes('duration ') && (await page.$$('.no-samples')).length === 1 && (await page.$$('.flame')).length === 0,
    `the page of a request without samples: ${s2}`);
});

// the per-endpoint diff of v1 and v2: a row per endpoint, flagged as the API says; an
// endpoint's "functions" link opens the diff restricted to it (per call)
await test('endpoint_diff', async () => {
  await nav(page, '#/endpointdiff?service=demo&base=v1&test=v2');
  const d = await api('endpoint-diff?service=demo&base=v1&test=v2');
  const names = await page.$$eval('.epdiff tbody tr a.endpoint', (t) => t.map((a) => a.textContent));
  check(names.length === d.endpoints.length && names.includes('POST /checkout') && names.includes('GET /search'),
    `a row per endpoint: ${names}`);
  const flagged = await page.$$eval('.epdiff tbody tr.flagged a.endpoint', (t) => t.map((a) => a.textContent));
  const want = d.endpoints.filter((e) => e.flagged).map((e) => e.name);
  check(flagged.join('|') === want.join('|'), `flagged rows ${flagged} = the API's ${want}`);
  await shot('endpoint-diff');
  await page.evaluate(() => { document.body.dataset.ready = '0'; });
  const row = (await page.$$('.epdiff tbody tr'))[names.indexOf('POST /checkout')];
  await (await row.$('a.open-diff')).click();
  await page.waitForFunction(() => document.body.dataset.ready === '1', { timeout: 30000 });
  const summary = await page.$eval('.summary', (e) => e.textContent);
  check(summary.includes('per call of POST /checkout'), `the endpoint's diff: ${summary.slice(0, 200)}`);
});

// issue 35: an empty spans page says how spans get there
await test('spans_empty_state', async () => {
  await nav(page, '#/spans?service=demo&from=1&to=2');
  const text = await page.$eval('section', (e) => e.innerText);
  check(/No spans in this range/.test(text) && /fleetprof_span_set\(\)/.test(text) && /traceparent/.test(text),
    `the empty page explains: ${text.slice(0, 300)}`);
});

// The service page's Insights section: the planted lock hotspot of insight_work (service
// "insight") with log_line first, as the API says; its evidence opens the flame graph filtered to
// it. The demo raises nothing: the section says so with the API's count of rules evaluated.
const insightsDone = () => page.waitForFunction(() => {
  const b = document.querySelector('.insights');
  return b && !b.textContent.includes('analysing');
}, { timeout: 30000 });
await test('insights_section', async () => {
  const want = await api('insights?service=insight&from=0');
  check(want.insights.length && want.insights[0].rule === 'lock_contention', `API: ${JSON.stringify(want).slice(0, 200)}`);
  await nav(page, '#/service?service=insight');
  await insightsDone();
  const rules = await page.$$eval('.insight', (t) => t.map((e) => e.dataset.rule));
  check(rules.join() === want.insights.map((x) => x.rule).join(), `insights shown ${rules} / API ${want.insights.map((x) => x.rule)}`);
  const first = await page.$eval('.insight ul.evidence li a', (a) => a.textContent);
  check(first.startsWith('log_line'), `first evidence ${first}`);
  await shot('insights');
  await page.evaluate(() => { document.body.dataset.ready = '0'; });
  await page.click('.insight ul.evidence li a');
  await page.waitForFunction(() => document.body.dataset.ready === '1', { timeout: 30000 });
  const u = new URLSearchParams(page.url().split('?')[1]);
  check(u.get('type') === 'lock' && u.get('include'), `the evidence opens the lock flame graph filtered: ${page.url()}`);
  const names = new Set((await frames()).map((f) => f.name));
  check([...names].some((n) => n.startsWith('log_line')), 'the filtered flame graph holds log_line');
  // the demo (run here with FLEETPROF_CPU_BUDGET=5 and 4x the CPU rate: the agent may use more
  // than the rule's default 3 %): the section shows what the API answers, or the empty state
  const demo = await api('insights?service=demo&from=0');
  await nav(page, '#/service?service=demo');
  await insightsDone();
  const txt = await page.$eval('.insights', (e) => e.textContent);
  const shown = await page.$$eval('.insight', (t) => t.map((e) => e.dataset.rule));
  check(shown.join() === demo.insights.map((x) => x.rule).join(), `demo: ${shown} / API ${demo.insights.map((x) => x.rule)}`);
  check(demo.insights.length || txt.includes(`${demo.evaluated} rules evaluated`), `demo: ${txt}`);
  check(!demo.insights.some((x) => x.rule !== 'agent_overhead'), `the demo raises only the agent's overhead, if anything: ${shown}`);
});

// Search: the demo's process-intervals by CPU, as the API ranks them; the first opens the flame
// graph of that process and interval.
await test('kpm_search', async () => {
  const want = await api('search?service=demo&kpm=cpu_cores&top=20&from=0');
  await nav(page, '#/search?service=demo&kpm=cpu_cores');
  const rows = await page.$$eval('table.search tbody tr', (t) => t.map((r) => r.children[2].textContent));
  check(rows.length === want.results.length && rows.length > 0, `rows ${rows.length} / API ${want.results.length}`);
  check(rows[0] === `${want.results[0].host}:${want.results[0].pid}`, `first ${rows[0]}`);
  await shot('search');
  await page.evaluate(() => { document.body.dataset.ready = '0'; });
  await page.click('table.search tbody tr a.result');
  await page.waitForFunction(() => document.body.dataset.ready === '1', { timeout: 30000 });
  const u = new URLSearchParams(page.url().split('?')[1]);
  check(u.get('pid') === String(want.results[0].pid) && u.get('from') === String(want.results[0].bucket), `opens ${page.url()}`);
  const title = await page.$eval('p.sub', (e) => e.textContent);
  check(title.includes(`pid ${want.results[0].pid}`) && (await frames()).length > 0, `flame of the process: ${title}`);
  await nav(page, '#/service?service=demo');
  const kpms = await page.waitForFunction(() => document.querySelectorAll('.kpms tr[data-kpm]').length, { timeout: 30000 });
  check(await kpms.jsonValue() === 18, 'the service page lists the 18 KPMs');
  check(await page.$('.kpms .kpm-chart canvas'), 'a KPM chart over time is drawn');
  await page.select('.kpms select.kpm-select', 'alloc_rate');
  const h3 = await page.$eval('.kpms .kpm-chart h3', (e) => e.textContent);
  check(h3.startsWith('alloc_rate'), `the chart follows the selection: ${h3}`);
  await shot('kpm');
});

await test('token_login', async () => {
  const ts = process.env.TOKEN_SERVER, token = process.env.TOKEN;
  check(ts && token, 'TOKEN_SERVER and TOKEN are set (browser-test.sh)');
  const ctx = await browser.createBrowserContext();
  const p2 = await ctx.newPage();
  // without the token: the login page, and the API refuses
  const resp = await p2.goto(ts + '/#/flame?service=demo&version=v2', { waitUntil: 'domcontentloaded' });
  check(resp.status() === 401 && (await p2.$('form#f input#t')), `the login page (${resp.status()})`);
  check((await (await fetch(ts + '/api/v1/services')).status) === 401, 'the API needs the token');
  await p2.screenshot({ path: `${shots}/login.png` });
  // a wrong token: the server sets no cookie and the page says so
  await p2.type('#t', 'wrong');
  await p2.keyboard.press('Enter');
  await p2.waitForFunction(() => document.getElementById('e').textContent.includes('wrong'), { timeout: 10000 });
  // the right one: the view of the link opens, its API calls authorized by the cookie, which the
  // server set HttpOnly: no script of the page can read it
  await p2.$eval('#t', (e) => { e.value = ''; });
  await p2.type('#t', token);
  await Promise.all([p2.waitForNavigation({ waitUntil: 'domcontentloaded' }), p2.keyboard.press('Enter')]);
  await p2.waitForFunction(() => document.body.dataset.ready === '1', { timeout: 30000 });
  const names = await p2.evaluate(() => window.fpFlame && window.fpFlame.frames().map((f) => f.name));
  check(names && names.includes('price_cart'), 'the flame graph of the link, through the token');
  check(!(await p2.evaluate(() => document.cookie)).includes('fleetprof_token'), 'the token cookie is HttpOnly');
  await ctx.close();
});

await test('no_page_errors', async () => {
  check(pageErrors.length === 0, `errors in the page: ${pageErrors.join(' | ')}`);
});

await close();
clearTimeout(deadline);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
