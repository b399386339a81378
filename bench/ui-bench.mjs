// Web UI performance in headless chromium (puppeteer-core, tests/ui/browser.mjs): the flame
// graph view of a synthetic profile of N call-tree nodes, with the API answered by request
// interception (so the figures are the browser's work only, not the aggregator's):
//   render   = from the end of the view's last API response (Resource Timing responseEnd; the
//              view waits for all of them) to the end of the first canvas draw (JSON parse of
//              the tree, flattening, layout, drawing); medians of its parts are shown too
//   paint    = the same, to the next animation frame
//   zoom     = a click on a frame: hit test, redraw, breadcrumb and URL (in the click handler),
//              the slowest of three clicks (a wide frame, a middle one, a small one)
// N = 1,000 is the baseline of the same invocation (ratio 10k/1k). Page weight: every asset
// of / as the aggregator sends it (gzip level 9) and raw, from ui/dist.
//
// usage: node bench/ui-bench.mjs [ROUNDS]        (median and max over ROUNDS page loads, 7)
import { readFileSync, readdirSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch } from '../tests/ui/browser.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'ui', 'dist');
const ROUNDS = +(process.argv[2] || 7);
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.txt': 'text/plain' };

// A deterministic call tree of exactly n nodes: C++-like names, depth up to ~40, skewed fan-out.
function synthTree(n) {
  let seed = 12345;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 4294967296);
  const root = { name: '(all)', module: '', self: 0, total: 0, samples: 0, children: [] };
  const nodes = [root];
  const depth = [0];
  while (nodes.length < n) {
    // attach to a random existing node, preferring recent (deep) ones
    const i = Math.min(nodes.length - 1, Math.floor(nodes.length * Math.pow(rnd(), 0.35)));
    if (depth[i] >= 40) continue;
    const k = nodes.length;
    const c = { name: `fleet::svc${k % 97}::Handler${k % 13}::method_${k}(std::string const&)`, module: 'libsvc.so', self: Math.floor(rnd() * 1e6) + 1, total: 0, samples: 0, children: [] };
    nodes[i].children.push(c);
    nodes.push(c);
    depth.push(depth[i] + 1);
  }
  const fill = (x) => { x.total = x.self; for (const c of x.children) x.total += fill(c); x.children.sort((a, b) => b.total - a.total); x.samples = x.total / 1e4; return x.total; };
  fill(root);
  return { service: 'bench', versions: [], from: 0, to: 0, event_type: 'cpu', unit: 'nanoseconds', nodes: n, truncated: 0,
    tree: { event_type: 'cpu', unit: 'nanoseconds', total: root.total, samples: root.samples, root, nodes: n, truncated_paths: 0 } };
}

function answer(url, tree) {
  const u = new URL(url);
  if (u.pathname === '/api/v1/profile' && u.searchParams.get('view') === 'tree') return tree;
  if (u.pathname === '/api/v1/profile') return { event_type: 'cpu', unit: 'nanoseconds', total: 1, samples: 1, functions: [], n_functions: 0 };
  if (u.pathname.startsWith('/api/v1/services/')) return { service: 'bench', versions: [{ version: 'v1', first_ns: 1, last_ns: 2, chunks: 1, process_seconds: 1, work_units: 0, samples: { cpu: 1 } }] };
  return null;
}

