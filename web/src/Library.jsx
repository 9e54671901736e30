// The library: avatars and voice-overs, the server's (list, add, rename, remove).
import { useEffect, useState } from 'preact/hooks';
import { ApiError, getFresh, newKey, postForm, sendJson } from './api.js';
import { loadVoices } from './schema.js';
import { duration } from './timecode.js';

function nameFor(file, taken) {
  const stem = file.name.replace(/\.[^.]*$/, '').replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^[-.]+|-+$/g, '');
  const base = (stem || 'avatar').slice(0, 60);
  let name = base;
  for (let i = 2; taken.has(name); i += 1) name = `${base}-${i}`;
  return name;
}

function Thumb({ avatar }) {
  // by URL: the media cookie lets the browser fetch it (and cache it)
  return avatar.thumbnail ? (
    <img src={`${avatar.thumbnail}?px=96&v=${avatar.size_bytes || 0}`} alt="" width="48" height="48" />
  ) : (
    <span class="thumb-empty" aria-hidden="true" />
  );
}

export function Library({ readOnly, avatar, voice, wantAvatar, onAvatar, onVoice, onError, onInfo, threshold, minSilence }) {
  const [avatars, setAvatars] = useState([]);
  const [voices, setVoices] = useState([]); // the server's (GET /v1/audio): every tab and browser sees them
  const [choices, setChoices] = useState([]);
  const [busy, setBusy] = useState('');
  const [text, setText] = useState('');
  const [lang, setLang] = useState('');
  const [offer, setOffer] = useState(null); // an avatar already made from the same file

  const refresh = () =>
    getFresh('/v1/avatars').then(
      (r) => {
        setAvatars(r.avatars);
        return r.avatars;
      },
      (e) => onError(e),
    );
  const refreshVoices = () =>
    getFresh('/v1/audio').then(
      (r) => setVoices(r.voiceovers),
      (e) => onError(e),
    );
  useEffect(() => {
    refresh().then((list) => {
      const a = list && wantAvatar && list.find((x) => x.name === wantAvatar);
      if (a && !avatar) onAvatar(a); // restored from the URL
    });
    refreshVoices();
    loadVoices().then(setChoices, () => {});
  }, [wantAvatar]);

  function keepVoice(a) {
    refreshVoices();
    onVoice(a);
  }

  async function renameVoice(v) {
    const name = prompt(`A new name for ${v.filename}`, v.filename);
    if (!name || name === v.filename) return;
    try {
      await sendJson(`/v1/audio/${v.id}`, 'PATCH', { filename: name });
      await refreshVoices();
      onInfo(`Voice-over renamed ${name}`);
    } catch (e) {
      onError(e);
    }
  }

  async function renameAvatar(a) {
    const name = prompt(`A new name for the avatar ${a.name} (letters, digits, '.', '_' or '-')`, a.name);
    if (!name || name === a.name) return;
    try {
      const renamed = await sendJson(`/v1/avatars/${encodeURIComponent(a.name)}`, 'PATCH', { name });
      await refresh();
      if (avatar?.name === a.name) onAvatar(renamed); // the selection (and the URL) follow it
      onInfo(`Avatar ${a.name} renamed ${renamed.name}`);
    } catch (e) {
      onError(e);
    }
  }

  async function removeAvatar(a) {
    if (!confirm(`Remove the avatar ${a.name} from the server?`)) return;
    try {
      await sendJson(`/v1/avatars/${encodeURIComponent(a.name)}`, 'DELETE');
      onInfo(`Avatar ${a.name} removed`);
    } catch (e) {
      onError(e); // the server's sentence (e.g. removed meanwhile by another browser)
    }
    const list = await refresh(); // either way the list is the server's again
    const gone = list && !list.some((x) => x.name === a.name);
    if (gone && avatar?.name === a.name) onAvatar(null); // the selection (and the URL) drop it
  }

  async function removeVoice(v) {
    if (!confirm(`Remove the voice-over ${v.filename} from the server?`)) return;
    try {
      await sendJson(`/v1/audio/${v.id}`, 'DELETE');
      await refreshVoices();
      onInfo(`Voice-over ${v.filename} removed`);
    } catch (e) {
      onError(e);
    }
  }

  async function addAvatar(e) {
    const file = e.currentTarget.files[0];
    e.currentTarget.value = '';
    if (!file || busy) return; // not disabled while busy: focus stays on it
    setBusy('avatar');
    onInfo(`Preparing ${file.name} (a video takes a while: its face is tracked)…`);
    try {
      const name = nameFor(file, new Set(avatars.map((a) => a.name)));
      const a = await postForm('/v1/avatars', { name, file }, { 'Idempotency-Key': newKey() });
      await refresh();
      onAvatar(a);
      onInfo(`Avatar ${a.name} added`);
    } catch (err) {
      const same = err instanceof ApiError && err.status === 409 && /already avatar '([^']+)'/.exec(err.message);
      if (same) setOffer(same[1]);
      onError(err);
    } finally {
      setBusy('');
    }
  }

  async function addVoice(e) {
    const file = e.currentTarget.files[0];
    e.currentTarget.value = '';
    if (!file || busy) return;
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
      {offer && (
        <p class="hint" data-testid="duplicate">
          This file is already the avatar <strong>{offer}</strong>.{' '}
          <button
            type="button"
            onClick={() => {
              const a = avatars.find((x) => x.name === offer);
              if (a) onAvatar(a);
              setOffer(null);
            }}
          >
            Use {offer}
          </button>
        </p>
      )}
      <ul class="pick" aria-label="Avatars">
        {avatars.map((a) => (
          <li key={a.name} class="withtools">
            <button
              type="button"
              aria-pressed={avatar?.name === a.name}
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
            {!readOnly && (
              <span class="tools stack">
                <button type="button" class="small" aria-label={`Rename the avatar ${a.name}`} onClick={() => renameAvatar(a)}>
                  Rename
                </button>
                <button type="button" class="small" aria-label={`Remove the avatar ${a.name}`} onClick={() => removeAvatar(a)}>
                  Remove
                </button>
              </span>
            )}
          </li>
        ))}
        {avatars.length === 0 && <li class="muted small">No avatars yet.</li>}
      </ul>
      {!readOnly && (
        <label class={`button file ${busy === 'avatar' ? 'busy' : ''}`}>
          {busy === 'avatar' ? 'Preparing…' : 'Add photo or video…'}
          <input type="file" accept="image/*,video/*" data-testid="avatar-file" aria-disabled={busy !== ''} onChange={addAvatar} />
        </label>
      )}

      <h2>Voice-overs</h2>
      <ul class="pick" aria-label="Voice-overs">
        {voices.map((v) => (
          <li key={v.id} class="withtools">
            <button
              type="button"
              aria-pressed={voice?.id === v.id}
              class={voice?.id === v.id ? 'item selected' : 'item'}
              onClick={() => onVoice(v)}
            >
              <span>
                <strong>{v.filename}</strong>
                <small>
                  {voice?.id === v.id ? `${duration(voice.duration_s)}, ${voice.silent_percent}% silent` : `${Math.round(v.bytes / 1024)} KB`}
                </small>
              </span>
            </button>
            {!readOnly && (
              <span class="tools">
                <button type="button" class="small" aria-label={`Rename ${v.filename}`} onClick={() => renameVoice(v)}>
                  Rename
                </button>
                <button type="button" class="small" aria-label={`Remove ${v.filename}`} onClick={() => removeVoice(v)}>
                  Remove
                </button>
              </span>
            )}
          </li>
        ))}
        {voices.length === 0 && <li class="muted small">No voice-overs on the server yet.</li>}
      </ul>
      {voice && (
        <audio controls preload="metadata" src={`/v1/audio/${voice.id}/file`} aria-label={`Listen to ${voice.filename}`} data-testid="voice-audio" />
      )}
      {!readOnly && (
        <>
          <label class={`button file ${busy === 'voice' ? 'busy' : ''}`}>
            {busy === 'voice' ? 'Uploading…' : 'Add voice-over…'}
            <input type="file" accept="audio/*,video/*" data-testid="audio-file" aria-disabled={busy !== ''} onChange={addVoice} />
          </label>
          <form class="speak" onSubmit={speak}>
            <label for="speak-text">Or type what the presenter says</label>
            <textarea id="speak-text" rows="3" value={text} onInput={(e) => setText(e.currentTarget.value)} />
            <div class="row">
              <label for="speak-voice">Voice</label>
              <select id="speak-voice" value={lang} title="the natural default voice (Piper joe), an imported Piper voice, or espeak" onChange={(e) => setLang(e.currentTarget.value)}>
                <option value="">default (joe)</option>
                {choices.map((c) => (
                  <option key={c} value={c}>
                    {c}
                  </option>
                ))}
              </select>
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
