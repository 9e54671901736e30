"""What users run, timed (``studio bench --user``), and the x264 preset comparison.

The reference workload (``studio.bench.reference``) renders an in-memory avatar with a 16 kHz mono
voice-over at x264 ultrafast: it leaves out what a user pays. These rows use the user's path:

- voice-overs as users have them, made here from the demo voice: 48 kHz stereo WAV, 44.1 kHz
  stereo MP3 and 48 kHz stereo M4A/AAC (a quiet room tone under the voice, so the whole band has
  content), at 672 frames and at a long length;
- library avatars added with ``library.prepare`` from a real JPEG (the demo photo on a 16:9
  backdrop) and a real H.264 MP4 (the bench's swaying presenter), rendered by name (memory-mapped
  loads, the avatar's own hints);
- the default ``RenderSettings`` (the default preset), and ultrafast;
- a fresh ``Renderer`` per job on one warm engine, as the queue and the server do.

Each AAC row says how its track was made (``encoded``, ``cached``, ``copied``): the first render
of a voice-over encodes it (the cache is emptied before those rows), a repeat finds it cached, an
M4A is copied. ``finish_ms.audio_wait`` is what the mux waited for it.

The avatars are added with the landmarks the bench drew them with (``KnownFaces`` stands in for
the face tracker while ``prepare`` runs): tracking is not part of a render, mediapipe is not
installed on the GPU machines, and the rows stay the same on every machine. Everything else
(decoding the JPEG and the MP4, crops, masks, the memory-mapped cache) is the library's own path.

``preset_comparison``: the same frames (a render's, uncompressed, NV12 as the encoders get them)
encoded at each preset with the render's encoder and hints: frames/s of the encoders alone (fed
from memory), x264 CPU ms per frame, bytes, and PSNR / SSIM against the uncompressed frames
(FFmpeg's ``ssim`` filter, PSNR from the mean squared error of the planes).
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

import numpy as np

from studio.core.constants import FPS

log = logging.getLogger(__name__)

FORMATS = ("wav48", "mp3", "aac")
PHOTO, VIDEO = "bench-photo", "bench-video"


# --------------------------------------------------------------------------------------------
# Inputs


def voice_samples(frames: int, rate: int, seed: int = 0) -> np.ndarray:
    """The demo voice-over cut or looped to ``frames`` video frames, at ``rate``, stereo (the right
    channel a little quieter and later), with a quiet room tone (~-60 dBFS) under it."""
    import soxr

    from studio.core.env import repo_resources
    from studio.core.media.audio import load

    wave = load(repo_resources() / "demo" / "voiceover.flac")
    voice = soxr.resample(wave.samples, 16_000, rate).astype(np.float32)
    n = -(-frames * rate // FPS)
    voice = np.tile(voice, -(-n // len(voice)))[:n]
    rng = np.random.default_rng(seed)
    tone = (0.001 * rng.standard_normal((n, 2))).astype(np.float32)
    delay = rate // 2000  # 0.5 ms
    right = np.concatenate([np.zeros(delay, np.float32), voice[: n - delay]])
    return np.stack([voice, 0.8 * right], axis=1) + tone


def voice_file(folder: Path, fmt: str, frames: int, seed: int = 0) -> Path:
    """A voice-over of ``frames`` frames: ``wav48`` (48 kHz stereo PCM), ``mp3`` (44.1 kHz stereo)
    or ``aac`` (48 kHz stereo M4A, 160 kbit/s). ``seed`` changes the room tone: new content."""
    import soundfile as sf

    folder.mkdir(parents=True, exist_ok=True)
    suffix = {"wav48": "wav", "mp3": "mp3", "aac": "m4a"}[fmt]
    path = folder / f"voice_{fmt}_{frames}_{seed}.{suffix}"
    if path.is_file():
        return path
    rate = 44_100 if fmt == "mp3" else 48_000
    x = voice_samples(frames, rate, seed)
    tmp = path.with_name(f".{path.name}.part")
    if fmt == "wav48":
        sf.write(tmp, x, rate, subtype="PCM_16", format="WAV")
    elif fmt == "mp3":
        sf.write(tmp, x, rate, format="MP3")
    else:
        write_m4a(tmp, x, rate)
    tmp.replace(path)
    return path


def write_m4a(path: Path, samples: np.ndarray, rate: int, bit_rate: int = 160_000) -> None:
    import av

    with av.open(str(path), "w", format="mp4") as c:
        s = c.add_stream("aac", rate=rate, layout="stereo")
        s.codec_context.bit_rate = bit_rate
        for a in range(0, len(samples), 8192):
            f = av.AudioFrame.from_ndarray(
                np.ascontiguousarray(samples[a : a + 8192].T), format="fltp", layout="stereo"
            )
            f.sample_rate, f.pts = rate, a
            c.mux(s.encode(f))
        c.mux(s.encode(None))


def source_files(folder: Path, height: int) -> dict:
    """The avatars' source files (a JPEG photo, an H.264 MP4 of the swaying presenter) and the
    landmarks they were drawn with."""
    import av
    import PIL.Image

    from studio.bench.reference import synthetic_avatar

    folder.mkdir(parents=True, exist_ok=True)
    still = synthetic_avatar(folder / "src-photo", height, photo=True)
    video = synthetic_avatar(folder / "src-video", height)
    jpg, mp4 = folder / "presenter.jpg", folder / "presenter.mp4"
    if not jpg.is_file():
        PIL.Image.fromarray(np.asarray(still.frames[0])).save(jpg, quality=92)
    if not mp4.is_file():
        tmp = mp4.with_name(".presenter.part.mp4")
        with av.open(str(tmp), "w") as c:
            s = c.add_stream("libx264", rate=FPS)
            s.width, s.height, s.pix_fmt = video.width, video.height, "yuv420p"
            s.options = {"crf": "18", "preset": "veryfast"}
            for k, f in enumerate(video.frames):
                fr = av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")
                fr.pts = k
                c.mux(s.encode(fr))
            c.mux(s.encode(None))
        tmp.replace(mp4)
    return {
        "photo": jpg,
        "video": mp4,
        "photo_landmarks": np.asarray(still.landmarks),
        "video_landmarks": np.asarray(video.landmarks),
    }


class KnownFaces:
    """Stands in for ``faces.FaceTracker`` while the bench adds its avatars where mediapipe is
    missing: the landmarks each frame was drawn with, in order (the photo's for a still)."""

    landmarks: np.ndarray = np.zeros((0, 478, 2), np.float32)

    def __init__(self, video: bool = False, **_):
        self._k = 0

    def __call__(self, rgb):
        lm = self.landmarks[min(self._k, len(self.landmarks) - 1)]
        self._k += 1
        return np.array(lm, np.float32)

    def all_faces(self, rgb, sort: bool = True):
        return [self(rgb)]

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def add_avatars(folder: Path, height: int) -> dict:
    """Add the photo and the video to the library (current data folder) as ``PHOTO`` and
    ``VIDEO``; says how their faces were found."""
    from studio.core.avatars import library

    src = source_files(folder, height)
    out: dict = {"faces": "known landmarks", "photo_source": str(src["photo"]), "video_source": str(src["video"])}
    for name, kind in ((PHOTO, "photo"), (VIDEO, "video")):
        t0 = time.perf_counter()
        with tracker(src[f"{kind}_landmarks"]):
            a = library.prepare(name, src[kind], force=True)
        out[f"{kind}_add_s"] = round(time.perf_counter() - t0, 3)
        out[f"{kind}_size"] = f"{a.width}x{a.height}, {a.N} frame(s)"
    return out


@contextlib.contextmanager
def tracker(landmarks):
    from studio.core.avatars import faces

    saved = faces.FaceTracker

    class Known(KnownFaces):
        pass

    Known.landmarks = landmarks
    faces.FaceTracker = Known
    try:
        yield
    finally:
        faces.FaceTracker = saved


# --------------------------------------------------------------------------------------------
# Rows


def time_job(avatar: str, audio: Path, settings, engine, output: Path) -> dict:
    """One job as the queue runs it: a fresh ``Renderer`` on the warm ``engine``, the avatar by
    name; wall time from the voice-over file to the MP4 on disk."""
    from studio.core.render.renderer import Renderer

    t0 = time.perf_counter()
    result = Renderer(avatar, audio, settings, engine=engine).render(output)
    wall = time.perf_counter() - t0
    f = result.finish_ms or {}
    return {
        "frames": result.frames,
        "seconds": round(wall, 3),
        "fps": round(result.frames / wall, 1),
        "encoder": result.encoder,
        "preset": settings.preset,
        "audio": result.audio,
        "audio_wait_ms": round(float(f.get("audio_wait", 0.0)), 1),
        "stage_ms": result.stage_ms,
        "finish_ms": f,
        "output_bytes": output.stat().st_size,
    }


def user_rows(
    workdir: Path,
    engine,
    *,
    device: str,
    frames: int,
    long_frames: int = 0,
    height: int = 1080,
    presets=("ultrafast", "superfast", "veryfast"),
    note=log.info,
) -> dict:
    """The user's-path rows on a warm MuseTalk ``engine`` (library avatars of the current data
    folder, added here); ``runs`` keyed ``user-...`` and the preset comparison."""
    from studio.core.media import aac_cache
    from studio.core.settings import RenderSettings

    workdir = Path(workdir)
    default = RenderSettings(device=device, engine="musetalk", decoder=engine.decoder)
    out: dict = {"runs": {}, "default_preset": default.preset}
    note(f"user rows: adding the library avatars from a JPEG and an MP4 ({height}p)")
    out["avatars"] = add_avatars(workdir / "sources", height)
    note(f"user rows: avatar faces from {out['avatars']['faces']}")
    voices = workdir / "voices"
    v = {fmt: voice_file(voices, fmt, frames) for fmt in FORMATS}
    runs = out["runs"]

    def job(key: str, avatar: str, audio: Path, fresh_audio: bool = True, **kw) -> dict:
        if fresh_audio:  # the first render of this voice-over: its AAC track is encoded (or copied)
            aac_cache.clear()
        r = time_job(avatar, audio, default.with_(**kw), engine, workdir / f"{key}.mp4")
        runs[key] = r
        note(
            f"{key}: {r['fps']} frames/s, {r['seconds']} s, audio {r['audio']} "
            f"(waited {r['audio_wait_ms']:.0f} ms), finish {r['stage_ms'].get('finish', 0) / 1e3:.2f} s"
        )
        (workdir / f"{key}.mp4").unlink(missing_ok=True)
        return r

    note("user rows: warming up (the avatars' latents and hints, the encoders)")
    for avatar in (PHOTO, VIDEO):
        time_job(avatar, v["wav48"], default, engine, workdir / "warm.mp4")
    job("user-photo-wav48", PHOTO, v["wav48"])
    job("user-photo-wav48-again", PHOTO, v["wav48"], fresh_audio=False)
    for p in presets:
        if p != default.preset:
            job(f"user-photo-wav48-{p}", PHOTO, v["wav48"], preset=p)
    job("user-photo-mp3", PHOTO, v["mp3"])
    job("user-photo-aac", PHOTO, v["aac"])
    job("user-video-wav48", VIDEO, v["wav48"])
    other = other_preset(default.preset)
    job(f"user-video-wav48-{other}", VIDEO, v["wav48"], preset=other)
    # the output canvas (docs/delivery.md): the photo on a 1920x1080 canvas, the 1080p video reframed vertical
    job("user-photo-wav48-canvas-1920x1080", PHOTO, v["wav48"], fresh_audio=False, canvas="1920x1080")
    job("user-video-wav48-canvas-1080x1920", VIDEO, v["wav48"], fresh_audio=False, canvas="1080x1920", fit="face")
    if long_frames:
        for fmt in FORMATS:
            note(f"user rows: a {long_frames}-frame {fmt} voice-over")
            job(f"user-photo-{fmt}-{long_frames}", PHOTO, voice_file(voices, fmt, long_frames))
    if presets:
        out["presets"] = {}
        for kind, avatar in (("photo", PHOTO), ("video", VIDEO)):
            note(f"preset comparison: {kind} avatar, {', '.join(presets)}")
            out["presets"][kind] = preset_comparison(
                avatar, v["wav48"], default, engine, workdir / f"presets-{kind}", presets, ssim_every=8
            )
    return out


# --------------------------------------------------------------------------------------------
# The preset comparison


def reference_frames(avatar: str, audio: Path, settings, engine) -> list[np.ndarray]:
    """Every frame of the render, uncompressed, as the encoders get it (NV12 ``[H*3//2, W]``)."""
    from studio.core.render.composite import pad_even, rgb_to_nv12
    from studio.core.render.renderer import Renderer

    r = Renderer(avatar, audio, settings, engine=engine)
    out: list[np.ndarray] = []
    for _, frames in r.iter_frames():
        nv12 = rgb_to_nv12(pad_even(frames))
        nv12 = nv12.cpu().numpy() if hasattr(nv12, "cpu") else np.asarray(nv12)
        out.extend(np.ascontiguousarray(f) for f in nv12)
    return out


def preset_comparison(avatar: str, audio: Path, settings, engine, workdir: Path, presets, ssim_every: int = 4) -> dict:
    """Per preset: the render's frames encoded from memory with its encoder and hints (frames/s,
    x264 CPU ms per frame, bytes) and their quality against the uncompressed frames."""
    from dataclasses import replace

    from studio.core.avatars import library
    from studio.core.media.rates import DEFAULT_RATE
    from studio.core.render.outputs import open_video_for
    from studio.core.render.plan import stripes

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    ref = reference_frames(avatar, audio, settings, engine)
    a = library.resolve(avatar)
    T = len(ref)
    h3, w = ref[0].shape
    out = {"frames": T, "size": f"{w}x{h3 * 2 // 3}", "crf": settings.crf}
    for preset in presets:
        path = workdir / f"{preset}.mp4"
        t0 = time.perf_counter()
        s = replace(settings, preset=preset, codec="h264")
        with open_video_for(s, path, a, fps=DEFAULT_RATE, total_frames=T, rolling=True) as wr:
            for idx in stripes(T, 32, wr.chunks, window=wr.window):
                wr.write([ref[i] for i in idx], indices=idx)
        seconds = time.perf_counter() - t0
        row = {
            "seconds": round(seconds, 3),
            "fps": round(T / seconds, 1),
            "bytes": path.stat().st_size,
            "encoder": wr.name,
            "x264_ms_per_frame": round(wr.close_ms.get("x264_busy", 0.0) / T, 2)
            if "x264_busy" in wr.close_ms
            else None,
        }
        row.update(frame_quality(ref, path, ssim_every))
        out[preset] = row
        path.unlink(missing_ok=True)
    return out


def frame_quality(ref: list[np.ndarray], mp4: Path, ssim_every: int = 4) -> dict:
    """PSNR of Y and of all planes (from the mean squared error over all frames), and mean SSIM
    of Y and all planes (FFmpeg's ``ssim`` filter, every ``ssim_every``-th frame), of ``mp4``'s
    frames against the uncompressed NV12 ``ref``."""
    import av

    h3, w = ref[0].shape
    h = h3 * 2 // 3
    se_y = se_c = 0.0
    ssim_y, ssim_all = [], []
    n = 0
    with av.open(str(mp4)) as c:
        for k, frame in enumerate(c.decode(video=0)):
            got = frame.to_ndarray(format="nv12")
            r = ref[k]
            d = got.astype(np.int16) - r.astype(np.int16)
            se_y += float(np.einsum("ij,ij->", d[:h], d[:h], dtype=np.float64))
            se_c += float(np.einsum("ij,ij->", d[h:], d[h:], dtype=np.float64))
            if k % ssim_every == 0:
                y, a = _ssim(r, got, w, h)
                ssim_y.append(y)
                ssim_all.append(a)
            n += 1
    if n != len(ref):
        raise RuntimeError(f"{mp4} holds {n} frames, the render {len(ref)}")
    mse_y = se_y / (n * h * w)
    mse_all = (se_y + se_c) / (n * h3 * w)
    return {
        "psnr_y": _psnr(mse_y),
        "psnr": _psnr(mse_all),
        "ssim_y": round(float(np.mean(ssim_y)), 5),
        "ssim": round(float(np.mean(ssim_all)), 5),
    }


def _psnr(mse: float) -> float:
    return round(float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse), 3)


