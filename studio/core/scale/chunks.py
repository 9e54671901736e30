"""Chunked rendering: a clip cut into contiguous frame ranges, each encoded as a segment starting on a
key frame (closed-GOP H.264 or HEVC; ProRes and DNxHR are intra-only, every frame a key frame), joined
in order with the original audio muxed once (AAC in MP4, PCM in QuickTime, as the one-process writer).

    ranges = split(T, 4)                                  # [(0, 19), (19, 38), ...]
    seg = render_segment(renderer, a, b, "seg1.mp4")      # frames [a, b): an MP4 starting on an IDR
    join_segments([(a, b, seg), ...], "out.mp4", audio="voice.wav")   # atomic, A/V in sync
    job = ChunkedRender(avatar, audio, settings, chunks=2)            # local processes
    for p in job.run("out.mp4"):                          # RenderProgress, as Renderer.run's
        bar.update(p.done, p.total, p.fps)
    job.result                                            # a RenderResult

A segment holds frames [a, b) with timestamps relative to ``a``; the join shifts them by ``a``, so
the joined stream has frame t at pts t/25 exactly as a single-process render. The pre-encode
frames are those of ``Renderer.iter_batches`` (bit for bit: each frame depends only on its index),
and every segment uses the same encoder settings, so the stream headers agree and the join is a
packet copy. A segment is written by the renderer's own loop (``Renderer.write_batches``).
``ChunkedRender`` runs the chunks in local worker processes (no Ray); the Ray farm's replicas
(``studio.core.scale.replica``) use the same functions. Every codec but VP9
(its alpha rides in packet side data and WebM counts milliseconds) is chunked: ``CHUNK_CODECS``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studio.core.errors import Cancelled, RenderError
from studio.core.media.rates import DEFAULT_RATE, mp4_time_base, rate_text, ticks_per_frame

if TYPE_CHECKING:
    from studio.core.render.results import RenderProgress, RenderResult

log = logging.getLogger(__name__)

MIN_CHUNK = 8  # frames: shorter chunks cost an IDR each for little parallelism
CHUNK_CODECS = ("h264", "hevc", "prores", "prores4444", "dnxhr")  # the codecs a chunked or farm render joins
# the output video's time base is rates.mp4_time_base(rate), as the single-process writer's


@dataclass(frozen=True)
class Segment:
    """A rendered segment: frames ``[start, end)`` in the MP4 at ``path`` (``os.fspath`` gives it),
    and what rendered it."""

    start: int
    end: int
    path: str
    engine: str
    engine_reason: str
    encoder: str  # the segment writer's name
    seconds: float

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path


def split(total: int, n: int, min_chunk: int = MIN_CHUNK) -> list[tuple[int, int]]:
    """``total`` frames cut into at most ``n`` contiguous, near-equal ranges of >= ``min_chunk`` frames."""
    if total <= 0:
        return []
    n = max(1, min(int(n), total // max(1, min_chunk)))
    edges = [round(total * k / n) for k in range(n + 1)]
    return [(edges[k], edges[k + 1]) for k in range(n)]


def render_segment(
    renderer,
    start: int,
    end: int,
    path,
    *,
    on_batch: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Segment:
    """Encode frames ``[start, end)`` of ``renderer``'s clip into a video-only file at ``path`` in the
    settings' codec (its container's extension: ``segment_suffix``).

    The segment's first frame is an IDR (a fresh encoder, closed GOPs) and its timestamps start
    at 0. ``on_batch(frames)`` is called after each batch; ``should_stop()`` is checked between
    batches and raises ``Cancelled``. The file appears atomically (nothing is left on failure).
    """
    from studio.core.render.outputs import open_video_for
    from studio.core.render.plan import stripes

    plan = renderer.plan
    if not 0 <= start < end <= plan.frames:
        raise RenderError(f"Chunk {start}..{end} is outside the clip (0..{plan.frames}).")
    s = renderer.settings
    n = end - start
    writer = open_video_for(
        s,
        path,
        renderer.avatar,
        fps=renderer.rate,
        size=renderer.output_size,
        total_frames=n,
        changing=None,
    )
    t0 = time.perf_counter()
    with writer:
        batches = [start + b for b in stripes(n, renderer.batch_size, writer.chunks)]
        for idx, _ in renderer.write_batches(writer, batches, offset=start, stop=should_stop):
            if on_batch is not None:
                on_batch(len(idx))
        out = writer.close()
    return Segment(
        start,
        end,
        str(out),
        renderer.engine.name,
        renderer.engine_reason,
        writer.name,
        time.perf_counter() - t0,
    )


def segment_suffix(codec: str) -> str:
    """The extension of a segment file in ``codec`` (its container's)."""
    from studio.core.media.codecs import spec

    return spec(codec).suffix


def check_chunk_codec(codec: str) -> None:
    """Refuse, in one sentence, a codec a chunked or farm render cannot join."""
    if codec not in CHUNK_CODECS:
        from studio.core.errors import InputError

        raise InputError(
            f"--codec {codec} renders on this computer, on its GPUs or on a server; chunked and farm renders "
            f"join {', '.join(CHUNK_CODECS)}: use one of those there"
        )


def join_segments(
    segments,
    output,
    *,
    audio=None,
    fps: int | Fraction = DEFAULT_RATE,
    overwrite: bool = True,
    codec: str = "h264",
    clip=None,
) -> str:
    """Join ``[(start, end, path), ...]`` or ``Segment`` values
    into ``output``. With ``clip`` (the whole clip's ``render.clip.Clip``), the file gets the timecode
    track and chapters of a one-process render of it (``render.markers.tags_context``).

    Segments must tile ``0..T`` in order. Video packets are copied with their timestamps shifted
    by ``start``; the original ``audio`` is encoded once (AAC in MP4, PCM in QuickTime: ``codec``'s
    container, as the one-process writer), interleaved with the video. The
    output appears atomically; on any error nothing is left and an existing file is untouched.
    ``overwrite=False``: an existing file is never replaced (the name written is returned).
    """
    import av

    from studio.core.media.codecs import PlainAudio, spec
    from studio.core.media.encoders import AudioSource  # the single-process writer's AAC muxer
    from studio.core.store.fsutil import atomic_output

    check_chunk_codec(codec)
    cs = spec(codec)

    segments = sorted(((s.start, s.end, s.path) if isinstance(s, Segment) else s for s in segments), key=lambda s: s[0])
    expect = 0
    for s, e, _ in segments:
        if s != expect or e <= s:
            raise RenderError(
                f"The chunks do not tile the clip: expected one starting at frame {expect}, got {s}..{e}."
            )
        expect = e
    output = Path(output)
    if not output.parent.is_dir():
        raise RenderError(f"The output folder {output.parent} does not exist: create it or choose another.")
    src: Any = None
    if audio is not None:
        src = AudioSource(audio) if cs.audio == "aac" else PlainAudio(audio, cs.audio)
    tags: Any = contextlib.nullcontext()
    if clip is not None:
        from studio.core.render.markers import tags_context

        tags = tags_context(clip.settings, clip.plan, clip.rate, 0, expect)
    try:
        with tags, atomic_output(output, suffix=cs.suffix, overwrite=overwrite) as out:
            _join(av, segments, out.tmp, src, fps, cs.container, cs.tag)
    except OSError as exc:  # a full disk: one sentence naming the folder, not a traceback
        from studio.core.media.lanes import disk_error

        raise disk_error(exc, output) from exc
    finally:
        if src is not None:
            src.close()
    final = out.final or output
    log.info("joined %d segment(s) into %s (%d frames)", len(segments), final, expect)
    return str(final)


class ChunkedRender:
    """One clip in ``chunks`` segments on ``workers`` local processes (default: one per chunk), then
    joined; used like ``Renderer``: ``run(output)`` yields ``RenderProgress`` now and then (with
    per-worker fps and chunk counts), the last with ``finished=True``; ``result`` then holds the
    ``RenderResult``. ``cancel()`` (any thread) stops every chunk after its current batch and
    ``run`` raises ``Cancelled``; nothing is written.

    The workers are spawned interpreters: a calling script needs the ``if __name__ == "__main__"``
    guard (the ``studio`` command has it).
    """

    def __init__(self, avatar, audio, settings=None, *, chunks: int = 2, workers: int | None = None):
        from studio.core.render.clip import Clip
        from studio.core.settings import RenderSettings

        self.settings = settings or RenderSettings()
        self.audio = str(audio)
        self.clip = Clip(avatar, audio, self.settings)
        self._loudness: dict | None = None
        self.chunks = chunks
        self.workers = workers
        self._cancel = threading.Event()
        self.result: RenderResult | None = None

    def cancel(self) -> None:
        self._cancel.set()

    def render(self, output, *, overwrite: bool = True) -> RenderResult | None:
        """Run to completion (no progress); returns the ``RenderResult``."""
        for _ in self.run(output, overwrite=overwrite):
            pass
        return self.result

    def run(self, output, *, overwrite: bool = True) -> Iterator[RenderProgress]:
        import multiprocessing as mp
        import queue
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        from studio.core.media.writer import check_output
        from studio.core.render.results import RenderProgress
        from studio.core.store.temps import release_temp, temp_dir

        self.result = None
        settings, audio = self.settings, self.audio
        t0 = time.perf_counter()
        check_output(output)
        check_chunk_codec(settings.codec)
        suffix = segment_suffix(settings.codec)
        T = self.clip.plan.frames
        ranges = split(T, self.chunks)
        avatar_ref = avatar_reference(self.clip.avatar)
        workers = max(1, min(self.workers or len(ranges), len(ranges)))
        ctx = mp.get_context("spawn")
        # the semaphore tracker must not print a "leaked semaphore" warning when a second stop
        # signal ends this process at once (it inherits this environment when it starts here)
        from studio.core import env

        env.set_default("PYTHONWARNINGS", "ignore::UserWarning:multiprocessing.resource_tracker")
        q, stop = ctx.Queue(), ctx.Event()
        tmpdir = temp_dir(Path(output).parent, f".{Path(output).stem}.chunks.")  # registered: gone even after a kill
        done, per_worker = 0, {}
        try:
            pool = ProcessPoolExecutor(
                workers, mp_context=ctx, initializer=_child_init, initargs=(q, stop, workers, os.getpid())
            )
            try:
                from studio.core.signals import deferred

                with deferred():  # a stop signal waits until every worker has its start-up data
                    pending = {
                        pool.submit(
                            _child_render, avatar_ref, audio, settings, a, b, str(tmpdir / f"seg{k:04d}{suffix}")
                        )
                        for k, (a, b) in enumerate(ranges)
                    }
                finished: list[Segment] = []
                while pending:
                    if self._cancel.is_set():
                        stop.set()
                        for f in pending:
                            f.cancel()
                        raise Cancelled("render cancelled; nothing was written")
                    ready, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
                    for f in ready:
                        finished.append(f.result())  # re-raises a chunk's error here
                    with contextlib.suppress(queue.Empty):
                        while True:
                            pid, n, fps = q.get_nowait()
                            done += n
                            per_worker[f"pid{pid}"] = fps
                    yield RenderProgress.measured(
                        done,
                        T,
                        time.perf_counter() - t0,
                        workers=dict(per_worker),
                        chunks_done=len(finished),
                        chunks=len(ranges),
                    )
            except BaseException:  # cancel, a chunk's error, Ctrl-C/SIGTERM, the generator closed
                stop.set()
                _stop_pool(pool)
                raise
            pool.shutdown(wait=True)
            from studio.core.media.loudness import delivered_audio

            with delivered_audio(audio, self.settings) as (sound, self._loudness):
                path = join_segments(
                    finished,
                    output,
                    audio=sound,
                    fps=self.clip.rate,
                    overwrite=overwrite,
                    codec=settings.codec,
                    clip=self.clip,
                )
        finally:
            stop.set()
            _rmtree(tmpdir)
            release_temp(tmpdir)
        elapsed = time.perf_counter() - t0
        self.result = segments_result(self.clip, finished, path, elapsed, loudness=self._loudness)
        yield RenderProgress.final(
            self.result, elapsed, workers=per_worker, chunks_done=len(ranges), chunks=len(ranges)
        )


def segments_result(
    clip, segments: list[Segment], output: str, seconds: float, loudness: dict | None = None, **stage_ms: float
) -> RenderResult:
    """The ``RenderResult`` of a clip rendered in ``segments`` and joined into ``output`` (local
    chunks, the farm): the engine(s) and encoder the segments report."""
    from studio.core.media.codecs import alpha_of
    from studio.core.render.canvas import output_size
    from studio.core.render.results import RenderResult

    segments = sorted(segments, key=lambda g: g.start)
    engines = sorted({g.engine for g in segments})
    return RenderResult.measured(
        output=output,
        frames=clip.plan.frames,
        silent_frames=int(clip.plan.silent.sum()),
        engine=",".join(engines),
        engine_reason=segments[0].engine_reason if segments else "",
        encoder=f"{segments[0].encoder.split()[0] if segments else 'libx264'} x{len(segments)} segments",
        seconds=seconds,
        width=output_size(clip.settings, clip.avatar)[0],
        height=output_size(clip.settings, clip.avatar)[1],
        stage_ms=stage_ms,
        frame_rate=rate_text(clip.rate),
        loudness=loudness,
        alpha=alpha_of(clip.settings.codec, clip.avatar.alpha is not None),
    )


# ------------------------------------------------------------------------------------------------
# Avatars handed to other processes (by folder, never by array)


def avatar_reference(assets) -> tuple[str, str]:
    """A picklable handle to a prepared avatar: its cache folder and name."""
    return str(assets.folder), assets.name


def open_avatar(ref: tuple[str, str]):
    """The ``AvatarAssets`` of ``avatar_reference`` (memory-mapped from the same folder)."""
    folder, name = ref
    from studio.core.avatars.builder import load_folder

    return load_folder(Path(folder), name)


# ------------------------------------------------------------------------------------------------
# Helpers


def _join(av, segments, tmp: Path, audio, fps: int | Fraction, container: str = "mp4", tag: str | None = None) -> None:
    from studio.core.media.mux import tag_container

    fps = Fraction(fps)
    ticks = ticks_per_frame(fps)
    out = av.open(str(tmp), "w", format=container, options={"movflags": "+faststart"})
    try:
        vs = None
        last_dts = None
        muxed_until = 0
        for start, end, source in segments:
            with _open_segment(av, source) as seg:
                sv = seg.streams.video[0]
                if vs is None:
                    vs = out.add_stream_from_template(sv)
                    if tag:  # the one-process writer's FourCC (HEVC: hvc1, which QuickTime plays)
                        vs.codec_tag = tag
                    vs.time_base = mp4_time_base(fps)
                    tag_container(out, vs)  # the timecode track and chapters of ``delivery_tags``, if any
                    extradata = bytes(sv.codec_context.extradata or b"")
                    if audio is not None:
                        audio.add_stream(out)
                    out.start_encoding()
                elif bytes(sv.codec_context.extradata or b"") != extradata:
                    raise RenderError(
                        "The chunks' encoders disagree on stream headers: render them with the same settings."
                    )
                count = 0
                for pkt in seg.demux(sv):
                    if pkt.size == 0:
                        continue
                    tb = pkt.time_base
                    pts = _frames(pkt.pts, tb, fps) + start
                    dts = _frames(pkt.dts, tb, fps) + start if pkt.dts is not None else pts
                    if last_dts is not None and dts <= last_dts:  # reorder delays that differ at a join
                        dts = last_dts + 1
                    if dts > pts:
                        raise RenderError(f"Chunk {start}..{end} does not join (dts after pts): render it again.")
                    last_dts = dts
                    pkt.stream = vs
                    pkt.pts, pkt.dts = pts * ticks, dts * ticks
                    pkt.duration = ticks
                    pkt.time_base = vs.time_base
                    out.mux(pkt)
                    count += 1
                    muxed_until = max(muxed_until, pts + 1)
                    if audio is not None:
                        audio.mux_until(out, float(muxed_until / fps))
                if count != end - start:
                    raise RenderError(
                        f"Chunk {start}..{end} holds {count} frames instead of {end - start}: render it again."
                    )
        if audio is not None:
            audio.mux_until(out, None)
    finally:
        out.close()


def _frames(ts, tb, fps: int | Fraction) -> int:
    """A timestamp in ``tb`` as a whole frame index (segments are on the exact frame grid)."""
    return int(round(Fraction(int(ts)) * Fraction(tb) * fps))


@contextlib.contextmanager
def _open_segment(av, path):
    c = av.open(str(path), "r")
    try:
        yield c
    finally:
        c.close()


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _stop_pool(pool, grace_s: float = 0.5) -> None:
    """Stop a chunk pool now: queued chunks are dropped, running ones stop after their current
    batch (the ``stop`` event); workers still busy after ``grace_s`` (one starting up, loading its
    engine, or inside a long batch) are killed, and the temporaries they had registered (segment
    files, encoder spill files and their records) are removed at once (``sweep_dead_temps``: a
    killed worker's lock is free), not left for the next command. Without this, the executor's own
    shutdown waits for every running chunk to render to its end."""
    from studio.core.store.temps import sweep_dead_temps

    procs = list((getattr(pool, "_processes", None) or {}).values())  # private: the only handle on them
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    groups = []
    for p in procs:
        if p.is_alive():  # its process group: the worker and the encoder processes it started
            groups.append(p.pid)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                p.kill()
    for p in procs:
        p.join(5.0)
    deadline = time.monotonic() + 5.0
    while groups and time.monotonic() < deadline:  # until the workers' own children are gone too
        groups = [g for g in groups if _group_alive(g)]
        if groups:
            time.sleep(0.02)
    if procs:
        sweep_dead_temps()


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies waiting to be reaped do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for pid in entries:
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


# ------------------------------------------------------------------------------------------------
# Local worker processes (ChunkedRender)

_Q: Any = None  # this worker process's progress queue and stop event (``_child_init``)
_STOP: Any = None


def _child_init(q, stop, workers: int, parent_pid: int | None = None) -> None:
    import signal

    from studio.core.signals import die_with_parent

    die_with_parent(parent_pid)  # a SIGKILL'd parent takes its workers with it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us (Ctrl-C, SIGTERM: _stop_pool)
    with contextlib.suppress(OSError):
        os.setpgrp()  # a group of its own: a stop kills it with the encoder processes it starts
    global _Q, _STOP
    _Q, _STOP = q, stop
    with contextlib.suppress(Exception):
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def _child_render(avatar_ref, audio, settings, start, end, path):
    from studio.core.render.renderer import Renderer

    renderer = Renderer(open_avatar(avatar_ref), audio, settings)
    t0, done = time.perf_counter(), 0

    def on_batch(n):
        nonlocal done
        done += n
        _Q.put((os.getpid(), n, done / max(1e-9, time.perf_counter() - t0)))

    return render_segment(renderer, start, end, path, on_batch=on_batch, should_stop=_STOP.is_set)
