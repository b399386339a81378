'use strict';
// A single-threaded CPU workload with distinct JavaScript functions, for comparing the
// agent's JS frames with node --cpu-prof's profile (tests/test-agent-node.c). argv[2]: rounds
// of all eight (a fixed amount of work: the same profile however loaded the machine is).
function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
function sieve(n) {
  const a = new Uint8Array(n + 1);
  let c = 0;
  for (let i = 2; i <= n; i++) {
    if (a[i]) continue;
    c++;
    for (let j = i * i; j <= n; j += i) a[j] = 1;
  }
  return c;
}
function matmul(n) {
  const a = new Float64Array(n * n), b = new Float64Array(n * n), c = new Float64Array(n * n);
  for (let i = 0; i < n * n; i++) { a[i] = i % 7; b[i] = i % 5; }
  for (let i = 0; i < n; i++)
    for (let k = 0; k < n; k++) {
      const x = a[i * n + k];
      for (let j = 0; j < n; j++) c[i * n + j] += x * b[k * n + j];
    }
  return c[n + 1];
}
function hashStr(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return h >>> 0;
}
function hashMany(n) { let x = 0; for (let i = 0; i < n; i++) x ^= hashStr('key-' + i + '-value'); return x; }
function collatz(n) { let m = 0; for (let i = 1; i < n; i++) { let x = i, s = 0; while (x !== 1) { x = x & 1 ? 3 * x + 1 : x / 2; s++; } if (s > m) m = s; } return m; }
function sortNums(n) { const a = []; for (let i = 0; i < n; i++) a.push((i * 2654435761) % 1000003); a.sort((x, y) => x - y); return a[n >> 1]; }
function jsonRound(n) { const o = []; for (let i = 0; i < n; i++) o.push({ id: i, name: 'n' + i }); return JSON.parse(JSON.stringify(o)).length; }
function regexCount(n) { const s = 'ab12cd34ef56'.repeat(n); return (s.match(/[a-z]+\d+/g) || []).length; }
const work = [[fib, 24], [sieve, 300000], [matmul, 60], [hashMany, 20000], [collatz, 30000],
              [sortNums, 20000], [jsonRound, 3000], [regexCount, 3000]];
const rounds = +process.argv[2] || 100;
let acc = 0;
for (let r = 0; r < rounds; r++)
  for (const [f, a] of work) acc += f(a) & 1;
console.log('done ' + acc);
