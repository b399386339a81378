// Frames coloured by kind in headless chromium (tests/ui/kinds-browser-test.sh starts the
// aggregator on a store of node running tests/node/mixed.js under the agent): the JavaScript
// function collatz is drawn in the JavaScript family (teal, hue 165-185), a native frame of
// node in the native family (warm, hue 5-50), on the canvas itself, and the legend lists both.
// Usage: node kinds-browser-test.mjs BASE_URL
import { launch, open } from './browser.mjs';

const base = process.argv[2];
let failed = 0;
const check = (ok, what) => {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failed++;
};

// hue in degrees of an "#rrggbb" or [r, g, b]
function hue(c) {
  const [r, g, b] = (typeof c === 'string' ? [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16)) : c).map((v) => v / 255);
  const max = Math.max(r, g, b), min = Math.min(r, g, b), d = max - min;
  if (!d) return -1;
  const h = max === r ? ((g - b) / d) % 6 : max === g ? (b - r) / d + 2 : (r - g) / d + 4;
  return (h * 60 + 360) % 360;
}

const { browser, close } = await launch();
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 900 });
  page.on('pageerror', (e) => check(false, `page error: ${e.message}`));
  await open(page, `${base}/#/flame?service=node-mixed&type=cpu`);
  // each frame drawn: name, kind, fill, and the canvas pixel just inside its top-left corner
  const frames = await page.evaluate(() => {
    const fg = window.fpFlame, ctx = fg.canvas.getContext('2d'), r = fg.canvas.width / fg.canvas.clientWidth;
    return fg.frames().filter((f) => f.w >= 4).map((f) => ({ name: f.name, kind: f.kind, fill: f.fill,
      pixel: Array.from(ctx.getImageData(Math.round((f.x + 1.5) * r), Math.round((f.y + 1.5) * r), 1, 1).data.slice(0, 3)) }));
  });
  const js = frames.find((f) => f.name === 'collatz');
  check(js && js.kind === 'js', `collatz is drawn as a JavaScript frame (${JSON.stringify(js)})`);
  if (js) {
    const h = hue(js.pixel);
    check(h >= 165 && h <= 185, `collatz's pixel is teal: hue ${h.toFixed(0)} (${js.pixel})`);
  }
  const nat = frames.find((f) => f.name.startsWith('node::Start'));
  check(nat && nat.kind === 'native', `node::Start is drawn as a native frame (${JSON.stringify(nat)})`);
  if (nat) {
    const h = hue(nat.pixel);
    check(h >= 5 && h <= 50, `node::Start's pixel is warm: hue ${h.toFixed(0)} (${nat.pixel})`);
  }
  const legend = await page.$$eval('.legend .kind', (ks) => ks.map((k) => `${k.dataset.kind}:${k.textContent}`));
  check(legend.includes('js:JavaScript') && legend.includes('native:native'), `the legend lists JavaScript and native (${legend})`);
  await page.screenshot({ path: `${process.env.FLEETPROF_BUILD || '.'}/ui-kinds.png` }).catch(() => {});
} finally {
  await close();
}
console.log(failed ? `${failed} failed` : 'all passed');
process.exit(failed ? 1 : 0);
