"""Watch folders: a voice-over (or a ``.txt`` script, spoken with the voice) dropped into a folder becomes a
finished clip and its sidecars in the output folder.

    w = WatchFolder("in/", delivery="xdcam-hd422", out="out/", avatar="anna")
    w.recover()                 # what a stopped watcher left in flight: redone once, never twice
    while True: w.poll()        # one pass: settled files rendered one at a time (``studio watch``)

**Settings.** ``IN_DIR/studio.toml`` (optional) picks the folder's avatar, delivery, output folder and
any render setting (``[settings]``: ``engine = "classic"``, ``captions = "srt"`` ...); the command line's
values win over the file's. A bad file is one sentence before anything is watched.

**Arrival.** A file is taken once its size and modification time have not changed over two passes and
it is not empty; hidden files and the temporary names copies use (``.part``, ``.tmp``, ``.crdownload``,
``~``, ``.!`` ...) are never taken, nor anything but audio and ``.txt``. So a file still being copied is
never read.

**Bookkeeping** lives in ``IN_DIR/.studio-watch/``: a taken file is first *moved* there (``work/``, a
rename on the same file system) with a journal entry counting its attempts; after the render its source
moves to ``done/YYYY-MM-DD/`` or, on failure, to ``failed/`` with ``NAME.txt`` saying why in one
sentence. A watcher stopped mid-render (killed, power cut) finds the file in ``work/`` at its next start:
tried once, it is redone; tried twice, it goes to ``failed/`` (never a third time). Nothing is deleted and
nothing is overwritten: an output name that exists gets the next number (``_002``), as every render does;
a ``done/`` or ``failed/`` name that exists too.

**Check gate.** With ``check = true`` or a ``check_gate`` (``check = "ok,jitter=5"`` in ``[settings]``,
or a delivery's), each clip is checked after its render (its visual report ``NAME.check.html`` beside
it); a clip that misses its gate is marked failed: its source goes to ``failed/`` with the missed limits
as the reason, and the clip and its report stay in the output folder (``service.checks`` judges).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio.core.errors import InputError

log = logging.getLogger(__name__)

AUDIO_SUFFIXES = (".wav", ".flac", ".mp3", ".m4a", ".aac", ".ogg", ".opus", ".aif", ".aiff", ".w64")
TEMP_SUFFIXES = (".part", ".partial", ".tmp", ".temp", ".crdownload", ".download", ".filepart", ".swp", "~")
STATE = ".studio-watch"
MAX_ATTEMPTS = 2  # a file in flight when the watcher stopped is redone once, never twice
SETTINGS_FILE = "studio.toml"


@dataclass
class Outcome:
    source: str
    state: str  # "done" or "failed"
    output: str = ""
    reason: str = ""
    files: dict = field(default_factory=dict)
    check: dict = field(default_factory=dict)  # the lip-sync check's summary (with its ``gate``), when checked


def is_candidate(p: Path) -> bool:
    """A name a watcher may take: not hidden, not a copy's temporary, audio or a .txt script."""
    n = p.name
    if n.startswith((".", "~")) or n.startswith(".!") or n == SETTINGS_FILE:
        return False
    low = n.lower()
    if any(low.endswith(s) for s in TEMP_SUFFIXES):
        return False
    return p.suffix.lower() in AUDIO_SUFFIXES + (".txt",)


def read_folder_settings(folder: Path) -> dict[str, Any]:
    """``folder/studio.toml``: ``avatar``, ``delivery``, ``out``, ``voice`` and a ``[settings]`` table."""
    path = folder / SETTINGS_FILE
    if not path.is_file():
        return {}
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{path}: is not a readable TOML file ({exc})") from None
    unknown = sorted(set(data) - {"avatar", "delivery", "out", "voice", "settings"})
    if unknown:
        raise InputError(f"{path}: unknown key {unknown[0]!r}; the keys are avatar, delivery, out, voice, [settings]")
    if not isinstance(data.get("settings", {}), dict):
        raise InputError(f"{path}: settings must be a table ([settings])")
    return data