_SSIM: dict = {}


def _ssim(ref_nv12: np.ndarray, got_nv12: np.ndarray, w: int, h: int) -> tuple[float, float]:
    """FFmpeg's ``ssim`` filter on one pair of NV12 frames: (Y, all)."""
    from fractions import Fraction

    import av

    key = (w, h)
    if key not in _SSIM:
        g = av.filter.Graph()
        nv12 = av.VideoFormat("nv12")
        a = g.add_buffer(width=w, height=h, format=nv12, time_base=Fraction(1, FPS))
        b = g.add_buffer(width=w, height=h, format=nv12, time_base=Fraction(1, FPS))
        s = g.add("ssim")
        sink = g.add("buffersink")
        a.link_to(s, 0, 0)
        b.link_to(s, 0, 1)
        s.link_to(sink)
        g.configure()
        _SSIM[key] = (g, a, b, sink, [0])  # the graph too: its filters die with it
    _, a, b, sink, pts = _SSIM[key]
    fa = av.VideoFrame.from_ndarray(got_nv12, format="nv12")
    fb = av.VideoFrame.from_ndarray(ref_nv12, format="nv12")
    fa.pts = fb.pts = pts[0]
    pts[0] += 1
    a.push(fa)
    b.push(fb)
    out = sink.pull()
    meta = out.metadata
    return float(meta["lavfi.ssim.Y"]), float(meta["lavfi.ssim.All"])


def env_home(home: Path):
    """A context with ``STUDIO_HOME=home`` (the bench's own data folder: the user's library,
    models and caches stay untouched)."""
    from studio.core.env import scoped

    return scoped("STUDIO_HOME", str(home))


def other_preset(default: str) -> str:
    """The preset the user rows compare the default with: ultrafast, or veryfast when the default is it."""
    return "veryfast" if default == "ultrafast" else "ultrafast"
