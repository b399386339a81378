// The flame graph's search patterns (issue 28): the browser's RegExp backtracks, so a link whose
// hash carries search=/(a+)+$/ froze the tab on a long name. Here a /regex/ is compiled to a
// Thompson NFA and run as a Pike VM without captures: time O(program size x name length), the
// program at most MAX_PROG instructions (counted repetitions expanded; larger is refused), the
// source at most MAX_SRC characters, and one compiled pattern does at most MAX_WORK steps over
// all the names it tests (then test throws: a search over thousands of long names stays well
// under a second). Case-insensitive, unanchored like RegExp.test.
//
// Syntax (a subset of JavaScript's; anything else throws): literals, escapes (\d \w \s \D \W \S,
// \t \n \r \xHH \uHHHH, any other escaped punctuation), ., [classes] with ranges and ^, groups
// (...) and (?:...), |, * + ? {m} {m,} {m,n} (a lazy ? after them is accepted: it does not
// change what matches), ^ and $. No back-references, look-arounds or word boundaries.

export const MAX_SRC = 4096; // a function's name, escaped, fits (the UI's "highlight" link)
export const MAX_PROG = 5000;
export const MAX_WORK = 2e6;

const ESC = { t: '\t', n: '\n', r: '\r', f: '\f', v: '\v', 0: '\0' };
const isDigit = (c) => c >= '0' && c <= '9';
const isWord = (c) => isDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c === '_';
const isSpace = (c) => /\s/.test(c); // one character: linear
const CLASSES = { d: isDigit, w: isWord, s: isSpace };

