// The flame graph's search (ui/src/search.js, issue 28): a /regex/ from the URL hash must not
// freeze the tab. The patterns that make the browser's backtracking RegExp run for seconds or
// forever are answered (matched, or refused) over 2,000 names by the real FlameGraph.setSearch;
// on ordinary patterns the answers equal RegExp's (case-insensitive). Each catastrophic case runs
// in a child process with a 5 s deadline, so the old code fails (killed) instead of hanging the
// test. What is asserted is that the search ends, not how fast: search.js bounds its work by
// MAX_WORK steps (milliseconds on a quiet machine, printed), RegExp does not end at all here.
import { spawnSync } from 'node:child_process';
import { FlameGraph } from '../../ui/src/flame.js';
import { compile } from '../../ui/src/search.js';

let failed = 0;
const check = (ok, what) => { if (!ok) { failed++; console.log('FAIL ' + what); } };

// a flame graph's data without its canvas: 2,000 frames under the root
function graph(names) {
  const n = names.length + 1;
  return { n, name: ['root', ...names], parent: Int32Array.from({ length: n }, (_, k) => (k ? 0 : -1)),
    total: Float64Array.from({ length: n }, (_, k) => (k ? 1 : n - 1)) };
}

if (process.argv[2] === 'child') {
  const names = Array.from({ length: 2000 }, (_, k) => 'a'.repeat(30 + (k % 10)) + '!x');
  const fg = graph(names);
  const t0 = performance.now();
  FlameGraph.prototype.setSearch.call(fg, process.argv[3]);
  console.log(JSON.stringify({ ms: performance.now() - t0 }));
  process.exit(0);
}

const evil = ['/(a+)+$/', '/(a|a)*b/', '/(a|aa)+$/', '/(.*a){12}$/', '/((a{1,100}){1,100}){1,100}/',
  '/(a{1,1000}){1,1000}/', '/' + '.*'.repeat(200) + 'z/'];
for (const p of evil) {
  const r = spawnSync(process.execPath, [new URL(import.meta.url).pathname, 'child', p],
    { timeout: 5000, encoding: 'utf8' });
  let ms = Infinity;
  try { ms = JSON.parse(r.stdout).ms; } catch (e) { /* killed at the deadline */ }
  check(ms !== Infinity, `${p}: still running after 5 s`);
  if (ms !== Infinity) console.log(`ok ${p}: answered in ${ms.toFixed(1)} ms`);
}

// the same answers as RegExp(src, 'i') where RegExp is safe
const subjects = ['main', 'libc.so.6!malloc', 'app!Foo::bar<int>(std::vector<int> const&)', 'a_b9',
  'memcpy', 'rec', 'x', '', 'ABC', 'tab\there', 'std::__1::basic_string', '[unknown]'];
const pats = ['malloc', '^main$', 'ma(ll|in)', 'm.*c', '^a.c$', '[a-c]+', '[^a-z]', '\\d', '\\w+!',
  '\\.so\\.6', 'foo::bar', 'b{2}', 'c{1,}', 'a?b', '^$', '(?:std|app)::', 'x|y|z', 'ABC',
  '\\[unknown\\]', '\\t', '[.]', 'vector<int>', '^(m|r)e', 'e$', '[]', '[^]', 's{0,2}t'];
for (const p of pats) {
  const mine = compile(p), re = new RegExp(p, 'i');
  for (const s of subjects)
    check(mine.test(s) === re.test(s), `/${p}/ on '${s}': ${mine.test(s)}, RegExp ${re.test(s)}`);
}
// refused: what it does not support or bound, with a reason
for (const p of ['(a', 'a)', '*a', 'a**', '\\1', '(?=a)', '\\b', 'a'.repeat(5000), '[a']) {
  let why = null;
  try { compile(p); } catch (e) { why = e.message; }
  check(why, `/${p.slice(0, 20)}/ accepted`);
}
// a name searched by the UI's "highlight" link (escaped, anchored) still matches
const long = 'ns::Type<' + 'x'.repeat(1000) + '>::f()';
const esc = '^' + long.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + '$';
check(compile(esc).test(long) && !compile(esc).test(long + 'x'), 'escaped long name');
console.log(failed ? `${failed} failed` : 'all passed');
process.exit(failed ? 1 : 0);
