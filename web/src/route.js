// The page's state in its URL (the hash, so the server answers one page for every view):
//   #/jobs/42?avatar=anna&voice=0123456789abcdef&in=10&out=99&set.fps=30
// The path names what the viewer shows (a job, or the editor at /); the query keeps the avatar,
// the voice-over, in/out and the settings changed from their defaults. #/avatars/NAME and
// #/voiceovers/ID are links to one avatar or voice-over. Reload and back/forward restore it.
// Pure functions (no DOM): tested with Vitest.

const ID = /^[0-9a-f]{16}$/;
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** {job, avatar, voice, in, out, settings} from a location hash ('#/jobs/42?...'). */
export function parseRoute(hash) {
  const text = String(hash || '').replace(/^#/, '');
  const [path, query = ''] = text.split('?', 2);
  const q = new URLSearchParams(query);
  const out = { job: null, avatar: null, voice: null, in: null, out: null, settings: {} };
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  if (parts[0] === 'jobs' && /^[1-9][0-9]{0,17}$/.test(parts[1] || '')) out.job = Number(parts[1]);
  if (parts[0] === 'avatars' && NAME.test(parts[1] || '')) out.avatar = parts[1];
  if (parts[0] === 'voiceovers' && ID.test(parts[1] || '')) out.voice = parts[1];
  if (NAME.test(q.get('avatar') || '')) out.avatar = q.get('avatar');
  if (ID.test(q.get('voice') || '')) out.voice = q.get('voice');
  for (const key of ['in', 'out']) {
    const v = q.get(key);
    if (v !== null && /^[0-9]{1,9}$/.test(v)) out[key] = Number(v);
  }
  for (const [k, v] of q) if (k.startsWith('set.') && k.length > 4) out.settings[k.slice(4)] = v;
  return out;
}

/** The hash for a state (the inverse of parseRoute; settings as strings). */
export function formatRoute({ job, avatar, voice, in: a, out: b, settings }) {
  const q = new URLSearchParams();
  if (avatar) q.set('avatar', avatar);
  if (voice) q.set('voice', voice);
  if (a !== null && a !== undefined) q.set('in', String(a));
  if (b !== null && b !== undefined) q.set('out', String(b));
  for (const [k, v] of Object.entries(settings || {}).sort()) q.set(`set.${k}`, v === null ? '' : String(v));
  const path = job ? `/jobs/${job}` : '/';
  const query = q.toString();
  return `#${path}${query ? `?${query}` : ''}`;
}

/** A setting's value from its text in the URL, by its spec (type, choices, nullable); undefined if invalid. */
export function settingValue(spec, text) {
  if (text === '' || text === null || text === undefined) return spec.nullable ? null : undefined;
  if (spec.type === 'boolean') return text === 'true' ? true : text === 'false' ? false : undefined;
  if (spec.type === 'integer' || spec.type === 'number') {
    const n = Number(text);
    if (!Number.isFinite(n) || (spec.type === 'integer' && !Number.isInteger(n))) return undefined;
    if ((spec.minimum !== null && n < spec.minimum) || (spec.maximum !== null && n > spec.maximum)) return undefined;
    return n;
  }
  if (spec.choices && !spec.choices.includes(text)) return undefined;
  return text;
}

/** The settings (name -> value) a route restores onto the defaults; unknown names and bad values dropped. */
export function restoreSettings(specs, defaults, fromUrl) {
  const values = { ...defaults };
  for (const s of specs) {
    if (!(s.name in fromUrl)) continue;
    const v = settingValue(s, fromUrl[s.name]);
    if (v !== undefined) values[s.name] = v;
  }
  return values;
}

/** Delay before the n-th reconnection (0-based): 1, 2, 4, 8 s ... capped at `cap` seconds, in ms. */
export const backoff = (n, cap = 15) => Math.min(cap, 2 ** Math.min(n, 10)) * 1000;
