// Builds ui/dist from ui/src with esbuild (one minified bundle + one stylesheet + index.html).
// ui/dist is committed and embedded into fleetprof-aggregator by the C build; run
// `ui/build.sh` after changing ui/src. `node build.mjs --check` builds into a temporary
// directory and fails when ui/dist differs from what the sources give (ctest test-ui-dist).
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const here = new URL('.', import.meta.url).pathname;
const check = process.argv.includes('--check');
const out = check ? mkdtempSync(join(tmpdir(), 'fleetprof-ui-')) + '/' : here + 'dist/';
rmSync(out, { recursive: true, force: true });
mkdirSync(out);
await build({
  entryPoints: [here + 'src/main.js'],
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['chrome100', 'firefox100', 'safari15'],
  outfile: out + 'app.js',
  legalComments: 'eof',
  logLevel: 'warning',
});
copyFileSync(here + 'src/index.html', out + 'index.html');
// the bundled libraries' licences, served at /LICENSES.txt
const lic = ['fleetprof web UI: third-party code bundled into app.js / app.css', ''];
for (const p of ['uplot']) {
  const pkg = JSON.parse(readFileSync(here + `node_modules/${p}/package.json`, 'utf8'));
  lic.push(`== ${p} ${pkg.version} (${pkg.license}) ${pkg.homepage || ''}`, readFileSync(here + `node_modules/${p}/LICENSE`, 'utf8'), '');
}
writeFileSync(out + 'LICENSES.txt', lic.join('\n'));
if (check) {
  const a = readdirSync(out).sort(), b = readdirSync(here + 'dist').sort();
  const stale = a.join() !== b.join() ? [`files ${b} vs ${a}`]
    : a.filter((f) => !readFileSync(out + f).equals(readFileSync(here + 'dist/' + f)));
  rmSync(out, { recursive: true, force: true });
  if (stale.length) {
    console.error(`ui/dist is stale (${stale.join(', ')}): run ui/build.sh and commit ui/dist`);
    process.exit(1);
  }
  console.log(`ui/dist matches ui/src (${a.length} files)`);
}
