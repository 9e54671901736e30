// The studio in a browser: library, timeline (waveform, silence, scrub, in/out), settings, queue.
import { useCallback, useEffect, useState } from 'preact/hooks';
import { access, ApiError, getJson, getToken, newKey, onUnauthorized, postForm, setToken } from './api.js';
import { changedSettings, loadSettings } from './schema.js';
import { Library } from './Library.jsx';
import { Timeline } from './Timeline.jsx';
import { Viewer } from './Viewer.jsx';
import { Settings } from './Settings.jsx';
import { Queue } from './Queue.jsx';
import { TokenDialog } from './TokenDialog.jsx';

export function App() {
  const [mode, setMode] = useState(null); // null (asking) | 'full' | 'read' | 'none'
  const [health, setHealth] = useState(null);
  const [specs, setSpecs] = useState(null);
  const [values, setValues] = useState({});
  const [avatar, setAvatar] = useState(null); // a library avatar (its listing)
  const [voice, setVoice] = useState(null); // an uploaded voice-over (its analysis)
  const [wave, setWave] = useState(null);
  const [frame, setFrame] = useState(0);
  const [range, setRange] = useState({ in: null, out: null });
  const [followed, setFollowed] = useState(null); // the job the viewer follows
  const [message, setMessage] = useState(null); // {kind: 'error'|'info', text}
  const [queueTick, setQueueTick] = useState(0);
  const [busy, setBusy] = useState('');
  const [tokenError, setTokenError] = useState('');

  const say = useCallback((err) => {
    if (err && err.name === 'AbortError') return;
    const text = err instanceof ApiError || err instanceof Error ? err.message : String(err);
    setMessage({ kind: 'error', text });
  }, []);
  const info = useCallback((text) => setMessage({ kind: 'info', text }), []);

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
      const [h, s] = await Promise.all([getJson('/v1/health'), loadSettings()]);
      setHealth(h);
      setSpecs(s);
      setValues(Object.fromEntries(s.map((x) => [x.name, x.default])));
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
    return () => (clearTimeout(timer), ctl.abort());
  }, [voice, avatar, fps, threshold, minSilence, specs, say]);

  useEffect(() => {
    setRange({ in: null, out: null });
    setFrame(0);
  }, [voice]);

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
      if (range.in !== null) fields.frame_start = range.in;
      if (range.out !== null) fields.frame_end = range.out + 1;
      const job = await postForm('/v1/renders', fields, { 'Idempotency-Key': newKey() });
      if (follow) setFollowed(job.id);
      info(follow ? `Rendering job ${job.id}` : `Job ${job.id} added to the queue (position ${job.position ?? '–'})`);
      setQueueTick((t) => t + 1);
    } catch (e) {
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
        <button type="button" onClick={() => (setMode(null), start())}>
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

  return (
    <div class="app">
      <header class="top">
        <h1>Studio</h1>
        <span class="muted">{health ? `studio serve ${health.version}` : 'connecting…'}</span>
        {readOnly && <span class="badge warn">View only: this token may only read</span>}
        {getToken() && (
          <button
            type="button"
            class="link"
            onClick={() => {
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
      <main class="grid">
        <div class="leftcol">
          <Library
            readOnly={readOnly}
            avatar={avatar}
            voice={voice}
            onAvatar={setAvatar}
            onVoice={setVoice}
            onError={say}
            onInfo={info}
            threshold={values.threshold}
            minSilence={values.min_silence}
          />
          <Queue
            tick={queueTick}
            readOnly={readOnly}
            followed={followed}
            onFollow={setFollowed}
            onError={say}
            onInfo={info}
          />
        </div>
        <section class="stage" aria-label="Viewer and timeline">
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
            thresholdSpec={specs && specs.find((s) => s.name === 'threshold')}
            readOnly={readOnly}
          />
        </section>
        <aside class="side">
          <div class="actions">
            <button type="button" class="primary" disabled={!canRender || busy !== ''} onClick={() => submit(true)}>
              {busy === 'render' ? 'Sending…' : 'Render'}
            </button>
            <button type="button" disabled={!canRender || busy !== ''} onClick={() => submit(false)}>
              {busy === 'queue' ? 'Sending…' : 'Add to queue'}
            </button>
          </div>
          {!readOnly && !canRender && <p class="hint">Choose an avatar and a voice-over to render.</p>}
          {specs && <Settings specs={specs} values={values} onChange={setValues} disabled={readOnly} />}
        </aside>
      </main>
    </div>
  );
}
