"""Everything a render would refuse later, refused before it is queued: ``preflight(request)``.

    preflight(RenderRequest("anna", "voice.flac", "out.mp4", RenderSettings(engine="musetalk")))
    # InputError: engine=musetalk cannot run here: no weights imported; run studio models import DIR

The driver's own checks (the output: same file as an input, a folder, a bad name, a read-only
folder; the voice-over's header) plus what only shows once a render starts: the frame range inside
the clip (never clamped), and for a render on this machine whether the engine, its runtime, the
encoder and the device can run here (from the engines' and encoders' availability, cheap: no
weights are loaded). ``studio serve`` calls it before it answers 202, so a job that is accepted is
one that can run. A render placed elsewhere (a farm, another server) is checked there.
"""

from __future__ import annotations

from studio.core.errors import InputError, StudioError
from studio.service.request import RenderRequest


def preflight(req: RenderRequest) -> None:
    """One ``InputError`` for the first thing that would stop ``req``; None when it can run."""
    from studio.core.media.audio import probe

    check_request(req)  # the output, the voice-over's header
    if req.frames is not None:
        total = probe(req.audio).frames_at(req.output_rate)  # at the output's rate (resolved in the request)
        check_frames(req.frames, total)
    if req.placement.kind == "local":
        runnable_here(req.settings)


def check_frames(frames: tuple[int, int], total: int) -> None:
    """The in/out range lies inside a clip of ``total`` frames (the end may be the clip's end)."""
    from studio.core.errors import OutsideClip

    a, b = frames
    if a >= total or b > total:  # frames that do not exist: the server answers 404
        raise OutsideClip(
            f"the frame range {a}..{b} is outside the clip, which has {total} frames (0..{total}): "
            "set frame_start and frame_end inside it"
        )


def runnable_here(settings, frame: bool = False) -> None:
    """The engine (and for MuseTalk its runtime), the encoder and the device can run on this machine,
    and (a render, not a ``frame``) every setting takes effect: one the engine it runs on does not
    read, or an encoder for another codec, is refused rather than silently ignored."""
    from studio.core.engines.selection import auto_engine, engine_status

    status = engine_status()
    engine = settings.engine
    if engine != "auto":
        a = status.get(engine)
        if a is None:
            raise InputError(f"engine={engine} is not an engine of this Studio; use {', '.join(['auto', *status])}")
        if not a.ready:
            raise InputError(f"engine={engine} cannot run here: {a.reason}")
    else:
        engine = auto_engine(status)
    if settings.device is not None:
        _device(settings.device)
    if not frame:
        takes_effect(settings, engine)
    if engine == "musetalk" and settings.runtime == "tensorrt":
        _tensorrt(settings.device)
    if settings.encoder == "nvenc":
        from studio.core.media.encoders import probe_nvenc

        ok, why = probe_nvenc()
        if not ok:
            raise InputError(f"encoder=nvenc cannot run here: {why}; use encoder=auto or x264")


def takes_effect(settings, engine: str) -> None:
    """Every setting set away from its default is one the render reads (``engine``: the engine that
    runs it, ``auto`` resolved): MuseTalk's options on the classic engine, or an H.264 encoder with
    another codec, are one sentence rather than silently ignored."""
    from studio.core.settings import SCHEMA

    for spec in SCHEMA.values():
        value = getattr(settings, spec.name)
        if spec.engines and engine not in spec.engines and value != spec.default:
            raise InputError(
                f"{spec.name}={_text(value)} is a setting of the {' and '.join(spec.engines)} engine, and this render "
                f"runs on the {engine} engine, which does not read it; leave {spec.name} at {_text(spec.default)}"
            )
    if settings.encoder != "auto" and settings.codec != "h264":
        raise InputError(
            f"encoder={settings.encoder} chooses the H.264 encoder, and codec={settings.codec} has its own; "
            "leave encoder=auto (or use codec=h264)"
        )


def _text(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _device(device: str) -> None:
    check_device(device, "device=")


def check_device(device: str, option: str = "--device ") -> None:
    """One sentence (exit 2, HTTP 422) when ``device`` is not one this machine has: ``cuda`` without
    CUDA, ``cuda:9`` on a one-GPU machine, a name torch does not know. ``option``: how the face names it."""
    from studio.core.engines.runtime_torch import resolve_device

    try:
        resolve_device(device)
    except StudioError as exc:
        raise InputError(str(exc).replace("--device ", option)) from None
    except (RuntimeError, ValueError) as exc:  # torch.device("gpu7"): not a device name torch knows
        raise InputError(f"{option}{device} is not a torch device ({exc}); use cpu, cuda or cuda:N") from None


def _tensorrt(device: str | None) -> None:
    from studio.core.engines.runtime_tensorrt import require_tensorrt
    from studio.core.engines.runtime_torch import resolve_device

    if resolve_device(device).type != "cuda":
        raise InputError("runtime=tensorrt needs a CUDA GPU and this server renders on the CPU; use runtime=auto")
    try:
        require_tensorrt()
    except StudioError as exc:
        raise InputError(f"runtime=tensorrt cannot run here: {exc}") from None


def check_request(req: RenderRequest) -> None:
    """Everything that can be refused before any work: the output (same file as an input, a
    folder, a bad extension, a missing or read-only folder) and the audio."""
    from studio.core.media.audio import probe

    check_output(req.output, req.avatar, req.audio, codec=req.settings.codec)
    if req.settings.device is not None and req.placement.kind != "server":
        check_device(req.settings.device)  # cuda without CUDA: one sentence before any work
    from studio.core.media.mxf import settings_problem

    says = settings_problem(req.settings, req.rate)  # the MXF codecs' size, rate, scan and tracks
    if says:
        raise InputError(says[0].upper() + says[1:] + ".")
    if not req.overwrite:
        from studio.core.store.files import check_kept_name

        check_kept_name(req.output)
    if req.placement.kind in ("chunks", "farm"):
        from studio.core.scale.chunks import check_chunk_codec

        check_chunk_codec(req.settings.codec)
    if req.placement.kind == "server":  # the server checks its inputs; here only the download target
        return
    req.resolution.check()  # a canvas that needs more enlargement than allowed: refused, with the choices
    probe(req.audio)


def check_output(output: str, avatar, audio=None, codec: str | None = None):
    """The core's one same-file / output-path check (``studio.core.render.outputs``) for a video
    output: never the voice-over, the avatar, a library avatar's source or its cache (``render_inputs``).
    ``avatar`` may also be a list of input paths (the older form)."""
    from studio.core.render.outputs import check_output as core_check
    from studio.core.render.outputs import render_inputs

    if isinstance(avatar, list | tuple):
        return core_check(output, list(avatar), kind="video", codec=codec)
    return core_check(output, render_inputs(avatar, audio), kind="video", codec=codec)
