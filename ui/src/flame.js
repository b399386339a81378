// Flame graph on a <canvas>: our own renderer rather than an SVG/DOM library (d3-flame-graph
// and the like create one DOM node per frame, which is what makes them slow past a few thousand
// frames). Here a frame is one fillRect (+ one fillText when it is wide enough); the tree is
// flattened once in depth-first order so a subtree is a contiguous index range, frames narrower
// than a third of a pixel are skipped with their whole subtree, and labels are truncated by
// arithmetic on a monospace font (no measureText per frame).
//
// Modes: icicle (root on top) or flame (root at the bottom). Normal colouring: by the frame's
// kind (the API's "kind": native, kernel, Python, JavaScript, Java), a hue family per kind and a
// shade from the function's name; search: matches magenta, the rest grey. Diff colouring (setDiff):
// diverging red (slower) / blue (faster), ColorBrewer RdBu (colour-blind safe); saturated only
// for functions the diff found significant, a pale tint otherwise.

import { compile } from './search.js';

const ROW = 18;
const FONT = '11px ui-monospace, "DejaVu Sans Mono", monospace';

// FNV-1a over at most ~24 characters spread over the name (a colour needs no more)
function hash(s) {
  let h = 2166136261 ^ s.length;
  const step = s.length > 24 ? Math.ceil(s.length / 24) : 1;
  for (let i = s.length - 1; i >= 0; i -= step) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return h >>> 0;
}

function hslHex(h, s, l) {
  const a = s * Math.min(l, 1 - l);
  const f = (n) => {
    const k = (n + h / 30) % 12;
    const v = l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1));
    return Math.round(v * 255).toString(16).padStart(2, '0');
  };
  return '#' + f(0) + f(8) + f(4);
}

// A hue family per kind of code (64 shades each, picked by a hash of the function's name):
// native warm (hue 5-50, as flamegraph.pl), kernel purple, Python blue, JavaScript teal, Java
// green; no two families share a hue, and none is the search's magenta.
export const KINDS = [
  ['native', 'native', 5, 45], ['kernel', 'kernel', 265, 25], ['python', 'Python', 205, 25],
  ['js', 'JavaScript', 165, 20], ['java', 'Java', 95, 35],
];
const PALETTES = Object.fromEntries(KINDS.map(([kind, , h0, span]) => [kind, Array.from({ length: 64 },
  (_, i) => hslHex(h0 + (i * 37) % span, 0.6 + ((i * 7) % 20) / 100, 0.55 + ((i * 5) % 12) / 100))]));
// The legend's swatch of a kind.
export function kindSwatch(kind) { return (PALETTES[kind] || PALETTES.native)[0]; }

// RdBu end points and the neutral grey
const RED = [178, 24, 43], BLUE = [33, 102, 172], NEUTRAL = [224, 224, 224];
function mix(a, b, t) {
  return `rgb(${Math.round(a[0] + (b[0] - a[0]) * t)},${Math.round(a[1] + (b[1] - a[1]) * t)},${Math.round(a[2] + (b[2] - a[2]) * t)})`;
}

export class FlameGraph {
  constructor(el, opts = {}) {
    this.el = el;
    this.opts = opts;
    this.canvas = document.createElement('canvas');
    this.canvas.className = 'flame-canvas';
    this.tip = document.createElement('div');
    this.tip.className = 'flame-tip';
    this.tip.hidden = true;
    el.append(this.canvas, this.tip);
    this.ctx = this.canvas.getContext('2d', { alpha: false });
    this.mode = 'icicle';
    this.zoom = 0;
    this.search = null;
    this.diff = null;
    this.n = 0;
    this.canvas.addEventListener('mousemove', (e) => this.onMove(e));
    this.canvas.addEventListener('mouseleave', () => { this.tip.hidden = true; });
    this.canvas.addEventListener('click', (e) => this.onClick(e));
    this.ro = new ResizeObserver(() => { if (this.n && this.canvas.clientWidth !== this.lastW) this.render(); });
    this.ro.observe(el);
  }

