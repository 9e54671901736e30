// The viewer: the exact frame under the playhead (GET /v1/frame), or the followed job: its live
// preview, frames/s and ETA from the events stream, then its video and the lip-sync check.
import { useEffect, useRef, useState } from 'preact/hooks';
import { follow, getJson, loadImage, newKey, postForm, sendJson } from './api.js';
import { backoff } from './route.js';
import { duration, timecode } from './timecode.js';
import { CheckVerdict } from './Queue.jsx';

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
          try {
            await loadImage(u); // by URL with the media cookie: nothing to free afterwards
          } catch (e) {
            onError(e);
            break;
          }
          shownUrl.current = u;
          setShown({ src: u, url: u, frame: f });
        }
      } finally {
        loading.current = false;
      }
    })();
  }, [url]);
  return enabled ? shown : null;
}

const LABELS = { job: 'Job JSON', check: 'Check (JSON)', check_report: 'Check report', otio: 'OTIO timeline', captions: 'Captions' };
/** What a side file is called on the page: its kind in words (a kind a newer server adds, as it is). */
export const fileLabel = (kind) => LABELS[kind] || kind.replace(/_/g, ' ').replace(/^./, (c) => c.toUpperCase());

/** A job's side files (captions, OTIO, check report, its JSON): links the browser downloads itself. */
export function SideFiles({ job }) {
  if (!job?.files || job.files.length === 0) return null;
  return (
    <ul class="files" aria-label={`Job ${job.id}'s files`}>
      {job.files.map((f) => (
        <li key={f.name}>
          {f.kind === 'check_report' ? (
            <a href={f.url} target="_blank" rel="noopener" data-testid="file-check_report">
              Lip-sync report (per-second plot)
            </a>
          ) : (
          <a href={f.url} download={f.name} data-testid={`file-${f.kind}`}>
            {fileLabel(f.kind)}
          </a>
          )}
        </li>
      ))}
    </ul>
  );
}

/** What the server wants the user to know about a finished job (its result's notes and warnings). */
export function notesOf(job) {
  const r = (job?.result) || {};
  return [...(r.notes || []), ...(r.warnings || []), ...((job?.warnings) || [])].filter((x) => typeof x === 'string' && x);
}

function FollowedJob({ id, readOnly, onDone, onClose, onFollow, onError, onInfo }) {
  const [job, setJob] = useState(null);
  const [live, setLive] = useState(null);
  const [preview, setPreview] = useState(null);
  const [lost, setLost] = useState(false); // the stream dropped: reconnecting
  const previewBusy = useRef(false);

  useEffect(() => {
    const ctl = new AbortController();
    let told = false;
    const pause = (ms) => new Promise((r) => setTimeout(r, ms));
    (async () => {
      for (let attempt = 0; !ctl.signal.aborted; attempt += 1) {
        try {
          const first = await getJson(`/v1/renders/${id}`, { signal: ctl.signal });
          setJob(first);
          setLost(false);
          attempt = 0;
          if (!FINAL.includes(first.state)) {
            await follow(
              `/v1/renders/${id}/events`,
              (name, data) => {
                if (name === 'progress') {
                  setLive(data);
                  if (data.preview && data.done < data.total && !previewBusy.current) {
                    previewBusy.current = true;
                    // a new URL for each frame (the server keeps the latest under one path)
                    loadImage(`${data.preview}?at=${data.done}`, ctl.signal)
                      .then(setPreview)
                      .catch(() => {}) // the job finished between the event and the fetch: no preview then
                      .finally(() => (previewBusy.current = false));
                  }
                } else if (name === 'state') {
                  setJob((j) => ({ ...(j || {}), ...data }));
                }
              },
              ctl.signal,
            );
          }
          // the final state: the whole job (result, check, files)
          for (;;) {
            const j = await getJson(`/v1/renders/${id}`, { signal: ctl.signal });
            setJob(j);
            if (!FINAL.includes(j.state)) break; // the stream ended early (a restart): follow again
            if (!told) {
              told = true;
              onDone(j);
            }
            const check = j.result?.check;
            if (check && (check.state === 'pending' || check.state === 'running')) {
              await pause(1500);
              continue;
            }
            return;
          }
        } catch (e) {
          if (e.name === 'AbortError') return;
          if (e.status && e.status !== 0 && e.status < 500) return onError(e); // a refusal: said, not retried
          setLost(true); // the server went away: ask again, 1 s, 2 s, 4 s ... 15 s apart
          await pause(backoff(attempt));
        }
      }
    })();
    return () => ctl.abort();
  }, [id]);

  async function cancel() {
    try {
      setJob(await sendJson(`/v1/renders/${id}`, 'DELETE'));
      onInfo(`Job ${id} cancelled`);
    } catch (e) {
      onError(e);
    }
  }

  async function retry() {
    try {
      const again = await postForm(`/v1/renders/${id}/retry`, {}, { 'Idempotency-Key': newKey() });
      onInfo(`Job ${id} queued again as job ${again.id}`);
      onFollow(again.id); // the viewer follows the new job
    } catch (e) {
      onError(e);
    }
  }

  const state = job ? job.state : 'queued';
  const pct = live?.total ? Math.round((100 * live.done) / live.total) : state === 'done' ? 100 : 0;
  const notes = notesOf(job);
  return (
    <div class="followed" data-testid="followed">
      <div class="picture">
        {state === 'done' && job && job.links ? (
          <video src={job.links.video} controls autoplay playsInline preload="auto" data-testid="video" aria-label={`Job ${id}'s video`} />
        ) : preview && state === 'running' ? (
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
        {lost && (
          <span class="badge warn" role="status" data-testid="reconnecting">
            the server cannot be reached; trying again…
          </span>
        )}
        {!FINAL.includes(state) && <progress max="100" value={pct} aria-label={`Job ${id}'s progress`} />}
        <span data-testid="progress" class="tc">
          {live && !FINAL.includes(state) ? `${live.done}/${live.total} frames · ${live.fps.toFixed(1)} frames/s · ETA ${duration(live.eta_s)}` : `${pct}%`}
        </span>
        {job?.reason && <span class="error">{job.reason}</span>}
        {job?.result?.check && <CheckVerdict check={job.result.check} why />}
        {state === 'done' && job && job.links && (
          <a class="button" href={job.links.video} download={job.output || `render-${id}.mp4`}>
            Download
          </a>
        )}
        {!readOnly && ['queued', 'running', 'held'].includes(state) && (
          <button type="button" onClick={cancel}>
            Cancel
          </button>
        )}
        {!readOnly && FINAL.includes(state) && (
          <button type="button" onClick={retry}>
            Retry
          </button>
        )}
        <button type="button" class="link" onClick={onClose}>
          Back to the frame
        </button>
      </div>
      {notes.length > 0 && (
        <ul class="notes" data-testid="notes" aria-label={`What the server says about job ${id}`}>
          {notes.map((n) => (
            <li key={n}>{n}</li>
          ))}
        </ul>
      )}
      <SideFiles job={job} />
    </div>
  );
}

export function Viewer({ avatar, voice, wave, frame, specs, values, readOnly, followed, onFollowDone, onCloseJob, onFollow, onError, onInfo }) {
  const shown = useFrame(avatar, voice, wave, frame, specs, values, !readOnly && !followed, onError);
  if (followed)
    return (
      <FollowedJob
        key={followed}
        id={followed}
        readOnly={readOnly}
        onDone={onFollowDone}
        onClose={onCloseJob}
        onFollow={onFollow}
        onError={onError}
        onInfo={onInfo}
      />
    );
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
