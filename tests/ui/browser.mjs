// Headless Debian chromium driven by puppeteer-core (ui/node_modules, pinned in
// ui/package-lock.json): shared by the browser test (tests/ui/browser-test.mjs) and the UI
// benchmark (bench/ui-bench.mjs). A fresh profile directory per run, removed at close.
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const require = createRequire(join(root, 'ui', 'package.json'));
const puppeteer = require('puppeteer-core');

export async function launch() {
  const profile = mkdtempSync(join(tmpdir(), 'fleetprof-chromium-'));
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    userDataDir: profile,
    protocolTimeout: 60000,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage', '--font-render-hinting=none'],
  });
  const close = async () => {
    try { await browser.close(); } finally { rmSync(profile, { recursive: true, force: true }); }
  };
  return { browser, close };
}

// Opens url in page and waits until the view has rendered (main.js sets data-ready).
export async function open(page, url) {
  await page.goto(url, { waitUntil: 'domcontentloaded' });
  await page.waitForFunction(() => document.body.dataset.ready === '1', { timeout: 30000 });
}

// Navigates within the app (hash change) and waits for the new view.
export async function nav(page, hash) {
  await page.evaluate(() => { document.body.dataset.ready = '0'; });
  await page.evaluate((h) => { location.hash = h; }, hash);
  await page.waitForFunction(() => document.body.dataset.ready === '1', { timeout: 30000 });
}
