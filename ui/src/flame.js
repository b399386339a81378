// Flame graph on a <canvas>: our own renderer rather than an SVG/DOM library (d3-flame-graph
// and the like create one DOM node per frame, which is what makes them slow past a few thousand
// frames). Here a frame is one fillRect (+ one fillText when it is wide enough); the tree is
// flattened once in depth-first order so a subtree is a contiguous index range, frames narrower
// than a third of a pixel are skipped with their whole subtree, and labels are truncated by
// arithmetic on a monospace font (no measureText per frame).
//
// Modes: icicle (root on top) or flame (root at the bottom). Normal colouring: a warm hue from
// the function's name; search: matches magenta, the rest grey. Diff colouring (setDiff):
// diverging red (slower) / blue (faster), ColorBrewer RdBu (colour-blind safe); saturated only
// for functions the diff found significant, a pale tint otherwise.

const ROW = 18;
const FONT = '11px ui-monospace, "DejaVu Sans Mono", monospace';

function hash(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return h >>> 0;
}

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
    let n = 0;
    const count = (x) => { n++; for (const c of x.children || []) count(c); };
    count(root);
    this.n = n;
    this.unit = unit;
    this.name = new Array(n);
    this.module = new Array(n);
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
    let i = 0, maxDepth = 0;
    // iterative DFS (deep stacks must not overflow the JS stack)
    const stack = [[root, -1, 0, 0]];
    while (stack.length) {
      const [node, par, d, x] = stack.pop();
      const k = i++;
      this.name[k] = node.name;
      this.module[k] = node.module || '';
      this.total[k] = node.total;
      this.self[k] = node.self;
      this.samples[k] = node.samples || 0;
      this.x[k] = x;
      this.depth[k] = d;
      this.parent[k] = par;
      if (isDiff) { this.base[k] = node.base; this.test[k] = node.test; }
      if (d > maxDepth) maxDepth = d;
      const kids = node.children || [];
      let cx = x;
      const offs = new Array(kids.length);
      for (let c = 0; c < kids.length; c++) { offs[c] = cx; cx += kids[c].total; }
      for (let c = kids.length - 1; c >= 0; c--) stack.push([kids[c], k, d + 1, offs[c]]);
    }
    // end of each subtree: preorder, so end[k] = next index whose depth <= depth[k]
    const open = [];
    for (let k = 0; k < n; k++) {
      while (open.length && this.depth[open[open.length - 1]] >= this.depth[k]) this.end[open.pop()] = k;
      open.push(k);
    }
    while (open.length) this.end[open.pop()] = n;
    this.maxDepth = maxDepth;
    for (let k = 0; k < n; k++) {
      const h = hash(this.name[k]);
      this.color[k] = `hsl(${h % 45 + 5},${70 + (h >> 8) % 20}%,${55 + (h >> 16) % 12}%)`;
    }
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
    let re;
    try {
      re = s.length > 2 && s.startsWith('/') && s.endsWith('/') ? new RegExp(s.slice(1, -1), 'i')
        : new RegExp(s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'i');
    } catch (e) { return null; }
    this.search = s;
    this.match = new Uint8Array(this.n);
    let frames = 0, value = 0;
    for (let k = 0; k < this.n; k++) {
      if (!re.test(this.name[k])) continue;
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
    const draw = (k, px, pw, y) => {
      let fill = this.color[k];
      if (this.match) fill = this.match[k] ? '#c51b7d' : '#d9d9d9';
      ctx.fillStyle = fill;
      ctx.fillRect(px, y, Math.max(pw - 0.5, 0.5), ROW - 1);
      vis.k.push(k); vis.x.push(px); vis.y.push(y); vis.w.push(pw);
      if (pw > cw * 3 + 6) {
        const max = Math.floor((pw - 6) / cw);
        const nm = this.name[k];
        ctx.fillStyle = this.match && this.match[k] ? '#fff' : '#111';
        ctx.fillText(nm.length > max ? nm.slice(0, max - 1) + '…' : nm, px + 3, y + ROW / 2);
      }
    };
    // ancestors of the zoomed frame: full width, dimmed by their colour only
    for (const a of this.ancestors(z)) if (a !== z) draw(a, 0, W, rowY(this.depth[a]));
    for (let k = z; k < this.end[z];) {
      const pw = this.total[k] * scale;
      if (pw < 0.33) { k = this.end[k]; continue; } // too thin: skip the subtree
      draw(k, (this.x[k] - x0) * scale, pw, rowY(this.depth[k]));
      k++;
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
    const k = this.hit(e);
    if (k < 0) return;
    if (e.shiftKey) { if (this.opts.onSelect) this.opts.onSelect(this.name[k]); return; }
    this.zoomTo(k);
    const t0 = performance.now();
    this.render();
    this.zoomMs = performance.now() - t0;
    if (this.opts.onZoom) this.opts.onZoom(this.pathOf(k), k);
  }

  // For tests and benchmarks: the frames drawn, in CSS pixels relative to the canvas.
  frames() {
    const v = this.vis, out = [];
    if (!v) return out;
    for (let i = 0; i < v.k.length; i++) {
      const k = v.k[i];
      out.push({ name: this.name[k], x: v.x[i], y: v.y[i], w: v.w[i], h: ROW, fill: this.match ? (this.match[k] ? 'match' : 'dim') : this.color[k],
        match: !!(this.match && this.match[k]), saturated: !!(this.diff && this.diff.get(this.name[k])),
        base: this.base ? this.base[k] : null, test: this.test ? this.test[k] : null, total: this.total[k] });
    }
    return out;
  }
}
