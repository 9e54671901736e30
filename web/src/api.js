// The API client of the page: same origin, the token (if the server has one) from this tab's
// sessionStorage, every error as the server's one sentence (ApiError.message).
import { EventSourceParserStream } from 'eventsource-parser/stream';

const TOKEN_KEY = 'studio.token';

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

let token = globalThis.sessionStorage?.getItem(TOKEN_KEY) || ''; // none outside a browser (unit tests)
const listeners = new Set();

export const getToken = () => token;
export function setToken(value) {
  token = value || '';
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}
/** Called with the ApiError of each 401: the page asks for the token once. */
export function onUnauthorized(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function headers(extra) {
  const h = new Headers(extra || {});
  if (token) h.set('Authorization', `Bearer ${token}`);
  return h;
}

async function failure(res, notify = true) {
  let sentence = `${res.status} ${res.statusText}`.trim();
  try {
    const body = await res.json();
    if (body && typeof body.error === 'string') sentence = body.error;
  } catch {
    /* not JSON: the status line says it */
  }
  const err = new ApiError(res.status, sentence);
  if (res.status === 401 && notify) for (const fn of listeners) fn(err);
  return err;
}

/** fetch + the token; a non-2xx answer throws ApiError with the server's sentence. */
export async function call(path, { method = 'GET', body, headers: extra, signal } = {}) {
  let res;
  try {
    res = await fetch(path, { method, body, headers: headers(extra), signal, cache: 'no-store' });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'the server cannot be reached; is studio serve still running?');
  }
  if (!res.ok) throw await failure(res);
  return res;
}

export const getJson = async (path, opts) => (await call(path, opts)).json();

const tagged = new Map(); // path -> {etag, body}: the lists asked again, answered 304 when unchanged

/** GET JSON with If-None-Match: the server answers 304 (no body) when it did not change. */
export async function getFresh(path, { signal } = {}) {
  const known = tagged.get(path);
  const extra = known ? { 'If-None-Match': known.etag } : {};
  let res;
  try {
    res = await fetch(path, { headers: headers(extra), signal, cache: 'no-store' });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'the server cannot be reached; is studio serve still running?');
  }
  if (res.status === 304 && known) return known.body;
  if (!res.ok) throw await failure(res);
  const body = await res.json();
  const etag = res.headers.get('ETag');
  if (etag) tagged.set(path, { etag, body });
  return body;
}

export const sendJson = (path, method, body) =>
  call(path, { method, body: body === undefined ? undefined : JSON.stringify(body), headers: { 'Content-Type': 'application/json' } }).then((r) => r.json());

let renewal = null;

/**
 * The media cookie (POST /v1/session): with it the browser fetches videos, side files, thumbnails
 * and voice-overs by URL (HTTP Range: playback starts at once). HttpOnly and SameSite=Strict, good
 * for GET only and for an hour; renewed every 30 minutes. The token never goes into a URL.
 */
export async function openSession() {
  await call('/v1/session', { method: 'POST' });
  clearTimeout(renewal);
  renewal = setTimeout(() => openSession().catch(() => {}), 30 * 60 * 1000);
}

export async function closeSession() {
  clearTimeout(renewal);
  await call('/v1/session', { method: 'DELETE' }).catch(() => {});
}

export function postForm(path, fields, extra) {
  const form = new FormData();
  for (const [k, v] of Object.entries(fields)) {
    if (v === undefined || v === null || v === '') continue;
    if (v instanceof Blob) form.append(k, v, v.name || k);
    else form.append(k, String(v));
  }
  return call(path, { method: 'POST', body: form, headers: extra }).then((r) => r.json());
}

/**
 * An image the API answers (a scrub frame, a live preview), loaded by URL: the browser's own GET,
 * authorised by the media cookie (no token in the URL, no blob to free). Resolves with the URL
 * once the image is decoded, so an <img src> of it shows it at once from the document's images.
 * When the browser's GET fails, the same GET with the token says why (the server's sentence); if
 * that one succeeds, the cookie was stale (a restarted server): it is renewed and the image tried again.
 */
export async function loadImage(path, signal) {
  for (let attempt = 0; ; attempt += 1) {
    const img = new Image();
    img.src = path;
    try {
      await img.decode();
      return path;
    } catch {
      if (signal?.aborted) throw new DOMException('aborted', 'AbortError');
    }
    await call(path, { signal }); // throws the server's sentence
    if (attempt > 0) throw new ApiError(0, `the image ${path.split('?')[0]} could not be shown`);
    await openSession();
  }
}

/**
 * Server-Sent Events with the token (EventSource cannot send one): calls onEvent(name, data) for
 * each event until the stream ends or signal aborts.
 */
export async function follow(path, onEvent, signal) {
  const res = await call(path, { signal, headers: { Accept: 'text/event-stream' } });
  const events = res.body.pipeThrough(new TextDecoderStream()).pipeThrough(new EventSourceParserStream());
  const reader = events.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      let data = value.data;
      try {
        data = JSON.parse(value.data);
      } catch {
        /* a comment or plain text: passed as it is */
      }
      onEvent(value.event || 'message', data);
    }
  } finally {
    reader.releaseLock();
  }
}

/**
 * What the token may do: 'full', 'read' (a read-only token: GET only, no frames) or 'none' (the
 * server wants a token and has none or another). Not GET /v1/health: on a loopback server it answers
 * without a token (an open probe). Without a token, GET /v1/renders?limit=1 answers 401 when one is
 * needed (200 otherwise: no error in the console). With one, GET /v1/frame with an invalid t answers
 * 401 for a wrong token, 403 for a read-only one (the guard), 422 for the full one (nothing renders).
 */
export async function access() {
  if (!token) {
    const list = await fetch('/v1/renders?limit=1', { headers: headers(), cache: 'no-store' });
    if (list.status === 401) return { mode: 'none', error: (await failure(list, false)).message };
    return { mode: 'full' };
  }
  const res = await fetch('/v1/frame?t=-1', { headers: headers(), cache: 'no-store' });
  if (res.status === 401) return { mode: 'none', error: (await failure(res, false)).message };
  return { mode: res.status === 403 ? 'read' : 'full' };
}

/**
 * A fresh Idempotency-Key (32 hex digits). crypto.randomUUID exists only in secure contexts
 * (HTTPS or localhost); a server on the LAN is neither, getRandomValues works everywhere.
 */
export function newKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}
