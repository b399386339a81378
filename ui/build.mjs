// Builds ui/dist from ui/src with esbuild (one minified bundle + one stylesheet + index.html).
// ui/dist is committed and embedded into fleetprof-aggregator by the C build; run
// `ui/build.sh` after changing ui/src.
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, rmSync, readFileSync, writeFileSync } from 'node:fs';

const here = new URL('.', import.meta.url).pathname;
rmSync(here + 'dist', { recursive: true, force: true });
mkdirSync(here + 'dist');
await build({
  entryPoints: [here + 'src/main.js'],
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['chrome100', 'firefox100', 'safari15'],
  outfile: here + 'dist/app.js',
  legalComments: 'eof',
  logLevel: 'warning',
});
copyFileSync(here + 'src/index.html', here + 'dist/index.html');
// the bundled libraries' licences, served at /LICENSES.txt
const lic = ['fleetprof web UI: third-party code bundled into app.js / app.css', ''];
for (const p of ['uplot']) {
  const pkg = JSON.parse(readFileSync(here + `node_modules/${p}/package.json`, 'utf8'));
  lic.push(`== ${p} ${pkg.version} (${pkg.license}) ${pkg.homepage || ''}`, readFileSync(here + `node_modules/${p}/LICENSE`, 'utf8'), '');
}
writeFileSync(here + 'dist/LICENSES.txt', lic.join('\n'));
