// The queue (the server's, shared with the window and `studio queue`): cancel, retry, download, watch.
import { useEffect, useState } from 'preact/hooks';
import { call, getJson, newKey } from './api.js';
import { duration } from './timecode.js';

const FINAL = ['done', 'failed', 'cancelled', 'interrupted', 'expired'];

/** The video, fetched with the token and saved under the job's output name. */
export async function download(job) {
  const res = await call(job.links.video);
  const url = URL.createObjectURL(await res.blob());
  const a = document.createElement('a');
  a.href = url;
  a.download = job.output || `render-${job.id}.mp4`;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** `studio check`'s verdict on a finished render. */
export function CheckVerdict({ check, why = false }) {
  if (check.state === 'pending' || check.state === 'running') {
    return <span class="badge">lip-sync check {check.state}…</span>;
  }
  if (check.state !== 'done') {
    return <span class="badge warn" title={check.reason || ''}>check {check.state}{check.reason ? `: ${check.reason}` : ''}</span>;
  }
  const cls = check.verdict === 'ok' ? 'done' : check.verdict === 'check' ? 'warn' : 'failed';
  const offset = check.offset_frames === null || check.offset_frames === undefined ? '' : `, offset ${check.offset_frames} frames`;
  return (
    <>
      <span class={`badge ${cls}`} data-testid="check" title={check.reason || ''}>
        lip sync: {check.verdict}
        {offset}
      </span>
      {why && check.reason && (
        <span class="muted small" data-testid="check-reason">
          {check.reason}
        </span>
      )}
    </>
  );
}

function Row({ job, readOnly, followed, onFollow, act }) {
  const live = job.live;
  const pct = Math.round((job.progress || 0) * 100);
  const check = job.result && job.result.check;
  return (
    <li class={`job ${followed ? 'selected' : ''}`} data-testid={`job-${job.id}`}>
      <div class="what">
        <strong>#{job.id}</strong> <span>{job.avatar}</span> <span class="muted">+ {job.audio}</span>
        {job.frame_range && <span class="muted small"> frames {job.frame_range[0]}–{job.frame_range[1] - 1}</span>}
      </div>
      <div class="how">
        <span class={`badge ${job.state}`}>{job.state}</span>
        {job.state === 'running' && <progress max="100" value={pct} aria-label={`Job ${job.id}'s progress`} />}
        <span class="muted small">
          {job.state === 'queued' && job.position ? `#${job.position} in line · ` : ''}
          {job.state === 'running' && live ? `${live.fps.toFixed(1)} frames/s · ` : ''}
          {(job.state === 'queued' || job.state === 'running') && job.eta_s !== null && job.eta_s !== undefined ? `ETA ${duration(job.eta_s)}` : ''}
          {job.state === 'done' && job.fps ? `${job.frames} frames at ${job.fps.toFixed(1)} frames/s` : ''}
        </span>
        {job.reason && <span class="error small">{job.reason}</span>}
        {check && <CheckVerdict check={check} />}
      </div>
      <div class="buttons">
        <button type="button" onClick={() => onFollow(job.id)} aria-label={`Watch job ${job.id}`}>
          {job.state === 'done' ? 'Play' : 'Watch'}
        </button>
        {job.state === 'done' && (
          <button type="button" onClick={() => act(() => download(job))} aria-label={`Download job ${job.id}'s video`}>
            Download
          </button>
        )}
        {!readOnly && (job.state === 'queued' || job.state === 'running' || job.state === 'held') && (
          <button type="button" onClick={() => act(() => call(job.links.cancel, { method: 'DELETE' }), `Job ${job.id} cancelled`)} aria-label={`Cancel job ${job.id}`}>
            Cancel
          </button>
        )}
        {!readOnly && FINAL.includes(job.state) && (
          <button
            type="button"
            onClick={() => act(() => call(job.links.retry, { method: 'POST', headers: { 'Idempotency-Key': newKey() } }), `Job ${job.id} queued again as a new job`)}
            aria-label={`Retry job ${job.id}`}
          >
            Retry
          </button>
        )}
      </div>
    </li>
  );
}

export function Queue({ tick, readOnly, followed, onFollow, onError, onInfo }) {
  const [jobs, setJobs] = useState([]);
  const [mine, setMine] = useState(0);
  useEffect(() => {
    let alive = true;
    let timer;
    let failing = false;
    const load = async () => {
      try {
        const page = await getJson('/v1/renders?limit=30');
        if (alive) setJobs(page.renders);
        failing = false;
      } catch (e) {
        if (alive && !failing) onError(e); // said once, then asked again every 5 s until it answers
        failing = true;
      }
      if (alive) timer = setTimeout(load, failing ? 5000 : 1000);
    };
    load();
    return () => ((alive = false), clearTimeout(timer));
  }, [tick, mine]);

  async function act(fn, done) {
    try {
      await fn();
      if (done) onInfo(done);
    } catch (e) {
      onError(e);
    }
    setMine((m) => m + 1);
  }

  return (
    <section class="queue" aria-label="Queue">
      <h2>Queue</h2>
      {jobs.length === 0 ? (
        <p class="muted small">No renders yet.</p>
      ) : (
        <ul>
          {jobs.map((j) => (
            <Row key={j.id} job={j} readOnly={readOnly} followed={followed === j.id} onFollow={onFollow} act={act} />
          ))}
        </ul>
      )}
    </section>
  );
}
