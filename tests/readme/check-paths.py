#!/usr/bin/env python3
"""Every path a README names exists (issue 35: docs that pointed nowhere).

check-paths.py SRC: for each README.md under SRC tracked by git, the `code spans` and
[links](...) that look like repository paths are checked:
  - with a '/' (deploy/k8s/10-aggregator.yaml, src/api.c): must exist relative to the README's
    directory or to the repository root (globs allowed: tests/*.cmake);
  - a bare file name with a source or doc extension (REFERENCE.md, sender.c, hook_*.c): must
    be a file of the repository somewhere; so must a *.md named in plain text;
  - `x.h/.c` names both files; `cm/wire.h` may be under an include directory; a name without
    extension may be the program built from NAME.c (bench/bench-query).
Not paths: URLs, absolute paths (/tmp, /etc, /api/v1/...: the running system's), build
outputs (build/...), names with placeholders (<x>, N, ...), options and commands with spaces.
Prints each dangling reference as README:line: `token`, and exits 1 if there is any."""
import fnmatch
import glob
import os
import re
import subprocess
import sys

EXT = ('.md', '.c', '.h', '.sh', '.py', '.yaml', '.yml', '.cmake', '.txt', '.proto', '.js',
       '.css', '.html', '.example', '.service', '.json', '.cc', '.rs', '.in', '.png')
INCLUDE_DIRS = ('common/include', 'agent/include')
TOP = None  # top-level entries of the repository


def is_candidate(tok):
    if not tok or ' ' in tok or tok.startswith(('/', '-', '$', '~', 'http:', 'https:', '#')):
        return False
    if re.search(r'[<>{}|=()\[\]@,;"\'`]', tok) or '...' in tok:
        return False
    if tok.startswith(('build/', 'build-', './build')):
        return False  # build outputs
    if '/' in tok:
        first = tok.lstrip('./').split('/')[0]
        return first in TOP or tok.startswith('./') or tok.endswith(EXT)
    return tok.endswith(EXT) and not tok.startswith('.')


def exists(tok, readme_dir, root):
    t = re.sub(r':\d+(-\d+)?$', '', tok).rstrip('/')  # file.c:120
    t = t.split('#')[0]
    m = re.match(r'^(.*)\.(\w+)/\.(\w+)$', t)  # profile.h/.c
    if m:
        return all(exists(f'{m.group(1)}.{e}', readme_dir, root) for e in m.group(2, 3))
    bases = [readme_dir, root] + [os.path.join(root, d) for d in INCLUDE_DIRS]
    for base in bases:
        p = os.path.join(base, t)
        if glob.glob(p) or (not os.path.splitext(t)[1] and glob.glob(p + '.c')):
            return True
    return False


def main():
    global TOP
    root = os.path.abspath(sys.argv[1])
    ls = subprocess.run(['git', '-C', root, 'ls-files'], capture_output=True, text=True)
    files = [f for f in ls.stdout.split('\n') if f] if ls.returncode == 0 else []
    if not files:  # not a git checkout (a source tarball): the tree, without build outputs
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith(('build', '.')) and x != 'node_modules']
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
    TOP = {f.split('/')[0] for f in files}
    basenames = {os.path.basename(f) for f in files}
    readmes = [f for f in files if os.path.basename(f) == 'README.md']
    bad = 0
    checked = 0
    for rd in readmes:
        rdir = os.path.join(root, os.path.dirname(rd))
        in_code = False
        with open(os.path.join(root, rd), encoding='utf-8') as fh:
            for no, line in enumerate(fh, 1):
                if line.lstrip().startswith('```'):
                    in_code = not in_code
                    continue
                if in_code:
                    continue  # commands and their output: the readme test runs one section
                toks = re.findall(r'`([^`\n]+)`', line) + re.findall(r'\]\(([^)\s]+)\)', line)
                prose = re.sub(r'`[^`\n]*`|\]\([^)]*\)', ' ', line)
                toks += re.findall(r'(?<![\w./-])([\w-]+\.md)\b', prose)
                for tok in toks:
                    tok = tok.strip()
                    if not is_candidate(tok):
                        continue
                    checked += 1
                    ok = (exists(tok, rdir, root) if '/' in tok
                          else any(fnmatch.fnmatch(b, tok) for b in basenames))
                    if not ok:
                        print(f'{rd}:{no}: `{tok}` does not exist')
                        bad += 1
    print(f'{len(readmes)} READMEs, {checked} path references, {bad} dangling')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