class WatchFolder:
    """One watched folder (see the module's docstring)."""

    def __init__(
        self,
        in_dir,
        *,
        delivery: str = "",
        out=None,
        avatar: str = "",
        voice: str = "",
        settings: dict[str, Any] | None = None,
    ):
        self.in_dir = Path(in_dir).expanduser()
        if not self.in_dir.is_dir():
            raise InputError(f"{self.in_dir}: is not a folder to watch")
        folder = read_folder_settings(self.in_dir)
        self.delivery = delivery or str(folder.get("delivery") or "")
        self.avatar = avatar or str(folder.get("avatar") or "")
        self.voice = voice or str(folder.get("voice") or "")
        out_dir = out or folder.get("out") or (self.in_dir / "out")
        self.out_dir = (self.in_dir / Path(str(out_dir)).expanduser()).resolve()
        self.values = {**dict(folder.get("settings") or {}), **dict(settings or {})}
        if not self.avatar:
            raise InputError(f"{self.in_dir}: no avatar to render with; give --avatar NAME or avatar = in studio.toml")
        self.settings = self._settings()  # one sentence now for a bad delivery or setting
        self.state = self.in_dir / STATE
        self.work = self.state / "work"
        self.failed = self.in_dir / "failed"
        self.done = self.in_dir / "done"
        self._seen: dict[str, tuple[tuple[int, int], float]] = {}  # name: (size and mtime, since when)
        self.settle_s = 2.0
        for d in (self.work, self.failed, self.done):
            d.mkdir(parents=True, exist_ok=True)

    def _settings(self):
        from studio.core.render.resolve import resolve
        from studio.core.settings import from_dict

        values = dict(self.values)
        if self.delivery:
            values["delivery"] = self.delivery
        from_dict(values, strict=True)  # one sentence for an unknown or bad setting
        # the delivery's values under the folder's own settings (those win: they were written on purpose)
        return resolve(values, set(self.values) | {"delivery"}, self.avatar).settings

    # -- the journal ----------------------------------------------------------------------------

    def _journal_path(self) -> Path:
        return self.state / "journal.json"

    def _journal(self) -> dict[str, int]:
        try:
            return dict(json.loads(self._journal_path().read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return {}

    def _save_journal(self, journal: dict[str, int]) -> None:
        tmp = self._journal_path().with_suffix(".tmp")
        tmp.write_text(json.dumps(journal), encoding="utf-8")
        os.replace(tmp, self._journal_path())

    # -- one pass -------------------------------------------------------------------------------

    def recover(self) -> list[Outcome]:
        """Files a stopped watcher left in ``work/``: redone once (tried once), else failed."""
        out = []
        journal = self._journal()
        for p in sorted(self.work.iterdir()):
            if not p.is_file():
                continue
            if journal.get(p.name, 1) >= MAX_ATTEMPTS:
                out.append(self._fail(p, "it was being rendered twice when the watcher stopped; it is not tried again"))
            else:
                out.append(self._process(p))
        return out

    def settled(self) -> list[Path]:
        """The candidates whose size and modification time have not changed for ``settle_s`` (and are
        not empty): a file still being copied keeps changing."""
        now: dict[str, tuple[tuple[int, int], float]] = {}
        ready = []
        t = time.monotonic()
        for p in sorted(self.in_dir.iterdir()):
            if not p.is_file() or not is_candidate(p):
                continue
            try:
                st = p.stat()
            except OSError:
                continue
            sig = (st.st_size, st.st_mtime_ns)
            before = self._seen.get(p.name)
            since = before[1] if before and before[0] == sig else t
            now[p.name] = (sig, since)
            if st.st_size > 0 and before is not None and t - since >= self.settle_s:
                ready.append(p)
        self._seen = now
        return ready

    def poll(self) -> list[Outcome]:
        """One pass: every settled file taken and rendered, one at a time."""
        return [self._take(p) for p in self.settled()]

    def run(self, interval_s: float = 1.0, stop=None) -> None:
        """Recover, then poll every ``interval_s`` until ``stop()`` (a callable) is true."""
        self.recover()
        while not (stop and stop()):
            self.poll()
            time.sleep(interval_s)

    # -- one file -------------------------------------------------------------------------------

    def _take(self, p: Path) -> Outcome:
        dest = _free_name(self.work / p.name)
        os.replace(p, dest)  # ours now: a copy that starts again under the same name is another file
        self._seen.pop(p.name, None)
        return self._process(dest)

    def _process(self, src: Path) -> Outcome:
        journal = self._journal()
        journal[src.name] = journal.get(src.name, 0) + 1
        self._save_journal(journal)
        try:
            outcome = self._render(src)
            gate = outcome.check.get("gate") or {}
            if gate and not gate.get("met"):  # marked failed, the clip and its report kept in the output folder
                failed = self._fail(src, f"the lip-sync check missed its gate ({'; '.join(gate['failures'])})")
                return Outcome(str(src), "failed", outcome.output, failed.reason, outcome.files, outcome.check)
        except Exception as exc:  # noqa: BLE001 - any failure: the source kept with its reason
            from studio.core.errors import StudioError

            reason = str(exc) if isinstance(exc, (StudioError, OSError)) else f"{type(exc).__name__}: {exc}"
            log.warning("watch: %s failed: %s", src.name, reason)
            return self._fail(src, reason)
        day = time.strftime("%Y-%m-%d")
        (self.done / day).mkdir(parents=True, exist_ok=True)
        os.replace(src, _free_name(self.done / day / src.name))
        self._forget(src.name)
        return outcome

    def _render(self, src: Path) -> Outcome:
        from studio.service.driver import Render
        from studio.service.request import RenderRequest

        self.out_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as stack:
            audio = src
            if src.suffix.lower() == ".txt":
                audio = stack.enter_context(self._spoken(src))
            from studio.core.media.codecs import spec

            output = self.out_dir / (src.stem + spec(self.settings.codec).suffix)
            req = RenderRequest(
                self.avatar,
                str(audio),
                str(output),
                self.settings,
                overwrite=False,
                explicit=tuple(sorted(self.values)),
            )
            render = Render(req)
            for _ in render.run():
                pass
            res = render.finished_result()
            outcome = Outcome(str(src), "done", res.output, files=dict(res.files))
            if self.settings.checked:  # ``check``/``check_gate``: the same check and judge as the queue's
                from studio.service.checks import check_here

                summary, _ = check_here(res.output, req)
                outcome.files.update(summary.pop("files", None) or {})
                outcome.check = summary
        return outcome

    @contextlib.contextmanager
    def _spoken(self, script: Path):
        """A ``.txt`` spoken with the voice: a WAV (and its sentence times, for captions) in a temporary."""
        import tempfile

        from studio.core.media import speech

        text = script.read_text(encoding="utf-8", errors="replace")
        s = speech.synthesize(text, self.voice)
        with tempfile.TemporaryDirectory(prefix="studio-watch.") as tmp:
            wav = Path(tmp) / (script.stem + ".wav")
            shutil.copyfile(s.path, wav)
            speech.write_sentences(s, wav.with_suffix(".speech.json"), wav)
            yield wav

    def _fail(self, src: Path, reason: str) -> Outcome:
        dest = _free_name(self.failed / src.name)
        os.replace(src, dest)
        sentence = reason.strip().splitlines()[0] if reason.strip() else "it failed"
        note = dest.with_name(dest.name + ".txt")
        note.write_text(sentence[0].upper() + sentence[1:].rstrip(".") + ".\n", encoding="utf-8")
        self._forget(src.name)
        return Outcome(str(src), "failed", reason=sentence)

    def _forget(self, name: str) -> None:
        journal = self._journal()
        journal.pop(name, None)
        self._save_journal(journal)


def _free_name(path: Path) -> Path:
    """``path``, or the first ``stem_002.ext``, ``_003`` ... that does not exist: nothing is overwritten."""
    if not path.exists():
        return path
    k = 2
    while True:
        alt = path.with_name(f"{path.stem}_{k:03d}{path.suffix}")
        if not alt.exists():
            return alt
        k += 1
