'use strict';
// Self shares per function of a node --cpu-prof profile (.cpuprofile JSON: nodes with
// callFrame and id, samples = the leaf node id of each sample, timeDeltas = the time before
// each sample): one line per function, "PERCENT<TAB>NAME<TAB>URL<TAB>LINE" (line 1-based),
// largest first. A sample's weight is the next sample's time delta (the time until the
// next sample, as DevTools computes self time); the total is every sample's.
// usage: node cpuprof-shares.js FILE.cpuprofile
const fs = require('fs');
const p = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const byId = new Map();
for (const n of p.nodes) byId.set(n.id, n.callFrame);
const self = new Map();
let total = 0;
for (let i = 0; i < p.samples.length; i++) {
  const w = i + 1 < p.timeDeltas.length ? p.timeDeltas[i + 1] : 0;
  const cf = byId.get(p.samples[i]);
  if (!cf) throw new Error('sample ' + i + ': no node ' + p.samples[i]);
  const url = cf.url.replace(/^file:\/\//, '');
  const key = (cf.functionName || '(anonymous)') + '\t' + url + '\t' + (cf.lineNumber + 1);
  self.set(key, (self.get(key) || 0) + w);
  total += w;
}
if (!total) throw new Error('no samples');
const rows = [...self].sort((a, b) => b[1] - a[1]);
for (const [k, w] of rows) console.log((100 * w / total).toFixed(3) + '\t' + k);
