// Studio Live (docs/live.md): pick an avatar, Start, talk into the microphone or type text, see and hear
// the presenter over WebRTC (WHEP), its latency and frames/s; Stop. The session is POST /v1/live; the
// picture comes from POST {whep} with this page's SDP offer; the microphone is a track of the same
// connection (sendrecv) when the browser grants it.
import { useEffect, useRef, useState } from 'preact/hooks';
import { call, getJson, sendJson } from './api.js';

const ms = (v) => (v === null || v === undefined ? '–' : `${Math.round(v)} ms`);

async function whep(url, pc) {
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((resolve) => {
    // the offer with its candidates (the server answers once: no trickle)
    if (pc.iceGatheringState === 'complete') return resolve();
    const done = () => pc.iceGatheringState === 'complete' && resolve();
    pc.addEventListener('icegatheringstatechange', done);
    setTimeout(resolve, 2000);
  });
  const res = await call(url, { method: 'POST', body: pc.localDescription.sdp, headers: { 'Content-Type': 'application/sdp' } });
  await pc.setRemoteDescription({ type: 'answer', sdp: await res.text() });
  return res.headers.get('Location');
}

export function Live({ readOnly, onError, onInfo }) {
  const [avatars, setAvatars] = useState(null);
  const [name, setName] = useState('');
  const [session, setSession] = useState(null);
  const [figures, setFigures] = useState(null);
  const [text, setText] = useState('');
  const [mic, setMic] = useState(true);
  const [busy, setBusy] = useState(false);
  const video = useRef(null);
  const peer = useRef(null); // {pc, location, stream}

  useEffect(() => {
    getJson('/v1/avatars').then((r) => {
      const ok = r.avatars.filter((a) => !a.damaged);
      setAvatars(ok);
      if (ok.length) setName(ok[0].name);
    }, onError);
  }, []);

  useEffect(() => {
    if (!session) return undefined;
    const timer = setInterval(async () => {
      try {
        setFigures((await getJson(session.links.self)).figures);
      } catch (e) {
        if (e.status === 404) setSession(null);
      }
    }, 1000);
    return () => clearInterval(timer);
  }, [session]);

  useEffect(() => () => stop(), []); // leaving the view ends the session

  async function start() {
    setBusy(true);
    try {
      const s = await sendJson('/v1/live', 'POST', { avatar: name });
      const pc = new RTCPeerConnection();
      pc.addTransceiver('video', { direction: 'recvonly' });
      let stream = null;
      if (mic && navigator.mediaDevices) {
        try {
          stream = await navigator.mediaDevices.getUserMedia({ audio: true });
          for (const t of stream.getTracks()) pc.addTrack(t, stream);
        } catch {
          onInfo('No microphone: type what the presenter says instead.');
        }
      }
      if (!stream) pc.addTransceiver('audio', { direction: 'recvonly' });
      const media = new MediaStream();
      pc.ontrack = (ev) => {
        media.addTrack(ev.track);
        if (video.current) video.current.srcObject = media;
      };
      const location = await whep(s.links.whep, pc);
      peer.current = { pc, location, stream, session: s };
      setSession(s);
    } catch (e) {
      onError(e);
    } finally {
      setBusy(false);
    }
  }

  async function stop() {
    const p = peer.current;
    peer.current = null;
    if (!p) return;
    for (const t of p.stream?.getTracks() || []) t.stop();
    p.pc.close();
    await call(p.location, { method: 'DELETE' }).catch(() => {});
    await call(p.session.links.self, { method: 'DELETE' }).catch(() => {});
    setSession(null);
    setFigures(null);
  }

  async function speak() {
    try {
      await sendJson(session.links.speak, 'POST', { text });
      setText('');
    } catch (e) {
      onError(e);
    }
  }

  return (
    <section class="live" aria-label="Live">
      <div class="live-controls">
        <label>
          Avatar{' '}
          <select value={name} disabled={!!session} onChange={(e) => setName(e.currentTarget.value)} data-testid="live-avatar">
            {(avatars || []).map((a) => (
              <option value={a.name}>{a.name}</option>
            ))}
          </select>
        </label>
        <label>
          <input type="checkbox" checked={mic} disabled={!!session} onChange={(e) => setMic(e.currentTarget.checked)} /> Microphone
        </label>
        {!session ? (
          <button type="button" class="primary" disabled={readOnly || busy || !name} onClick={start}>
            {busy ? 'Starting…' : 'Start'}
          </button>
        ) : (
          <button type="button" onClick={stop}>
            Stop
          </button>
        )}
      </div>
      <video ref={video} class="live-video" autoplay playsinline aria-label="The live presenter" />
      {session && (
        <form
          class="live-say"
          onSubmit={(e) => {
            e.preventDefault();
            if (text.trim()) speak();
          }}
        >
          <input type="text" value={text} placeholder="Type what the presenter says" onInput={(e) => setText(e.currentTarget.value)} aria-label="Text to say" />
          <button type="submit" disabled={!text.trim()}>
            Say
          </button>
          <button type="button" onClick={() => call(session.links.clear, { method: 'POST' }).catch(onError)}>
            Interrupt
          </button>
        </form>
      )}
      <p class="live-figures muted" data-testid="live-figures" aria-live="off">
        {figures
          ? `${figures.fps} frames/s · latency ${ms(figures.latency_ms.p50)} (p95 ${ms(figures.latency_ms.p95)}) · first frame ${
              figures.first_frame_s === null ? '–' : `${figures.first_frame_s} s`
            } · late ${figures.late} · dropped ${figures.dropped}`
          : session
            ? 'Connecting…'
            : 'Start a live presenter: it rests until it hears a voice.'}
      </p>
    </section>
  );
}
