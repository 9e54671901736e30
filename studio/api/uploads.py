"""Uploads: streamed into the data folder under generated names, size-capped, sniffed by content.

    store = UploadStore(data_dir() / "uploads", max_bytes=200 * 2**20)
    audio = await store.save_audio(upload)       # Stored(id, path, filename, bytes); 413/415/422 otherwise
    path = store.audio_path(audio.id)            # reuse by id (404 for an unknown id)

What a client calls its file is kept for messages only; the name on disk is the first 16 hex digits
of the content's SHA-256 plus the extension of the format that was *detected* (soundfile for audio;
Pillow, then PyAV for avatars: the core's own readers), so the same file uploaded twice is stored
once and gets the same id. A file is written under a dot-name and renamed when complete and
checked, so nothing half-written or unchecked is ever found under a real name.

Two requests may store the same bytes at once (the same file, or one client sending it twice). Each
request that stores a file holds a reference to it until it ``settle``s (the file is kept: an upload
answered 201, a job queued) or ``discard``s it (refused: 429, 422 ...); a file a request wrote is
removed only when the last request holding it discards it and none settled it, so one client's
refusal never removes what another client is uploading or has just been answered.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from studio.api.errors import ApiError

ID_RE = re.compile(r"^[0-9a-f]{16}$")
FILE_RE = re.compile(r"[0-9a-f]{16}\.[a-z0-9]{1,8}")  # a stored file's name: id and detected extension
CHUNK = 1 << 20
AUDIO_EXT = {"WAV": ".wav", "FLAC": ".flac", "OGG": ".ogg", "MP3": ".mp3", "AIFF": ".aiff", "CAF": ".caf"}
# voice-overs FFmpeg reads (``AudioInfo.format`` of an FFmpeg source): M4A/AAC, a video's sound
AUDIO_EXT.update({"M4A/MP4": ".m4a", "MKV/WebM": ".mka", "AAC": ".aac", "AVI": ".avi", "WMA/ASF": ".wma"})
IMAGE_EXT = {"PNG": ".png", "JPEG": ".jpg", "MPO": ".jpg", "WEBP": ".webp", "BMP": ".bmp", "TIFF": ".tiff"}


@dataclass(frozen=True)
class Stored:
    id: str
    path: Path
    filename: str  # the client's name for it (display only)
    bytes: int
    kind: str  # audio | photo | video
    new: bool = False  # this upload wrote the file (it was not stored already)


class UploadStore:
    def __init__(self, root: Path, max_bytes: int, on_stored=None):
        self.root = Path(root)
        self.max_bytes = int(max_bytes)
        self.on_stored = on_stored  # called with (kind, bytes) for each file received (metrics)
        self._lock = threading.Lock()
        self._refs: dict[Path, int] = {}  # file -> requests holding it (neither settled nor discarded)
        self._fresh: set[Path] = set()  # files a request wrote that no request has settled yet
        for sub in ("audio", "avatars"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    # -- saving -------------------------------------------------------------------------------

    async def save_audio(self, upload, settle: bool = True) -> Stored:
        """A voice-over: 415 when it is not audio soundfile reads, 422 when it is but holds nothing.
        ``settle=False``: the caller settles or discards it when its request ends (``submit``)."""
        from starlette.concurrency import run_in_threadpool

        tmp, sha, size, name = await self._receive(upload, "audio")
        try:
            info = await run_in_threadpool(_probe_audio, tmp, name)
            stored = self._keep(tmp, "audio", sha, AUDIO_EXT.get(info.format, ".audio"), name, size, "audio")
        finally:
            _unlink(tmp)
        try:  # decoded once, here (NaN samples, decode limits): the analysis is cached for the render
            await run_in_threadpool(self.check_audio_file, stored.path, name)
        except BaseException:
            self.discard(stored)
            raise
        meta = self.root / "audio" / f"{stored.id}.json"
        try:
            with self._lock:
                row = json.loads(meta.read_text()) if meta.exists() else None
                if row is None:
                    row = {"id": stored.id, "filename": name, "bytes": size, "file": stored.path.name}
                owners = set(row.get("owners", [""]))
                if row.get("owners") is None or _owner() not in owners:
                    self._write_meta(meta, {**row, "owners": sorted(owners | {_owner()})})
        except BaseException:
            self.discard(stored)
            raise
        if settle:
            self.settle(stored)
        return stored

    async def save_avatar(self, upload, settle: bool = False) -> Stored:
        """An avatar source: 415 unless Pillow or PyAV decodes it as a photo or a video. The caller
        ``settle``s it once the avatar is made (or the job queued), else ``discard``s it."""
        from starlette.concurrency import run_in_threadpool

        tmp, sha, size, name = await self._receive(upload, "avatars")
        try:
            kind, ext = await run_in_threadpool(_sniff_avatar, tmp, name)
            stored = self._keep(tmp, "avatars", sha, ext, name, size, kind)
        finally:
            _unlink(tmp)
        if settle:
            self.settle(stored)
        return stored

    def check_avatar(self, stored: Stored) -> None:
        """An avatar uploaded with a render is looked at before the 202: a photo is face-tracked and
        prepared (one detection, well under a second; the render reuses the cache); a video must
        decode and show a face in one of the frames sampled across it (its full tracking, which can
        take minutes, happens when it renders). Otherwise a 422 under the client's name."""
        from studio.core.avatars.library import check_video_faces, resolve
        from studio.core.errors import AvatarError

        try:
            if stored.kind == "photo":
                resolve(str(stored.path))
            else:
                check_video_faces(stored.path)
        except AvatarError as exc:
            raise ApiError(422, str(exc).replace(str(stored.path), _said(stored.filename))) from None

    def check_audio_file(self, path: Path, name: str) -> None:
        """The voice-over decodes (no NaN or infinite samples, within the decode limits): 422 naming
        it as the client did, never by its path on the server."""
        from studio.core.errors import AudioError
        from studio.core.media.analysis import analyze

        try:
            analyze(path)
        except AudioError as exc:
            raise ApiError(422, str(exc).replace(str(path), _said(name))) from None

    def settle(self, stored: Stored) -> None:
        """This request keeps ``stored`` (answered, or a job uses it): it is no longer removed when
        another request holding the same file is refused."""
        with self._lock:
            self._release(stored.path)
            self._fresh.discard(stored.path)

    def discard(self, stored: Stored, in_use: set[str] | frozenset[str] = frozenset()) -> None:
        """This request was refused: the file goes when this request wrote it (or another refused one
        did), no other request still holds it, none settled it and no job uses it. A refused request
        leaves nothing; another client's upload of the same bytes is never removed."""
        with self._lock:
            left = self._release(stored.path)
            if left or stored.path not in self._fresh:
                return
            self._fresh.discard(stored.path)
            if str(stored.path) in in_use:
                return
            _unlink(stored.path)
            if stored.kind == "audio":
                _unlink(self.root / "audio" / f"{stored.id}.json")
                _unlink(stored.path.with_suffix(".speech.json"))  # the sentence times of a spoken text

    def as_client_said(self, exc: BaseException, stored: Stored) -> BaseException:
        """``exc`` with the stored file's server path replaced by the client's name for it (a
        ``StudioError`` keeps its class, so its status stays the same)."""
        from studio.core.errors import StudioError

        if isinstance(exc, StudioError) and str(stored.path) in str(exc):
            return type(exc)(str(exc).replace(str(stored.path), _said(stored.filename)))
        return exc

    def holders(self, path: Path) -> int:
        """Requests holding ``path`` now (tests, and what retention may wait for)."""
        with self._lock:
            return self._refs.get(Path(path), 0)

    def _release(self, path: Path) -> int:
        left = self._refs.get(path, 0) - 1
        if left > 0:
            self._refs[path] = left
        else:
            self._refs.pop(path, None)
        return max(0, left)

    # -- finding ------------------------------------------------------------------------------

    def audio_path(self, audio_id: str) -> Path:
        meta = self.audio_meta(audio_id)
        return self.root / "audio" / meta["file"]

    def audio_meta(self, audio_id: str) -> dict:
        """The upload's record, checked: a damaged one (not JSON, a ``file`` that is not this id's own
        file in uploads/audio, which is never followed elsewhere) is 410 with one sentence."""
        from studio.core.errors import StudioError
        from studio.core.store.small_files import read_small

        path = self.root / "audio" / f"{audio_id}.json" if ID_RE.match(audio_id or "") else None
        if path is None or not path.exists():
            raise ApiError(404, f"no uploaded voice-over with id '{audio_id}'; upload it with POST /v1/audio")
        try:
            meta = json.loads(read_small(path, f"upload {audio_id}", most=64 << 10))
            name = meta["file"]
            ok = isinstance(meta, dict) and isinstance(name, str) and bool(FILE_RE.fullmatch(name))
            ok = ok and name.startswith(audio_id) and (self.root / "audio" / name).is_file()
        except (StudioError, ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            raise ApiError(410, f"the uploaded voice-over '{audio_id}' is damaged on the server; upload it again")
        meta.setdefault("filename", "upload")
        meta.setdefault("bytes", (self.root / "audio" / name).stat().st_size)
        return meta

    def list_audio(self, owner: str | None) -> list[dict]:
        """The stored voice-overs, newest first; ``owner``: only those that client uploaded (None: all)."""
        rows = []
        for meta in (self.root / "audio").glob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                row = json.loads(meta.read_text())
                if ID_RE.match(str(row.get("id", ""))) and (self.root / "audio" / row["file"]).is_file():
                    if owner is None or owner in row.get("owners", [""]):
                        rows.append({**row, "modified": meta.stat().st_mtime})
        return sorted(rows, key=lambda r: (-r["modified"], r["id"]))

    def owned_meta(self, audio_id: str, owner: str | None) -> dict:
        """The voice-over's record, or 404 when it is not there for this client (``owner``; None: every one's)."""
        row = self.audio_meta(audio_id)
        if owner is not None and owner not in row.get("owners", [""]):
            raise ApiError(404, f"no uploaded voice-over with id '{audio_id}'; upload it with POST /v1/audio")
        return row

    def rename_audio(self, audio_id: str, filename: str, owner: str | None) -> dict:
        row = self.owned_meta(audio_id, owner)
        name = client_name(filename)
        if not filename.strip():
            raise ApiError(422, "filename: give the voice-over a name (1 to 80 printable characters)")
        with self._lock:
            row = {**self.audio_meta(audio_id), "filename": name}
            self._write_meta(self.root / "audio" / f"{audio_id}.json", row)
        return row

    def remove_audio(self, audio_id: str, owner: str | None, in_use: set[str]) -> bool:
        """This client's voice-over goes (404 when not theirs). The file itself goes when no other
        client still has it and no queued or running job reads it (409 then): True when it went."""
        row = self.owned_meta(audio_id, owner)
        path = self.root / "audio" / row["file"]
        meta = self.root / "audio" / f"{audio_id}.json"
        with self._lock:
            others = set(row.get("owners", [""])) - ({owner} if owner is not None else set(row.get("owners", [""])))
            if others:
                self._write_meta(meta, {**row, "owners": sorted(others)})
                return False
            if str(path) in in_use:
                raise ApiError(
                    409, f"voice-over '{row['filename']}' is used by a queued or running job; cancel it first"
                )
            if self._refs.get(path):
                raise ApiError(409, f"voice-over '{row['filename']}' is being uploaded again right now; try again")
            _unlink(path)
            _unlink(meta)
        return True

    def _write_meta(self, meta: Path, row: dict) -> None:
        from studio.core.store.fsutil import atomic_write_bytes

        atomic_write_bytes(meta, json.dumps({k: v for k, v in row.items() if k != "modified"}).encode())

    def display_name(self, path: str) -> str:
        """What to call a stored file in answers: the client's name for uploads, else the file name."""
        p = Path(path)
        if p.parent == self.root / "audio" and ID_RE.match(p.stem):
            with contextlib.suppress(ApiError, OSError, ValueError):
                return self.audio_meta(p.stem)["filename"]
        return p.name

    # -- internals ----------------------------------------------------------------------------

    async def _receive(self, upload, sub: str) -> tuple[Path, str, int, str]:
        name = client_name(getattr(upload, "filename", None))
        tmp = self.root / sub / f".incoming-{uuid.uuid4().hex}"
        h = hashlib.sha256()
        size = 0
        try:
            with open(tmp, "wb") as fh:
                while block := await upload.read(CHUNK):
                    size += len(block)
                    if size > self.max_bytes:
                        raise ApiError(
                            413,
                            f"{_said(name)} is too large: this server takes files of up to "
                            f"{self.max_bytes / 2**20:g} MB (--max-upload-mb)",
                        )
                    h.update(block)
                    fh.write(block)
        except BaseException:
            _unlink(tmp)
            raise
        if size == 0:
            _unlink(tmp)
            raise ApiError(422, f"{_said(name)} is empty (0 bytes); send the file itself")
        return tmp, h.hexdigest(), size, name

    def _keep(self, tmp: Path, sub: str, sha: str, ext: str, name: str, size: int, kind: str) -> Stored:
        sid = sha[:16]
        final = self.root / sub / f"{sid}{ext}"
        if self.on_stored is not None:
            self.on_stored(sub, size)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        with self._lock:  # the test for the file and its reference are one step for every request
            new = not final.exists()
            if new:
                os.replace(tmp, final)
                self._fresh.add(final)
            else:
                with contextlib.suppress(OSError):  # sent again: it is in use again (retention counts from now)
                    os.utime(final)
            self._refs[final] = self._refs.get(final, 0) + 1
        return Stored(sid, final, name, size, kind, new)


def client_name(filename: str | None) -> str:
    """The client's file name, for messages and listings: its last part, printable, at most 80
    characters (never used as a path)."""
    base = re.split(r"[\\/]", filename or "")[-1]
    return "".join(ch for ch in base if ch.isprintable()).strip()[:80] or "upload"


def _owner() -> str:
    """The client storing a file now ("" for the server's own token, or a server without one)."""
    from studio.api.clients import current

    return current().name


def _said(name: str) -> str:
    return f"'{name}'"


def _probe_audio(tmp: Path, name: str):
    from studio.core.errors import AudioError
    from studio.core.media.audio import probe

    try:
        return probe(tmp)
    except AudioError as exc:
        text = str(exc).replace(str(tmp), _said(name))
        raise ApiError(415 if "not an audio file" in text else 422, text) from None


def _sniff_avatar(tmp: Path, name: str) -> tuple[str, str]:
    from studio.core.avatars.sources import TooLarge, source_kind
    from studio.core.errors import AvatarError

    try:
        kind = source_kind(tmp)  # its frame size from the header, before any frame is decoded
    except AvatarError as exc:
        status = 422 if isinstance(exc, TooLarge) else 415
        raise ApiError(status, str(exc).replace(str(tmp), _said(name))) from None
    if kind == "photo":
        from PIL import Image

        with Image.open(tmp) as im:
            return kind, IMAGE_EXT.get(im.format, ".img")
    import av

    with av.open(str(tmp)) as c:
        fmt = (c.format.name or "").split(",")[0]
    return kind, {"mov": ".mp4", "matroska": ".mkv"}.get(fmt, f".{fmt}" if fmt.isalnum() else ".video")


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
