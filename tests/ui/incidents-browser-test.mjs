// The incidents page, an incident's page, the incident markers on the service timeline and the
// links to incidents from an endpoint's and a request's pages in headless chromium (tests/ui/incidents-browser-test.sh starts the aggregator on a store that
// holds incident_svc's 3 spike incidents). Usage: node incidents-browser-test.mjs BASE_URL
import { launch, open, nav } from './browser.mjs';

const base = process.argv[2];
let failed = 0;
const check = (ok, what) => {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failed++;
};

const { browser, close } = await launch();
try {
  const page = await browser.newPage();
  page.on('pageerror', (e) => check(false, `page error: ${e.message}`));
  await open(page, `${base}/#/incidents?service=incident_svc`);
  const rows = await page.$$eval('table.incidents tbody tr', (trs) => trs.map((t) => t.innerText));
  check(rows.length === 3, `incidents page lists 3 incidents (${rows.length})`);
  check(rows.every((r) => r.includes('overload')), 'every incident is an overload');
  const link = await page.$eval('table.incidents tbody tr a', (a) => a.getAttribute('href'));
  await nav(page, link);
  const h1 = await page.$eval('h1', (e) => e.textContent);
  check(h1 === 'Incident: overload in incident_svc', `incident page title (${h1})`);
  const trig = await page.$$eval('table.timeline tr.trigger', (t) => t.length);
  check(trig === 1, `the timeline marks the trigger's chunk (${trig})`);
  const sub = await page.$$eval('p.sub', (ps) => ps.map((p) => p.textContent).join(' | '));
  check(sub.includes('first: spike_spin'), `the diff leads with spike_spin (${sub.slice(0, 300)})`);
  const flame = await page.evaluate(() => window.fpFlame && window.fpFlame.name && window.fpFlame.name.includes('spike_spin'));
  check(flame === true, 'the capture\'s flame graph has spike_spin');
  await nav(page, '#/service?service=incident_svc');
  await page.waitForSelector('.chart .u-over', { timeout: 30000 });
  const marks = await page.$eval('.chart .u-over', (e) => e.dataset.incidents);
  check(marks === '3', `the service timeline has 3 incident markers (${marks})`);
  // links: the endpoint's page lists the 3 incidents; its slowest request (a spike's) opens a
  // request page linking the incident it fell in, whose link opens that incident
  await nav(page, '#/endpoint?service=incident_svc&endpoint=GET%20%2Fwork');
  await page.waitForSelector('table.requests a.request', { timeout: 30000 });
  const epLinks = await page.$$eval('p.incident-links a.incident-link', (as) => as.length);
  check(epLinks === 3, `the endpoint page links 3 incidents (${epLinks})`);
  const req = await page.$eval('table.requests a.request', (a) => a.getAttribute('href'));
  await nav(page, req);
  await page.waitForSelector('h1', { timeout: 30000 });
  const reqLinks = await page.$$eval('p.incident-links a.incident-link', (as) => as.map((a) => a.getAttribute('href')));
  check(reqLinks.length >= 1, `the slowest request's page links its incident (${reqLinks.length})`);
  if (reqLinks.length) {
    await nav(page, reqLinks[0]);
    const t = await page.$eval('h1', (e) => e.textContent);
    check(t === 'Incident: overload in incident_svc', `the request's link opens the incident (${t})`);
  }
  await page.screenshot({ path: `${process.env.FLEETPROF_BUILD || '.'}/ui-incident.png` }).catch(() => {});
} finally {
  await close();
}
console.log(failed ? `${failed} failed` : 'all passed');
process.exit(failed ? 1 : 0);
