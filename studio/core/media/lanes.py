"""What every chunked writer shares: frames cut into runs per chunk, bounded queues to the encoder
lanes, and the first failure of any lane raised once in the caller's thread.

    class Writer(LaneWriter):            # VideoWriter (H.264), CodecWriter (HEVC, ProRes, DNxHR, VP9)
        ...
        for ch, s, e, pos in self._runs(indices, n):
            self._put(self._lanes[ch.k % self.window], (ch, frames[s:e], pos))

A writer sets ``self.path``, ``self._error`` (None), ``self._stop`` (an Event), ``self._chunks``
(each with ``k``, ``start``, ``end`` (None: open-ended), ``next``) and ``self._starts`` (their
starts, ascending) before it is fed; ``failure_label()`` names the encoder in the failure sentence.
``abort()`` also uses ``_done``, ``_audio`` (or None), ``_lanes`` (each with ``queue`` and ``thread``),
``_mux_thread``, ``_fh``, ``_mux`` (a ``Muxer`` or None), ``_atomic`` and the writer's ``_cleanup()``.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import queue
import threading
from pathlib import Path
from typing import Any

from studio.core.errors import RenderError


def disk_error(exc: OSError, path: Path) -> RenderError:
    """One sentence for a failed write, naming the folder that failed (a spill file's, from an
    encoder process, or the output's)."""
    where = Path(exc.filename).parent if isinstance(getattr(exc, "filename", None), str) else path.parent
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        why = "no space left on device" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        return RenderError(
            f"The disk is full ({why} in {where}) while writing {path.name}: free some space and render again."
        )
    if exc.errno == errno.EPIPE:  # a pipe to an encoder process, not the disk
        return RenderError(f"An encoder process stopped while writing {path.name} ({exc}): render again.")
    return RenderError(f"Writing {path.name} failed ({exc.strerror or exc}, in {where}): check the output folder.")


class LaneWriter:
    """Mixin: the feeding and failure mechanics of a writer with encoder lanes over chunks."""

    path: Path
    chunks: list
    _chunks: list
    _starts: list[int]
    _error: BaseException | None
    _stop: threading.Event
    _done: bool
    _audio: Any
    _mux_thread: threading.Thread | None
    _fh: Any
    _atomic: Any

    def failure_label(self) -> str:
        """What the failure sentence calls the encoder."""
        return "encoder"

    def _chunk_of(self, index: int):
        k = bisect.bisect_right(self._starts, index) - 1
        if k >= 0:
            ch = self._chunks[k]
            if ch.end is None or index < ch.end:
                return ch
        raise ValueError(f"frame {index} is outside the clip ({self.chunks[0][0]}..{self.chunks[-1][1]})")

    def _runs(self, indices, n: int):
        """``(chunk, s, e, first)`` for each run ``indices[s:e]`` of consecutive frames inside one chunk,
        each chunk's frames in order (``_check_run`` may refuse a run); advances each chunk's ``next``."""
        s = 0
        while s < n:
            pos = int(indices[s])
            ch = self._chunk_of(pos)
            if pos != ch.next:
                raise ValueError(f"chunk {ch.start}..{ch.end} expects frame {ch.next} next, got {pos}")
            self._check_run(ch, pos)
            limit = n if ch.end is None else min(n, s + ch.end - pos)
            e = s + 1
            while e < limit and int(indices[e]) == pos + e - s:
                e += 1
            yield ch, s, e, pos
            ch.next = pos + e - s
            s = e

    def _check_run(self, ch, pos: int) -> None:
        """A writer's own rule for a run starting at ``pos`` in ``ch`` (none here)."""

    def _put(self, lane, item) -> None:
        """Queue ``item`` to ``lane``, waiting while it is full; a lane's failure is raised instead."""
        while True:
            self.raise_if_failed()
            try:
                lane.queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def _fail(self, exc: BaseException) -> None:
        """A lane or the mux thread failed: keep the first failure, stop everything."""
        if self._error is None:
            self._error = exc
        self._stop.set()

    def raise_if_failed(self) -> None:
        """Raise what stopped an encoder or the mux (one sentence: a full disk names the folder);
        the writer's own calls check it, and so does a thread that feeds it (``hostcopy``)."""
        exc = self._error
        if exc is None:
            return
        if isinstance(exc, OSError):
            raise disk_error(exc, self.path) from exc
        if isinstance(exc, RenderError):
            raise exc
        raise RenderError(f"The {self.failure_label()} failed ({type(exc).__name__}: {exc}).") from exc

    def abort(self) -> None:
        """Stop everything and delete the temporaries; an existing file at ``path`` stays untouched."""
        if self._done:
            return
        self._done = True
        self._stop.set()
        if self._audio is not None:
            self._audio.cancel.set()
        lanes = getattr(self, "_lanes", [])
        for lane in lanes:  # what is queued is dropped; the end marker stops the lane
            with contextlib.suppress(queue.Empty):
                while True:
                    lane.queue.get_nowait()
            with contextlib.suppress(queue.Full):
                lane.queue.put_nowait(None)
        me = threading.current_thread()
        for t in [lane.thread for lane in lanes] + [self._mux_thread]:
            if t is not None and t.is_alive() and t is not me:
                t.join()
        with contextlib.suppress(Exception):
            self._fh.close()  # first: closing the container must not write (or faststart) anything
        mux = getattr(self, "_mux", None)
        if mux is not None:
            mux.discard()
        self._cleanup()
        with contextlib.suppress(BaseException):
            self._atomic.__exit__(RenderError, RenderError("aborted"), None)  # deletes the temporary

    def _cleanup(self) -> None:
        """The writer's own temporaries (spill folders, side files), removed after close or abort."""