// Parser: source -> tree of {t: 'ch', f} | {t: 'bol'} | {t: 'eol'} | {t: 'cat', a} |
// {t: 'alt', a} | {t: 'rep', x, min, max}.
function parse(src) {
  let i = 0;
  const fail = (why) => { throw new Error(`${why} at ${i}`); };
  const peek = () => src[i];
  const hexAt = (n) => {
    const h = src.slice(i, i + n);
    if (h.length !== n || !/^[0-9a-fA-F]+$/.test(h)) fail('bad hex escape');
    i += n;
    return String.fromCharCode(parseInt(h, 16));
  };
  // after a backslash: a predicate for a class escape, or the character it stands for
  const escape = () => {
    const c = src[i++];
    if (c === undefined) fail('trailing backslash');
    const cls = CLASSES[c.toLowerCase()];
    if (cls) return c === c.toLowerCase() ? cls : (x) => !cls(x);
    if (c in ESC) return ESC[c];
    if (c === 'x') return hexAt(2);
    if (c === 'u') return hexAt(4);
    if (isWord(c)) fail(`unsupported escape \\${c}`); // \b, back-references, \k, ...
    return c;
  };
  const lit = (ch) => { const l = ch.toLowerCase(); return (x) => x.toLowerCase() === l; };
  const klass = () => {
    const neg = peek() === '^';
    if (neg) i++;
    const items = [];
    while (peek() !== ']') {
      if (i >= src.length) fail('unterminated [');
      let a = src[i++];
      if (a === '\\') a = escape();
      if (typeof a === 'string' && peek() === '-' && src[i + 1] !== ']' && src[i + 1] !== undefined) {
        i++;
        let b = src[i++];
        if (b === '\\') b = escape();
        if (typeof b !== 'string' || b < a) fail('bad range');
        const lo = a, hi = b;
        items.push((x) => x >= lo && x <= hi);
      } else {
        items.push(typeof a === 'string' ? ((ch) => (x) => x === ch)(a) : a);
      }
    }
    i++;
    const one = (x) => items.some((f) => f(x));
    const any = (x) => one(x) || one(x.toLowerCase()) || one(x.toUpperCase());
    return neg ? (x) => !any(x) : any;
  };
  const atom = () => {
    const c = src[i++];
    if (c === '(') {
      if (peek() === '?') {
        if (src[i + 1] !== ':') fail('unsupported group (?');
        i += 2;
      }
      const x = alt();
      if (src[i++] !== ')') fail('missing )');
      return x;
    }
    if (c === '[') return { t: 'ch', f: klass() };
    if (c === '.') return { t: 'ch', f: (x) => x !== '\n' && x !== '\r' };
    if (c === '^') return { t: 'bol' };
    if (c === '$') return { t: 'eol' };
    if (c === '*' || c === '+' || c === '?') fail('nothing to repeat');
    if (c === '\\') {
      const e = escape();
      return { t: 'ch', f: typeof e === 'string' ? lit(e) : e };
    }
    return { t: 'ch', f: lit(c) };
  };
  const rep = () => {
    let x = atom();
    const q = /^(?:[*+?]|\{(\d{1,4})(,(\d{0,4}))?\})/.exec(src.slice(i, i + 12));
    if (!q) return x;
    i += q[0].length;
    if (peek() === '?') i++; // lazy: same set of matches
    const min = q[0] === '+' ? 1 : q[1] !== undefined ? +q[1] : 0;
    const max = q[0] === '?' ? 1 : q[1] === undefined || q[3] === '' ? Infinity
      : q[2] === undefined ? min : +q[3];
    if (max < min) fail('bad repetition');
    if (/^(?:[*+?]|\{\d)/.test(src.slice(i, i + 2))) fail('nothing to repeat');
    return { t: 'rep', x, min, max };
  };
  const seq = () => {
    const a = [];
    while (i < src.length && peek() !== '|' && peek() !== ')') a.push(rep());
    return { t: 'cat', a };
  };
  const alt = () => {
    const a = [seq()];
    while (peek() === '|') { i++; a.push(seq()); }
    return a.length === 1 ? a[0] : { t: 'alt', a };
  };
  const tree = alt();
  if (i < src.length) fail('unmatched )');
  return tree;
}

// Compiler: tree -> instructions {op: 'char', f} | {op: 'split', x, y} | {op: 'jmp', x} |
// {op: 'bol'} | {op: 'eol'} | {op: 'match'}; control falls through to the next instruction.
function compileTree(tree) {
  const prog = [];
  const push = (ins) => {
    if (prog.length >= MAX_PROG) throw new Error(`pattern too large (over ${MAX_PROG} states)`);
    prog.push(ins);
    return ins;
  };
  const emit = (n) => {
    if (n.t === 'ch') push({ op: 'char', f: n.f });
    else if (n.t === 'bol' || n.t === 'eol') push({ op: n.t });
    else if (n.t === 'cat') n.a.forEach(emit);
    else if (n.t === 'alt') {
      const jumps = [];
      n.a.forEach((b, k) => {
        if (k === n.a.length - 1) { emit(b); return; }
        const s = push({ op: 'split', x: prog.length + 1, y: 0 });
        emit(b);
        jumps.push(push({ op: 'jmp', x: 0 }));
        s.y = prog.length;
      });
      jumps.forEach((j) => { j.x = prog.length; });
    } else { // rep: min copies, then max - min optional ones, or a loop
      for (let k = 0; k < n.min; k++) emit(n.x);
      if (n.max === Infinity) {
        const at = prog.length;
        const s = push({ op: 'split', x: at + 1, y: 0 });
        emit(n.x);
        push({ op: 'jmp', x: at });
        s.y = prog.length;
      } else {
        for (let k = n.min; k < n.max; k++) {
          const s = push({ op: 'split', x: prog.length + 1, y: 0 });
          emit(n.x);
          s.y = prog.length;
        }
      }
    }
  };
  emit(tree);
  push({ op: 'match' });
  return prog;
}

// Compiles src (without the slashes); throws an Error saying what is refused. The result's
// test(s) is true when the pattern matches somewhere in s; it throws once the pattern's work
// budget is spent.
export function compile(src) {
  if (src.length > MAX_SRC) throw new Error(`pattern longer than ${MAX_SRC} characters`);
  const prog = compileTree(parse(src));
  const n = prog.length, OPS = { char: 0, split: 1, jmp: 2, bol: 3, eol: 4, match: 5 };
  const op = Int8Array.from(prog, (ins) => OPS[ins.op]);
  const x = Int32Array.from(prog, (ins) => ins.x || 0), y = Int32Array.from(prog, (ins) => ins.y || 0);
  const f = prog.map((ins) => ins.f);
  const mark = new Uint32Array(n), stack = new Int32Array(n);
  let cur = new Int32Array(n), next = new Int32Array(n);
  let stamp = 0, work = 0, matched = false;
  // adds the thread at pc (following jumps, splits and anchors) at position i of a subject of
  // length len to list (count nl); returns the new count. Each pc at most once per position.
  const add = (list, nl, pc, i, len) => {
    let sp = 0;
    if (mark[pc] !== stamp) { mark[pc] = stamp; stack[sp++] = pc; }
    while (sp) {
      const p = stack[--sp];
      if (++work > MAX_WORK) throw new Error('search too costly: simplify the pattern');
      let t1 = -1, t2 = -1;
      switch (op[p]) {
        case 0: list[nl++] = p; break;
        case 1: t1 = y[p]; t2 = x[p]; break;
        case 2: t1 = x[p]; break;
        case 3: if (i === 0) t1 = p + 1; break;
        case 4: if (i === len) t1 = p + 1; break;
        default: matched = true;
      }
      if (t1 >= 0 && mark[t1] !== stamp) { mark[t1] = stamp; stack[sp++] = t1; }
      if (t2 >= 0 && mark[t2] !== stamp) { mark[t2] = stamp; stack[sp++] = t2; }
    }
    return nl;
  };
  return {
    test(s) {
      const len = s.length;
      matched = false;
      stamp++;
      let nc = add(cur, 0, 0, 0, len);
      for (let i = 0; !matched && i < len; i++) {
        stamp++;
        let nn = 0;
        const c = s[i];
        for (let k = 0; k < nc; k++) if (f[cur[k]](c)) nn = add(next, nn, cur[k] + 1, i + 1, len);
        nn = add(next, nn, 0, i + 1, len); // unanchored: a match may start at every position
        [cur, next] = [next, cur];
        nc = nn;
      }
      return matched;
    },
  };
}
