// The library: avatars (the server's) and voice-overs (uploaded or spoken in this tab).
import { useEffect, useState } from 'preact/hooks';
import { blobUrl, getJson, newKey, postForm } from './api.js';
import { duration } from './timecode.js';

const VOICES_KEY = 'studio.voiceovers';

function nameFor(file, taken) {
  const stem = file.name.replace(/\.[^.]*$/, '').replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^[-.]+|-+$/g, '');
  const base = (stem || 'avatar').slice(0, 60);
  let name = base;
  for (let i = 2; taken.has(name); i += 1) name = `${base}-${i}`;
  return name;
}

function Thumb({ avatar }) {
  const [src, setSrc] = useState(null);
  useEffect(() => {
    if (!avatar.thumbnail) return undefined;
    const ctl = new AbortController();
    let url;
    blobUrl(avatar.thumbnail, ctl.signal).then((u) => setSrc((url = u)), () => {});
    return () => (ctl.abort(), url && URL.revokeObjectURL(url));
  }, [avatar.thumbnail, avatar.size_bytes]);
  return src ? <img src={src} alt="" width="48" height="48" /> : <span class="thumb-empty" aria-hidden="true" />;
}

export function Library({ readOnly, avatar, voice, onAvatar, onVoice, onError, onInfo, threshold, minSilence }) {
  const [avatars, setAvatars] = useState([]);
  const [voices, setVoices] = useState(() => JSON.parse(sessionStorage.getItem(VOICES_KEY) || '[]'));
  const [busy, setBusy] = useState('');
  const [text, setText] = useState('');
  const [lang, setLang] = useState('');

  const refresh = () =>
    getJson('/v1/avatars').then(
      (r) => setAvatars(r.avatars),
      (e) => onError(e),
    );
  useEffect(() => {
    refresh();
  }, []);
  useEffect(() => sessionStorage.setItem(VOICES_KEY, JSON.stringify(voices)), [voices]);

  function keepVoice(a) {
    setVoices((vs) => [a, ...vs.filter((v) => v.id !== a.id)]);
    onVoice(a);
  }

  async function addAvatar(e) {
    const file = e.currentTarget.files[0];
    e.currentTarget.value = '';
    if (!file) return;
    setBusy('avatar');
    onInfo(`Preparing ${file.name} (a video takes a while: its face is tracked)…`);
    try {
      const name = nameFor(file, new Set(avatars.map((a) => a.name)));
      const a = await postForm('/v1/avatars', { name, file }, { 'Idempotency-Key': newKey() });
      await refresh();
      onAvatar(a);
      onInfo(`Avatar ${a.name} added`);
    } catch (err) {
      onError(err);
    } finally {
      setBusy('');
    }
  }

  async function addVoice(e) {
    const file = e.currentTarget.files[0];
    e.currentTarget.value = '';
    if (!file) return;
    setBusy('voice');
    try {
      const fields = { file, threshold, min_silence: minSilence };
      keepVoice(await postForm('/v1/audio', fields, { 'Idempotency-Key': newKey() }));
      onInfo(`Voice-over ${file.name} uploaded`);
    } catch (err) {
      onError(err);
    } finally {
      setBusy('');
    }
  }

  async function speak(e) {
    e.preventDefault();
    setBusy('speak');
    try {
      keepVoice(await postForm('/v1/audio/speech', { text, voice: lang }, { 'Idempotency-Key': newKey() }));
      onInfo('The text is spoken');
    } catch (err) {
      onError(err);
    } finally {
      setBusy('');
    }
  }

  return (
    <section class="library" aria-label="Library">
      <h2>Avatars</h2>
      <ul class="pick" role="listbox" aria-label="Avatars">
        {avatars.map((a) => (
          <li key={a.name}>
            <button
              type="button"
              role="option"
              aria-selected={avatar?.name === a.name}
              class={avatar?.name === a.name ? 'item selected' : 'item'}
              disabled={a.damaged}
              title={a.damaged ? a.problem : undefined}
              onClick={() => onAvatar(a)}
            >
              <Thumb avatar={a} />
              <span>
                <strong>{a.name}</strong>
                <small>
                  {a.damaged ? 'damaged' : `${a.kind}${a.kind === 'video' ? `, ${a.frames} frames at ${a.fps}` : ''}, ${a.width}×${a.height}`}
                </small>
              </span>
            </button>
          </li>
        ))}
        {avatars.length === 0 && <li class="muted small">No avatars yet.</li>}
      </ul>
      {!readOnly && (
        <label class={`button file ${busy === 'avatar' ? 'busy' : ''}`}>
          {busy === 'avatar' ? 'Preparing…' : 'Add photo or video…'}
          <input type="file" accept="image/*,video/*" data-testid="avatar-file" disabled={busy !== ''} onChange={addAvatar} />
        </label>
      )}

      <h2>Voice-overs</h2>
      <ul class="pick" role="listbox" aria-label="Voice-overs">
        {voices.map((v) => (
          <li key={v.id}>
            <button
              type="button"
              role="option"
              aria-selected={voice?.id === v.id}
              class={voice?.id === v.id ? 'item selected' : 'item'}
              onClick={() => onVoice(v)}
            >
              <span>
                <strong>{v.filename}</strong>
                <small>
                  {duration(v.duration_s)}, {v.silent_percent}% silent
                </small>
              </span>
            </button>
          </li>
        ))}
        {voices.length === 0 && <li class="muted small">None in this tab yet.</li>}
      </ul>
      {!readOnly && (
        <>
          <label class={`button file ${busy === 'voice' ? 'busy' : ''}`}>
            {busy === 'voice' ? 'Uploading…' : 'Add voice-over…'}
            <input type="file" accept="audio/*,video/*" data-testid="audio-file" disabled={busy !== ''} onChange={addVoice} />
          </label>
          <form class="speak" onSubmit={speak}>
            <label for="speak-text">Or type what the presenter says</label>
            <textarea id="speak-text" rows="3" value={text} onInput={(e) => setText(e.currentTarget.value)} />
            <div class="row">
              <label for="speak-voice">Voice</label>
              <input id="speak-voice" value={lang} size="8" placeholder="joe" title="empty: the natural default voice (Piper joe); or an imported Piper voice, or espeak:en-gb" onInput={(e) => setLang(e.currentTarget.value)} />
              <button type="submit" disabled={busy !== '' || !text.trim()}>
                {busy === 'speak' ? 'Speaking…' : 'Speak'}
              </button>
            </div>
          </form>
        </>
      )}
    </section>
  );
}