  // root: the API's tree node {name, module, total, self, samples, children}. unit: the
  // event type's unit. Values may be replaced by diff rates through setDiff afterwards.
  setData(root, unit) {
    const t0 = performance.now();
    // no allocation per node beyond the result arrays: this runs cold (unoptimised) on each
    // new profile, where garbage and closures cost the most
    let n = 0;
    const objs = [root];
    while (objs.length) {
      const x = objs.pop();
      n++;
      const kids = x.children;
      if (kids) for (let c = 0; c < kids.length; c++) objs.push(kids[c]);
    }
    this.n = n;
    this.unit = unit;
    this.name = new Array(n);
    this.module = new Array(n);
    this.kind = new Array(n);
    this.total = new Float64Array(n);
    this.self = new Float64Array(n);
    this.samples = new Float64Array(n);
    this.x = new Float64Array(n);
    this.depth = new Uint16Array(n);
    this.parent = new Int32Array(n);
    this.end = new Int32Array(n);
    this.color = new Array(n);
    this.base = null;
    this.test = null;
    const isDiff = root.base !== undefined;
    if (isDiff) { this.base = new Float64Array(n); this.test = new Float64Array(n); }
    let maxDepth = 0;
    // iterative preorder DFS (deep stacks must not overflow the JS stack); parallel stacks
    const sPar = new Int32Array(n), sDepth = new Uint16Array(n), sX = new Float64Array(n);
    objs.push(root);
    sPar[0] = -1; sDepth[0] = 0; sX[0] = 0;
    let sp = 1, k = 0;
    while (sp) {
      sp--;
      const node = objs.pop(), par = sPar[sp], d = sDepth[sp], x = sX[sp];
      this.name[k] = node.name;
      this.module[k] = node.module || '';
      this.kind[k] = PALETTES[node.kind] ? node.kind : 'native';
      this.total[k] = node.total;
      this.self[k] = node.self;
      this.samples[k] = node.samples || 0;
      this.x[k] = x;
      this.depth[k] = d;
      this.parent[k] = par;
      if (isDiff) { this.base[k] = node.base; this.test[k] = node.test; }
      if (d > maxDepth) maxDepth = d;
      const kids = node.children;
      if (kids && kids.length) {
        let sum = 0;
        for (let c = 0; c < kids.length; c++) sum += kids[c].total;
        // pushed last to first so that the first child is visited first; its x = x + the
        // totals of the siblings before it
        let after = 0;
        for (let c = kids.length - 1; c >= 0; c--) {
          after += kids[c].total;
          objs.push(kids[c]);
          sPar[sp] = k; sDepth[sp] = d + 1; sX[sp] = x + (sum - after);
          sp++;
        }
      }
      k++;
    }
    // end of each subtree: preorder, so end[k] = the next index whose depth <= depth[k]
    const open = new Int32Array(maxDepth + 2);
    let top = 0;
    for (let k = 0; k < n; k++) {
      while (top && this.depth[open[top - 1]] >= this.depth[k]) this.end[open[--top]] = k;
      open[top++] = k;
    }
    while (top) this.end[open[--top]] = n;
    this.maxDepth = maxDepth;
    // colours are computed when a frame is first drawn (render), not for all frames here
    this.zoom = 0;
    this.diff = null;
    this.prepMs = performance.now() - t0;
  }

  // Diff colouring, after setData of a merged tree whose nodes carry base and test rates;
  // sig: Map function name -> +1 (significant regression) / -1 (improvement).
  setDiff(sig) {
    const base = this.base, test = this.test;
    this.diff = sig;
    for (let k = 0; k < this.n; k++) {
      const b = base[k], t = test[k];
      const rel = (t - b) / Math.max(b, t, 1e-300);
      const s = sig.get(this.name[k]);
      if (s) {
        this.color[k] = s > 0 ? `rgb(${RED})` : `rgb(${BLUE})`;
      } else {
        // a pale tint: at most 30% of the way from grey, by the relative change
        const amt = Math.min(Math.abs(rel), 1) * 0.3;
        this.color[k] = mix(NEUTRAL, rel > 0 ? RED : BLUE, amt);
      }
    }
  }

  setMode(m) { this.mode = m === 'flame' ? 'flame' : 'icicle'; }

  // Search by substring (case-insensitive) or /regex/. Returns {frames, share, value}.
  setSearch(s) {
    this.search = null;
    this.match = null;
    if (!s) return null;
    let re; // never the browser's RegExp: a crafted link must not freeze the tab (search.js)
    try {
      const low = s.toLowerCase();
      re = s.length > 2 && s.startsWith('/') && s.endsWith('/') ? compile(s.slice(1, -1))
        : { test: (name) => name.toLowerCase().includes(low) };
    } catch (e) { return null; }
    this.search = s;
    this.match = new Uint8Array(this.n);
    let frames = 0, value = 0;
    for (let k = 0; k < this.n; k++) {
      let hit;
      try { hit = re.test(this.name[k]); } catch (e) { this.search = this.match = null; return null; }
      if (!hit) continue;
      this.match[k] = 1;
      frames++;
      // count a match once: not when an ancestor already matched
      let p = this.parent[k], under = false;
      while (p >= 0) { if (this.match[p]) { under = true; break; } p = this.parent[p]; }
      if (!under) value += this.total[k];
    }
    this.searchResult = { frames, value, share: this.total[0] ? value / this.total[0] : 0 };
    return this.searchResult;
  }

