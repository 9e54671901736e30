// The queue (the server's, shared with the window and `studio queue`): cancel, retry, download, watch.
import { useEffect, useState } from 'preact/hooks';
import { call, follow, getFresh, newKey, openSession } from './api.js';
import { backoff } from './route.js';
import { duration } from './timecode.js';

const FINAL = ['done', 'failed', 'cancelled', 'interrupted', 'expired'];

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
      {check.gate && !check.gate.met && (
        <span class="badge failed" data-testid="check-gate" title={check.gate.failures.join('; ')}>
          gate {check.gate.limits} missed: {check.gate.failures.join('; ')}
        </span>
      )}
    </>
  );
}

function Row({ job, live: streamed, readOnly, followed, onFollow, act }) {
  const live = streamed || job.live;
  const pct = Math.round((job.progress || 0) * 100);
  const check = job.result?.check;
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
        {job.result && (job.result.notes || []).map((note) => (
          <span class="note small" data-testid="note" key={note}>
            note: {note}
          </span>
        ))}
      </div>
      <div class="buttons">
        <button type="button" onClick={() => onFollow(job.id)} aria-label={`${job.state === 'done' ? 'Play' : 'Watch'} job ${job.id}`}>
          {job.state === 'done' ? 'Play' : 'Watch'}
        </button>
        {job.state === 'done' && (
          <a class="button" href={job.links.video} download={job.output || `render-${job.id}.mp4`} aria-label={`Download job ${job.id}'s video`}>
            Download
          </a>
        )}
        {!readOnly && (job.state === 'queued' || job.state === 'running' || job.state === 'held') && (
          <button type="button" onClick={() => act(() => call(job.links.cancel, { method: 'DELETE' }), `Job ${job.id} cancelled`)} aria-label={`Cancel job ${job.id}`}>
            Cancel
          </button>
        )}
        {!readOnly && FINAL.includes(job.state) && (
          <button
            type="button"
            onClick={() =>
              act(async () => {
                const again = await (await call(job.links.retry, { method: 'POST', headers: { 'Idempotency-Key': newKey() } })).json();
                onFollow(again.id); // the viewer follows the new job
              }, `Job ${job.id} queued again as a new job`)
            }
            aria-label={`Retry job ${job.id}`}
          >
            Retry
          </button>
        )}
      </div>
    </li>
  );
}

export function Queue({ tick, readOnly, followed, onFollow, onError, onInfo, onOnline }) {
  const [jobs, setJobs] = useState([]);
  const [live, setLive] = useState({}); // job id -> its latest progress event
  const [mine, setMine] = useState(0);
  const [offline, setOffline] = useState(false);

  // the list once, then again only when the event stream says a job changed (ETag: 304 if not)
  useEffect(() => {
    const ctl = new AbortController();
    let again = false;
    let loading = null;
    const load = async () => {
      if (loading) {
        again = true; // one request at a time; the latest change is asked after
        return;
      }
      loading = getFresh('/v1/renders?limit=30', { signal: ctl.signal });
      try {
        const page = await loading;
        setJobs(page.renders);
      } finally {
        loading = null;
        if (again && !ctl.signal.aborted) {
          again = false;
          load().catch(() => {});
        }
      }
    };
    (async () => {
      for (let attempt = 0; !ctl.signal.aborted; attempt += 1) {
        try {
          await load();
          await follow(
            '/v1/events',
            (name, data) => {
              if (name === 'hello') {
                if (attempt > 0) openSession().catch(() => {}); // a restarted server forgot the media cookie
                setOffline(false);
                onOnline?.();
                attempt = 0;
              } else if (name === 'progress') setLive((m) => ({ ...m, [data.id]: data }));
              else if (name === 'state') load().catch(() => {});
            },
            ctl.signal,
          );
        } catch (e) {
          if (e.name === 'AbortError') return;
          if (e.status && e.status < 500) return onError(e);
        }
        if (ctl.signal.aborted) return;
        setOffline(true); // the stream ended (the server stopped): ask again, 1 s, 2 s ... 15 s apart
        await new Promise((r) => setTimeout(r, backoff(attempt)));
      }
    })();
    return () => ctl.abort();
  }, [tick, mine]);

  // a finished job's lip-sync check ends without a state change: its verdict is asked for (304 until then)
  const checking = jobs.some((j) => j.result?.check && ['pending', 'running'].includes(j.result.check.state));
  useEffect(() => {
    if (!checking) return undefined;
    const timer = setInterval(() => getFresh('/v1/renders?limit=30').then((p) => setJobs(p.renders), () => {}), 3000);
    return () => clearInterval(timer);
  }, [checking]);

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
      {offline && (
        <p class="badge warn" role="status" data-testid="queue-offline">
          The server cannot be reached; trying again…
        </p>
      )}
      {jobs.length === 0 ? (
        <p class="muted small">No renders yet.</p>
      ) : (
        <ul>
          {jobs.map((j) => (
            <Row key={j.id} job={j} live={j.state === 'running' ? live[j.id] : null} readOnly={readOnly} followed={followed === j.id} onFollow={onFollow} act={act} />
          ))}
        </ul>
      )}
    </section>
  );
}