async function measure(browser, n) {
  const tree = JSON.stringify(synthTree(n));
  const out = [];
  for (let r = 0; r < ROUNDS; r++) {
    const page = await browser.newPage();
    await page.setViewport({ width: 1600, height: 1000 });
    await page.setRequestInterception(true);
    page.on('request', (req) => {
      const u = new URL(req.url());
      if (u.pathname.startsWith('/api/v1/')) {
        const a = answer(req.url(), null);
        return req.respond({ status: 200, contentType: 'application/json', body: u.searchParams.get('view') === 'tree' ? tree : JSON.stringify(a) });
      }
      const f = u.pathname === '/' ? 'index.html' : u.pathname.slice(1);
      try {
        return req.respond({ status: 200, contentType: TYPES[f.slice(f.lastIndexOf('.'))] || 'application/octet-stream', body: readFileSync(join(dist, f)) });
      } catch (e) { return req.respond({ status: 404, body: '' }); }
    });
    await page.goto('http://fleetprof.test/#/flame?service=bench', { waitUntil: 'domcontentloaded' });
    await page.waitForFunction(() => document.body.dataset.ready === '1' && performance.getEntriesByName('fp-painted').length, { timeout: 60000 });
    const t = await page.evaluate(async () => {
      // the data has arrived when the last API response of the view has (the view waits for all)
      const api = performance.getEntriesByType('resource').filter((e) => e.name.includes('/api/v1/'));
      const end = Math.max(...api.map((e) => e.responseEnd));
      const text = await (await fetch(api.find((e) => e.name.includes('view=tree')).name)).text();
      const t0 = performance.now();
      JSON.parse(text);
      return { render: performance.getEntriesByName('fp-rendered')[0].startTime - end,
        paint: performance.getEntriesByName('fp-painted')[0].startTime - end, drawn: window.fpFlame.vis.k.length,
        parse: performance.now() - t0, prep: window.fpFlame.prepMs, draw: window.fpFlame.renderMs };
    });
    // click-to-zoom on three frames of different sizes (a wide one, a middle one, a small one)
    const box = await (await page.$('.flame-canvas')).boundingBox();
    const zooms = [];
    for (const pick of [0.5, 0.9, 0.99]) {
      const fs = await page.evaluate(() => window.fpFlame.frames().filter((f) => f.y > 0));
      fs.sort((a, b) => b.w - a.w);
      const f = fs[Math.min(fs.length - 1, Math.floor(fs.length * pick * 0.2))];
      await page.mouse.click(box.x + f.x + Math.min(f.w / 2, 5), box.y + f.y + f.h / 2);
      zooms.push(await page.evaluate(() => window.fpFlame.zoomMs));
      await page.click('.flame-panel .controls button:nth-of-type(2)'); // reset zoom
    }
    t.zoom = Math.max(...zooms);
    out.push(t);
    await page.close();
  }
  const med = (k) => { const v = out.map((x) => x[k]).sort((a, b) => a - b); return v[Math.floor(v.length / 2)]; };
  const max = (k) => Math.max(...out.map((x) => x[k]));
  const min = (k) => Math.min(...out.map((x) => x[k]));
  return { n, parse: med('parse'), prep: med('prep'), render: med('render'), renderMin: min('render'), renderMax: max('render'), paint: med('paint'), paintMax: max('paint'), draw: med('draw'), zoom: med('zoom'), zoomMin: min('zoom'), zoomMax: max('zoom'), drawn: out[0].drawn, bytes: tree.length };
}

const { browser, close } = await launch();
try {
  const base = await measure(browser, 1000);
  const big = await measure(browser, 10000);
  for (const m of [base, big])
    console.log(`nodes ${String(m.n).padStart(6)} (${m.drawn} drawn, JSON ${(m.bytes / 1024).toFixed(0)} KiB): render after data ${m.render.toFixed(1)} ms (min ${m.renderMin.toFixed(1)}, max ${m.renderMax.toFixed(1)}), to next frame ${m.paint.toFixed(1)} ms (max ${m.paintMax.toFixed(1)}), of which JSON.parse ${m.parse.toFixed(1)}, flatten ${m.prep.toFixed(1)}, draw ${m.draw.toFixed(1)} ms; click-to-zoom ${m.zoom.toFixed(1)} ms (min ${m.zoomMin.toFixed(1)}, max ${m.zoomMax.toFixed(1)})`);
  console.log(`ratio 10k/1k: render ${(big.render / base.render).toFixed(2)}, zoom ${(big.zoom / base.zoom).toFixed(2)}`);
  let raw = 0, gz = 0;
  const parts = [];
  for (const f of readdirSync(dist).filter((x) => x !== 'LICENSES.txt')) {
    const b = readFileSync(join(dist, f));
    const g = gzipSync(b, { level: 9 }).length;
    raw += b.length; gz += g;
    parts.push(`${f} ${(b.length / 1024).toFixed(1)}/${(g / 1024).toFixed(1)}`);
  }
  console.log(`page weight of /: ${(gz / 1024).toFixed(1)} KiB gzipped, ${(raw / 1024).toFixed(1)} KiB raw (KiB raw/gzip: ${parts.join(', ')}); plus the API's JSON`);
  // medians against the targets; the machine's load is printed because a shared machine's
  // load inflates every wall-clock figure here (the minimum is the least disturbed round)
  const fail = big.render > 300 || big.zoom > 50;
  console.log(`${fail ? 'OVER TARGET' : 'within target'} (medians: render < 300 ms, zoom < 50 ms); load average ${(await import('node:os')).loadavg().map((x) => x.toFixed(1)).join(' ')} on ${(await import('node:os')).cpus().length} CPUs`);
  process.exitCode = fail ? 1 : 0;
} finally {
  await close();
}