  zoomTo(k) { this.zoom = k >= 0 && k < this.n ? k : 0; }

  // path: names from the root's first child down; returns the node reached
  zoomToPath(names) {
    let k = 0;
    for (const nm of names) {
      let found = -1;
      for (let c = k + 1; c < this.end[k]; c = this.end[c]) if (this.name[c] === nm) { found = c; break; }
      if (found < 0) break;
      k = found;
    }
    this.zoom = k;
    return k;
  }

  pathOf(k) {
    const p = [];
    for (; k > 0; k = this.parent[k]) p.push(this.name[k]);
    return p.reverse();
  }

  ancestors(k) {
    const a = [];
    for (let p = k; p >= 0; p = this.parent[p]) a.push(p);
    return a.reverse();
  }

  render() {
    const t0 = performance.now();
    const z = this.zoom, cv = this.canvas, ctx = this.ctx;
    const dpr = window.devicePixelRatio || 1;
    const W = Math.max(100, this.el.clientWidth);
    this.lastW = W;
    // rows: ancestors of the zoomed frame (full width) + the zoomed subtree
    let sub = 0;
    for (let k = z; k < this.end[z]; k++) if (this.depth[k] > sub) sub = this.depth[k];
    const rows = sub + 1;
    const H = rows * ROW;
    if (cv.width !== Math.round(W * dpr) || cv.height !== Math.round(H * dpr)) {
      cv.width = Math.round(W * dpr);
      cv.height = Math.round(H * dpr);
      cv.style.width = W + 'px';
      cv.style.height = H + 'px';
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = '#fff';
    ctx.fillRect(0, 0, W, H);
    ctx.font = FONT;
    ctx.textBaseline = 'middle';
    if (!this.charW) this.charW = ctx.measureText('MMMMMMMMMM').width / 10;
    const cw = this.charW;
    const x0 = this.x[z], scale = this.total[z] > 0 ? W / this.total[z] : 0;
    const vis = this.vis = { k: [], x: [], y: [], w: [] };
    const rowY = (d) => (this.mode === 'flame' ? H - (d + 1) * ROW : d * ROW);
    const add = (k, px, pw) => { vis.k.push(k); vis.x.push(px); vis.y.push(rowY(this.depth[k])); vis.w.push(pw); };
    // ancestors of the zoomed frame: full width
    for (const a of this.ancestors(z)) if (a !== z) add(a, 0, W);
    for (let k = z; k < this.end[z];) {
      const pw = this.total[k] * scale;
      if (pw < 0.33) { k = this.end[k]; continue; } // too thin: skip the subtree
      add(k, (this.x[k] - x0) * scale, pw);
      k++;
    }
    // rectangles grouped by colour: one path and one fill per colour, not per frame
    const groups = new Map();
    for (let i = 0; i < vis.k.length; i++) {
      const k = vis.k[i];
      let fill = this.color[k];
      if (fill === undefined) fill = this.color[k] = PALETTES[this.kind[k]][hash(this.name[k]) & 63];
      if (this.match) fill = this.match[k] ? '#c51b7d' : '#d9d9d9';
      let g = groups.get(fill);
      if (!g) groups.set(fill, (g = []));
      g.push(i);
    }
    for (const [fill, g] of groups) {
      ctx.fillStyle = fill;
      ctx.beginPath();
      for (const i of g) ctx.rect(vis.x[i], vis.y[i], Math.max(vis.w[i] - 0.5, 0.5), ROW - 1);
      ctx.fill();
    }
    // labels where they fit
    const minW = cw * 3 + 6;
    for (let pass = 0; pass < 2; pass++) {
      ctx.fillStyle = pass ? '#fff' : '#111';
      for (let i = 0; i < vis.k.length; i++) {
        const pw = vis.w[i], k = vis.k[i];
        if (pw <= minW || (pass === 1) !== !!(this.match && this.match[k])) continue;
        const max = Math.floor((pw - 6) / cw);
        const nm = this.name[k];
        ctx.fillText(nm.length > max ? nm.slice(0, max - 1) + '…' : nm, vis.x[i] + 3, vis.y[i] + ROW / 2);
      }
    }
    this.renderMs = performance.now() - t0;
    if (this.opts.onRender) this.opts.onRender(this);
    return this.renderMs;
  }

  hit(e) {
    const r = this.canvas.getBoundingClientRect();
    const mx = e.clientX - r.left, my = e.clientY - r.top;
    const v = this.vis;
    if (!v) return -1;
    for (let i = v.k.length - 1; i >= 0; i--)
      if (my >= v.y[i] && my < v.y[i] + ROW && mx >= v.x[i] && mx < v.x[i] + v.w[i]) return v.k[i];
    return -1;
  }

  describe(k) {
    const u = this.unit, root = this.total[0] || 1;
    const lines = [[this.name[k] + (this.module[k] ? `  (${this.module[k]})` : '')]];
    if (this.diff) {
      const b = this.base[k], t = this.test[k];
      const f = this.opts.fmtRate || ((v) => v.toFixed(2));
      lines.push(['base', f(b)], ['test', f(t)],
        ['change', b > 0 ? `${((t - b) / b * 100).toFixed(1)}%` : t > 0 ? 'new' : '-']);
      const s = this.diff.get(this.name[k]);
      lines.push(['significant', s ? (s > 0 ? 'yes: slower' : 'yes: faster') : 'no']);
    } else {
      const fv = this.opts.fmtValue || ((v) => String(v));
      lines.push(['total', `${fv(this.total[k], u)} (${(this.total[k] / root * 100).toFixed(2)}%)`],
        ['self', `${fv(this.self[k], u)} (${(this.self[k] / root * 100).toFixed(2)}%)`],
        ['samples', String(Math.round(this.samples[k]))]);
    }
    return lines;
  }

  onMove(e) {
    const k = this.hit(e);
    if (k < 0) { this.tip.hidden = true; this.canvas.style.cursor = ''; return; }
    this.canvas.style.cursor = 'pointer';
    const tip = this.tip;
    tip.replaceChildren();
    for (const l of this.describe(k)) {
      const d = document.createElement('div');
      if (l.length === 1) { d.className = 'tip-name'; d.textContent = l[0]; }
      else { const b = document.createElement('b'); b.textContent = l[0] + ' '; d.append(b, l[1]); }
      tip.append(d);
    }
    const hint = document.createElement('div');
    hint.className = 'tip-hint';
    hint.textContent = 'click: zoom · shift-click: callers/callees';
    tip.append(hint);
    tip.hidden = false;
    const r = this.el.getBoundingClientRect();
    let left = e.clientX - r.left + 14, top = e.clientY - r.top + 14;
    if (left + tip.offsetWidth > r.width) left = Math.max(0, e.clientX - r.left - tip.offsetWidth - 10);
    tip.style.left = left + 'px';
    tip.style.top = top + 'px';
  }

  onClick(e) {
    const t0 = performance.now();
    const k = this.hit(e);
    if (k < 0) return;
    if (e.shiftKey) { if (this.opts.onSelect) this.opts.onSelect(this.name[k]); return; }
    this.zoomTo(k);
    this.render();
    if (this.opts.onZoom) this.opts.onZoom(this.pathOf(k), k);
    this.zoomMs = performance.now() - t0; // hit test + redraw + breadcrumb and URL
  }

  // The kinds of code in the graph, in KINDS order (the legend lists them).
  kinds() {
    const seen = new Set(this.kind ? this.kind.slice(0, this.n) : []);
    return KINDS.filter(([kind]) => seen.has(kind));
  }

  // For tests and benchmarks: the frames drawn, in CSS pixels relative to the canvas.
  frames() {
    const v = this.vis, out = [];
    if (!v) return out;
    for (let i = 0; i < v.k.length; i++) {
      const k = v.k[i];
      out.push({ name: this.name[k], kind: this.kind[k], x: v.x[i], y: v.y[i], w: v.w[i], h: ROW, fill: this.match ? (this.match[k] ? 'match' : 'dim') : this.color[k],
        match: !!(this.match && this.match[k]), saturated: !!(this.diff && this.diff.get(this.name[k])),
        base: this.base ? this.base[k] : null, test: this.test ? this.test[k] : null, total: this.total[k] });
    }
    return out;
  }
}
