// The UI's only data source: the aggregator's query API (/api/v1/...), same origin. With an API
// token, the browser's fleetprof_token cookie (set HttpOnly by the server at login) authorizes
// these calls.

export class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : `HTTP ${status}`);
    this.status = status;
    this.parameter = body && body.parameter;
  }
}

// params: object; arrays become repeated parameters; empty values are left out.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v === undefined || v === null || v === '') continue;
    for (const x of Array.isArray(v) ? v : [v]) if (x !== '' && x != null) q.append(k, String(x));
  }
  const s = q.toString();
  return s ? '?' + s : '';
}

export async function get(path, params) {
  const r = await fetch('/api/v1/' + path + query(params), { credentials: 'same-origin' });
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (!r.ok) {
    if (r.status === 401) location.reload(); // the login page
    throw new ApiError(r.status, body);
  }
  return body;
}

// Formatting in the event type's unit.
export function fmtValue(v, unit) {
  if (v == null || !isFinite(v)) return '-';
  const a = Math.abs(v);
  if (unit === 'bytes') {
    if (a >= 1 << 30) return (v / (1 << 30)).toFixed(2) + ' GiB';
    if (a >= 1 << 20) return (v / (1 << 20)).toFixed(2) + ' MiB';
    if (a >= 1 << 10) return (v / (1 << 10)).toFixed(1) + ' KiB';
    return v.toFixed(0) + ' B';
  }
  if (a >= 1e9) return (v / 1e9).toFixed(2) + ' s';
  if (a >= 1e6) return (v / 1e6).toFixed(2) + ' ms';
  if (a >= 1e3) return (v / 1e3).toFixed(1) + ' µs';
  return v.toFixed(0) + ' ns';
}

export function fmtPct(x, digits = 1) {
  return x == null || !isFinite(x) ? '-' : (100 * x).toFixed(digits) + '%';
}

export function fmtCount(x) {
  if (x == null) return '-';
  if (x >= 1e6) return (x / 1e6).toFixed(1) + 'M';
  if (x >= 1e4) return (x / 1e3).toFixed(0) + 'k';
  return Math.round(x).toString();
}

export function fmtTime(ns) {
  if (!ns) return '-';
  return new Date(ns / 1e6).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

export const EVENT_TYPES = ['cpu', 'wall', 'alloc', 'inuse', 'lock', 'io'];
