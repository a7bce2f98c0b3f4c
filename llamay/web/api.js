// Calls to the server. The key (when the server wants one) lives in sessionStorage: this tab
// only, gone when it closes, never a cookie. It is sent as a Bearer header.

const KEY = 'llamay.key';

export const auth = {
  get key() { return sessionStorage.getItem(KEY) || ''; },
  set key(value) {
    if (value) sessionStorage.setItem(KEY, value);
    else sessionStorage.removeItem(KEY);
  },
};

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function headers(extra = {}) {
  const out = { ...extra };
  if (auth.key) out.Authorization = `Bearer ${auth.key}`;
  return out;
}

/** The error message of any of the server's error shapes. */
async function failure(res) {
  let message = `${res.status} ${res.statusText}`;
  try {
    const body = await res.json();
    const err = body.error;
    message = (typeof err === 'string' ? err : err && err.message) || message;
  } catch { /* not JSON: keep the status line */ }
  return new ApiError(res.status, message);
}

/** fetch with the key; throws ApiError on a non-2xx answer. */
export async function call(path, { method = 'GET', body, raw, signal, type } = {}) {
  const init = { method, signal, headers: headers() };
  if (raw !== undefined) {
    init.body = raw;
    init.headers['Content-Type'] = type || 'application/octet-stream';
  } else if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers['Content-Type'] = 'application/json';
  }
  const res = await fetch(path, init);
  if (res.status === 401 && path !== '/v1/whoami') {
    // The key stopped working (revoked, or the server restarted with other keys): ask again.
    window.dispatchEvent(new CustomEvent('llamay:unauthorized'));
  }
  if (!res.ok) throw await failure(res);
  return res;
}

export async function json(path, opts) {
  return (await call(path, opts)).json();
}

/** Yield the lines of a streamed body as they arrive. */
async function* lines(res) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      yield buf.slice(0, nl).replace(/\r$/, '');
      buf = buf.slice(nl + 1);
    }
  }
  if (buf) yield buf;
}

/** Server-sent events: yields each `data:` payload parsed as JSON, until [DONE]. */
export async function* sse(res) {
  let data = [];
  for await (const line of lines(res)) {
    if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    else if (line === '' && data.length) {
      const payload = data.join('\n');
      data = [];
      if (payload === '[DONE]') return;
      yield JSON.parse(payload);
    }
  }
}

/** Newline-delimited JSON (Ollama's streams). */
export async function* ndjson(res) {
  for await (const line of lines(res)) {
    if (line.trim()) yield JSON.parse(line);
  }
}
