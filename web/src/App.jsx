// The studio in a browser: library, timeline (waveform, silence, scrub, in/out), settings, queue.
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { access, ApiError, closeSession, getJson, getToken, newKey, onUnauthorized, openSession, postForm, setToken } from './api.js';
import { changedSettings, fieldOf, loadSettings, uiChanges } from './schema.js';
import { formatRoute, parseRoute, restoreSettings } from './route.js';
import { Library } from './Library.jsx';
import { Timeline } from './Timeline.jsx';
import { Viewer } from './Viewer.jsx';
import { Settings } from './Settings.jsx';
import { Queue } from './Queue.jsx';
import { TokenDialog } from './TokenDialog.jsx';
import { Live } from './Live.jsx';

const PHONE = '(max-width: 720px)'; // style.css's one-column layout

function useMedia(query) {
  const [on, setOn] = useState(() => matchMedia(query).matches);
  useEffect(() => {
    const m = matchMedia(query);
    const change = () => setOn(m.matches);
    m.addEventListener('change', change);
    return () => m.removeEventListener('change', change);
  }, [query]);
  return on;
}

export function App() {
  const [mode, setMode] = useState(null); // null (asking) | 'full' | 'read' | 'none'
  const [health, setHealth] = useState(null);
  const [specs, setSpecs] = useState(null);
  const [values, setValues] = useState({});
  // the settings the user changed on this page: sent even at their default, so they win over a delivery's
  const [touched, setTouched] = useState(() => new Set());
  const [avatar, setAvatar] = useState(null); // a library avatar (its listing)
  const [voice, setVoice] = useState(null); // an uploaded voice-over (its analysis)
  const [wave, setWave] = useState(null);
  const [frame, setFrame] = useState(0);
  const [range, setRange] = useState({ in: null, out: null });
  const [followed, setFollowed] = useState(null); // the job the viewer follows
  const [message, setMessage] = useState(null); // {kind: 'error'|'info', text}
  const [queueTick, setQueueTick] = useState(0);
  const [busy, setBusy] = useState('');
  const [live, setLive] = useState(false); // the Live view (Live.jsx) instead of the studio
  const [tokenError, setTokenError] = useState('');
  const [fieldErrors, setFieldErrors] = useState({}); // setting name -> the server's sentence
  const wanted = useRef(parseRoute(location.hash)); // what the URL asked for, until it is restored

  const say = useCallback((err) => {
    if (err && err.name === 'AbortError') return;
    const text = err instanceof ApiError || err instanceof Error ? err.message : String(err);
    setMessage({ kind: 'error', text });
  }, []);
  const info = useCallback((text) => setMessage({ kind: 'info', text }), []);
  const chooseAvatar = useCallback((a) => {
    if (!a) wanted.current.avatar = null; // removed: the URL drops it too
    setAvatar(a);
  }, []);
  // a phone shows the viewer first: the DOM (and so the tab order) puts it first there too
  const phone = useMedia(PHONE);

  const start = useCallback(async () => {
    let m;
    let error;
    try {
      ({ mode: m, error } = await access());
    } catch {
      setMode('offline');
      return;
    }
    if (m === 'none') {
      setTokenError(getToken() ? error : '');
      setMode('none');
      return;
    }
    setMode(m);
    try {
      const [h, s] = await Promise.all([getJson('/v1/health'), loadSettings(), openSession()]);
      setHealth(h);
      const route = wanted.current;
      setValues(restoreSettings(s, Object.fromEntries(s.map((x) => [x.name, x.default])), route.settings));
      setSpecs(s);
      setRange({ in: route.in, out: route.out });
      setFollowed(route.job);
      if (route.voice) chooseVoice({ id: route.voice }, true);
    } catch (e) {
      say(e);
    }
  }, [say]);

  useEffect(() => {
    start();
    return onUnauthorized((e) => {
      setTokenError(getToken() ? e.message : '');
      setMode('none');
    });
  }, [start]);

  // the waveform on the render's frame grid, with the silence settings in the form
  const threshold = values.threshold;
  const minSilence = values.min_silence;
  const fps = values.fps;
  useEffect(() => {
    if (!voice || !specs) return undefined;
    const ctl = new AbortController();
    const timer = setTimeout(async () => {
      const q = new URLSearchParams({ columns: '1600' });
      if (avatar) q.set('avatar', avatar.name);
      if (fps) q.set('fps', fps);
      if (threshold !== undefined && threshold !== '') q.set('threshold', threshold);
      if (minSilence !== undefined && minSilence !== '') q.set('min_silence', minSilence);
      try {
        const w = await getJson(`/v1/audio/${voice.id}/waveform?${q}`, { signal: ctl.signal });
        setWave(w);
      } catch (e) {
        say(e);
      }
    }, 80);
    return () => {
      clearTimeout(timer);
      ctl.abort();
    };
  }, [voice, avatar, fps, threshold, minSilence, specs, say]);

  // the voice-over's analysis (duration, silences) by its id: a pick in the library or the URL
  const chooseVoice = useCallback(
    async (row, restoring = false) => {
      try {
        const a = await getJson(`/v1/audio/${row.id}`);
        setVoice(a);
        if (!restoring) {
          setRange({ in: null, out: null });
          setFrame(0);
        }
      } catch (e) {
        say(e);
      }
    },
    [say],
  );

  // the URL follows the view: a new job pushes a history entry (back returns), the rest replaces it
  const shownJob = useRef(undefined);
  useEffect(() => {
    if (!specs) return;
    const hash = formatRoute({
      job: followed,
      avatar: avatar ? avatar.name : wanted.current.avatar,
      voice: voice ? voice.id : wanted.current.voice,
      in: range.in,
      out: range.out,
      settings: uiChanges(specs, values),
    });
    if (hash === location.hash) return;
    if (shownJob.current !== undefined && shownJob.current !== followed) history.pushState(null, '', hash);
    else history.replaceState(null, '', hash);
    shownJob.current = followed;
  }, [specs, followed, avatar, voice, range, values]);

  useEffect(() => {
    const back = () => {
      const r = parseRoute(location.hash);
      wanted.current = r;
      shownJob.current = r.job;
      setFollowed(r.job);
      setRange({ in: r.in, out: r.out });
      if (specs) setValues(restoreSettings(specs, Object.fromEntries(specs.map((x) => [x.name, x.default])), r.settings));
      if (r.voice && (!voice || voice.id !== r.voice)) chooseVoice({ id: r.voice }, true);
      if (r.avatar && (!avatar || avatar.name !== r.avatar)) setAvatar(null); // the library picks it again
    };
    addEventListener('popstate', back);
    return () => removeEventListener('popstate', back);
  }, [specs, voice, avatar, chooseVoice]);

  const readOnly = mode === 'read';
  const canRender = !readOnly && avatar && voice && specs;

  async function submit(follow) {
    if (!avatar || !voice) {
      say(new Error('choose an avatar and a voice-over first'));
      return;
    }
    setBusy(follow ? 'render' : 'queue');
    try {
      const fields = { avatar: avatar.name, audio_id: voice.id, ...changedSettings(specs, values) };
      for (const name of touched) if (values[name] !== undefined) fields[name] = values[name] === null ? '' : values[name];
      if (range.in !== null) fields.frame_start = range.in;
      if (range.out !== null) fields.frame_end = range.out + 1;
      const job = await postForm('/v1/renders', fields, { 'Idempotency-Key': newKey() });
      setFieldErrors({});
      if (follow) setFollowed(job.id);
      info(follow ? `Rendering job ${job.id}` : `Job ${job.id} added to the queue (position ${job.position ?? '–'})`);
      setQueueTick((t) => t + 1);
    } catch (e) {
      const field = e instanceof ApiError && specs ? fieldOf(e.message, specs) : null;
      if (field) {
        setFieldErrors({ [field]: e.message });
        document.getElementById(`setting-${field}`)?.focus();
      }
      say(e);
    } finally {
      setBusy('');
    }
  }

  if (mode === 'none') {
    return (
      <TokenDialog
        error={tokenError}
        onToken={(t) => {
          setToken(t);
          setTokenError('');
          setMode(null);
          start();
        }}
      />
    );
  }

  if (mode === 'offline') {
    return (
      <main class="connecting">
        <p role="alert">The server cannot be reached; is studio serve still running?</p>
        <button
          type="button"
          onClick={() => {
            setMode(null);
            start();
          }}
        >
          Try again
        </button>
      </main>
    );
  }
  if (mode === null) {
    return (
      <p class="connecting muted" role="status">
        Connecting to studio serve…
      </p>
    );
  }

  // keyed, so a turn of the phone moves the parts rather than making them anew
  const left = (
    <div key="left" class="leftcol">
      <Library
        readOnly={readOnly}
        avatar={avatar}
        voice={voice}
        wantAvatar={wanted.current.avatar}
        onAvatar={chooseAvatar}
        onVoice={(row) => chooseVoice(row)}
        onError={say}
        onInfo={info}
        threshold={values.threshold}
        minSilence={values.min_silence}
      />
      <Queue
        onOnline={() => setMessage((m) => (m?.text.startsWith('the server cannot be reached') ? null : m))}
        tick={queueTick}
        readOnly={readOnly}
        followed={followed}
        onFollow={setFollowed}
        onError={say}
        onInfo={info}
      />
    </div>
  );
  const stage = (
    <section key="stage" class="stage" aria-label="Viewer and timeline">
      <Viewer
        avatar={avatar}
        voice={voice}
        wave={wave}
        frame={frame}
        specs={specs}
        values={values}
        readOnly={readOnly}
        followed={followed}
        onFollowDone={(j) => {
          setQueueTick((t) => t + 1);
          if (j.state === 'done') info(`Job ${j.id} is done: ${j.frames} frames in ${j.seconds?.toFixed(1)} s`);
          else say(new Error(`Job ${j.id} ${j.state}${j.reason ? `: ${j.reason}` : ''}`));
        }}
        onCloseJob={() => setFollowed(null)}
        onFollow={setFollowed}
        onInfo={info}
        onError={say}
      />
      <Timeline
        wave={wave}
        frame={frame}
        range={range}
        onFrame={setFrame}
        onRange={setRange}
        threshold={values.threshold}
        onThreshold={(v) => setValues((o) => ({ ...o, threshold: v }))}
        thresholdSpec={specs?.find((s) => s.name === 'threshold')}
        readOnly={readOnly}
      />
    </section>
  );

  return (
    <div class="app">
      <header class="top">
        <h1>Studio</h1>
        <span class="muted">{health ? `studio serve ${health.version}` : 'connecting…'}</span>
        {readOnly && <span class="badge warn">View only: this token may only read</span>}
        <button type="button" class="link" aria-pressed={live} onClick={() => setLive((v) => !v)}>
          {live ? 'Back to the studio' : 'Live'}
        </button>
        {getToken() && (
          <button
            type="button"
            class="link"
            onClick={async () => {
              await closeSession();
              setToken('');
              location.reload();
            }}
          >
            Forget token
          </button>
        )}
      </header>
      <div class={`status ${message ? message.kind : ''}`} role={message?.kind === 'error' ? 'alert' : 'status'} aria-live="polite">
        {message && (
          <>
            <span data-testid="message">{message.text}</span>
            <button type="button" class="link" aria-label="Dismiss the message" onClick={() => setMessage(null)}>
              ×
            </button>
          </>
        )}
      </div>
      {live && <Live readOnly={readOnly} onError={say} onInfo={info} />}
      <main class="grid" hidden={live}>
        {phone ? [stage, left] : [left, stage]}
        <aside class="side">
          <div class="actions">
            {/* aria-disabled while sending: a disabled button would drop the keyboard's focus to the top */}
            <button type="button" class="primary" disabled={!canRender} aria-disabled={busy !== ''} onClick={() => busy === '' && submit(true)}>
              {busy === 'render' ? 'Sending…' : 'Render'}
            </button>
            <button type="button" disabled={!canRender} aria-disabled={busy !== ''} onClick={() => busy === '' && submit(false)}>
              {busy === 'queue' ? 'Sending…' : 'Add to queue'}
            </button>
          </div>
          {!readOnly && !canRender && <p class="hint">Choose an avatar and a voice-over to render.</p>}
          {specs && (
            <Settings
              specs={specs}
              values={values}
              errors={fieldErrors}
              onChange={(fn) => {
                setValues((o) => {
                  const n = fn(o);
                  const changed = Object.keys(n).filter((k) => n[k] !== o[k]);
                  if (changed.length) setTouched((t) => new Set([...t, ...changed]));
                  return n;
                });
                setFieldErrors({}); // an error goes once its field (or any) changes
              }}
              disabled={readOnly}
            />
          )}
        </aside>
      </main>
    </div>
  );
}

