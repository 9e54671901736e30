// The viewer: the exact frame under the playhead (GET /v1/frame), or the followed job: its live
// preview, frames/s and ETA from the events stream, then its video and the lip-sync check.
import { useEffect, useRef, useState } from 'preact/hooks';
import { blobUrl, follow, getJson } from './api.js';
import { duration, timecode } from './timecode.js';
import { CheckVerdict, download } from './Queue.jsx';

const FINAL = ['done', 'failed', 'cancelled', 'interrupted', 'expired'];

function frameQuery(avatar, voice, wave, frame, specs, values) {
  const [num, den] = String(wave.rate).split('/').map(Number);
  const t = ((frame + 0.5) * (den || 1)) / num; // the middle of the frame: exact on any grid
  const q = new URLSearchParams({ t: t.toFixed(6), avatar: avatar.name, audio_id: voice.id });
  for (const s of specs) {
    if (s.group !== 'engine' && s.group !== 'silence') continue; // what changes the frames
    const v = values[s.name];
    if (v !== undefined && v !== null && v !== '' && v !== s.apiDefault) q.set(s.name, v);
  }
  return `/v1/frame?${q}`;
}

function useFrame(avatar, voice, wave, frame, specs, values, enabled, onError) {
  const [shown, setShown] = useState(null); // {src, url, frame}
  const want = useRef({ url: null, frame: 0 });
  const shownUrl = useRef(null);
  const loading = useRef(false);
  const url = enabled && avatar && voice && wave && specs ? frameQuery(avatar, voice, wave, frame, specs, values) : null;
  useEffect(() => {
    want.current = { url, frame };
    if (!url || loading.current) return;
    (async () => {
      // one request at a time; while it runs, only the latest frame asked for is kept
      loading.current = true;
      try {
        while (want.current.url && want.current.url !== shownUrl.current) {
          const { url: u, frame: f } = want.current;
          let src;
          try {
            src = await blobUrl(u);
          } catch (e) {
            onError(e);
            break;
          }
          shownUrl.current = u;
          setShown((old) => {
            if (old) URL.revokeObjectURL(old.src);
            return { src, url: u, frame: f };
          });
        }
      } finally {
        loading.current = false;
      }
    })();
  }, [url]);
  return enabled ? shown : null;
}

function FollowedJob({ id, onDone, onClose, onError }) {
  const [job, setJob] = useState(null);
  const [live, setLive] = useState(null);
  const [preview, setPreview] = useState(null);
  const [video, setVideo] = useState(null);
  const previewBusy = useRef(false);

  useEffect(() => {
    const ctl = new AbortController();
    let told = false;
    (async () => {
      try {
        setJob(await getJson(`/v1/renders/${id}`, { signal: ctl.signal }));
        await follow(
          `/v1/renders/${id}/events`,
          (name, data) => {
            if (name === 'progress') {
              setLive(data);
              if (data.preview && data.done < data.total && !previewBusy.current) {
                previewBusy.current = true;
                blobUrl(data.preview, ctl.signal)
                  .then((src) => setPreview((old) => (old && URL.revokeObjectURL(old), src)))
                  .catch(() => {}) // the job finished between the event and the fetch: no preview then
                  .finally(() => (previewBusy.current = false));
              }
            } else if (name === 'state') {
              setJob((j) => ({ ...(j || {}), ...data }));
            }
          },
          ctl.signal,
        );
        // the final state: the whole job (result, check), then the video
        for (;;) {
          const j = await getJson(`/v1/renders/${id}`, { signal: ctl.signal });
          setJob(j);
          if (FINAL.includes(j.state) && !told) {
            told = true;
            if (j.state === 'done') setVideo((v) => v || 'loading');
            onDone(j);
          }
          const check = j.result && j.result.check;
          if (!FINAL.includes(j.state) || (check && (check.state === 'pending' || check.state === 'running'))) {
            await new Promise((r) => setTimeout(r, 1500));
            if (ctl.signal.aborted) return;
            continue;
          }
          return;
        }
      } catch (e) {
        if (e.name !== 'AbortError') onError(e);
      }
    })();
    return () => ctl.abort();
  }, [id]);

  useEffect(() => {
    if (video !== 'loading') return undefined;
    const ctl = new AbortController();
    blobUrl(`/v1/renders/${id}/video`, ctl.signal).then(setVideo, (e) => e.name !== 'AbortError' && onError(e));
    return () => ctl.abort();
  }, [video, id]);

  const state = job ? job.state : 'queued';
  const pct = live && live.total ? Math.round((100 * live.done) / live.total) : state === 'done' ? 100 : 0;
  return (
    <div class="followed" data-testid="followed">
      <div class="picture">
        {video && video !== 'loading' ? (
          <video src={video} controls autoplay muted playsInline data-testid="video" aria-label={`Job ${id}'s video`} />
        ) : preview ? (
          <img src={preview} alt={`Job ${id}: the latest preview frame`} data-testid="preview" />
        ) : (
          <div class="placeholder">{state === 'queued' ? `Job ${id} is waiting in the queue…` : `Job ${id}: ${state}`}</div>
        )}
      </div>
      <div class="jobbar">
        <strong>Job {id}</strong>
        <span class={`badge ${state}`} data-testid="followed-state">
          {state}
        </span>
        <progress max="100" value={pct} aria-label={`Job ${id}'s progress`} />
        <span data-testid="progress" class="tc">
          {live ? `${live.done}/${live.total} frames · ${live.fps.toFixed(1)} frames/s · ETA ${duration(live.eta_s)}` : `${pct}%`}
        </span>
        {job && job.reason && <span class="error">{job.reason}</span>}
        {job && job.result && job.result.check && <CheckVerdict check={job.result.check} why />}
        {state === 'done' && (
          <button type="button" onClick={() => download(job).catch(onError)}>
            Download
          </button>
        )}
        <button type="button" class="link" onClick={onClose}>
          Back to the frame
        </button>
      </div>
    </div>
  );
}

export function Viewer({ avatar, voice, wave, frame, specs, values, readOnly, followed, onFollowDone, onCloseJob, onError }) {
  const shown = useFrame(avatar, voice, wave, frame, specs, values, !readOnly && !followed, onError);
  if (followed) return <FollowedJob key={followed} id={followed} onDone={onFollowDone} onClose={onCloseJob} onError={onError} />;
  const tc = wave ? wave.timecode : undefined;
  return (
    <div class="viewer">
      <div class="picture">
        {shown ? (
          <img src={shown.src} alt={`The frame at ${timecode(shown.frame, tc)}`} data-testid="frame" data-frame={shown.frame} data-url={shown.url} />
        ) : (
          <div class="placeholder">
            {readOnly
              ? 'View only: frames need the full token. The queue and its videos are below.'
              : avatar && voice
                ? 'Loading the frame…'
                : 'Choose an avatar and a voice-over: the exact frame a render writes shows here.'}
          </div>
        )}
      </div>
      {shown && (
        <div class="jobbar">
          <span class="tc" data-testid="frame-timecode">
            {timecode(shown.frame, tc)}
          </span>
          <span class="muted small">frame {shown.frame}: what the render writes there</span>
        </div>
      )}
    </div>
  );
}
