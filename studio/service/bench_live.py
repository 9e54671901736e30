"""``studio bench --live N``: N live sessions on one ``studio serve``, measured by real WebRTC receivers.

    res = live_rows(sessions=24, workdir=Path("/tmp/bl"), device="cuda", engine="musetalk", viewers=2)

A fresh ``studio serve`` (its own data folder under ``workdir``) with the bench's photo avatar (the
reference workload's presenter at ``height``, faces from its known landmarks: no face tracker) and, for
MuseTalk, random weights of the real architecture (TAESD decoder) unless weights are imported. Then
``sessions`` live sessions open at once; every session's voice comes over its audio WebSocket in real
time (1 s of silence, then 2 s of the demo voice and 1 s of silence, repeated), ``viewers`` of them are
watched by an aiortc WHEP receiver on 127.0.0.1 that records each decoded frame's arrival, and the
server's own figures are read for all of them. Measured: time to first frame (POST to the first decoded
frame), voice onset -> first decoded frame whose mouth moves (the receiver's clock: the onset is the
moment its first samples were sent), frame intervals at the receiver (p99, the largest gap), the
server's per-session figures (frames/s, late, dropped, latency) and GPU memory added per session.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np

from studio.core import env

log = logging.getLogger(__name__)

PATTERN_S = (1.0, 2.0, 1.0)  # silence before the first onset, then speech and silence in turn
CHUNK_S = 0.02
MOVED = 30.0  # ``moved`` levels: the mouth is not the resting one (the tests' threshold)


def _voice(seconds: float) -> tuple[np.ndarray, list[float]]:
    """16 kHz mono: the pattern above for ``seconds``; and the onsets (s from its start)."""
    from studio.core.env import repo_resources
    from studio.core.media.audio import load

    demo = load(repo_resources() / "demo" / "voiceover.flac").samples
    lead, speak, rest = PATTERN_S
    out = [np.zeros(int(lead * 16_000), np.float32)]
    onsets = []
    t, k = lead, 0
    while t < seconds:
        onsets.append(t)
        a = int(k * speak * 16_000) % max(1, len(demo) - int(speak * 16_000))
        out += [demo[a : a + int(speak * 16_000)], np.zeros(int(rest * 16_000), np.float32)]
        t += speak + rest
        k += 1
    return np.concatenate(out)[: int(seconds * 16_000)], [o for o in onsets if o < seconds]


def _models(home: Path, note) -> str:
    """Random MuseTalk weights of the real architecture in the data folder's store (none imported)."""
    from studio.core.engines import random_models, weights

    store = home / "models"
    mark = home.parent / "random" / "imported"  # this bench wrote the store's weights (an earlier run)
    if weights.availability(store).ready:
        return "random (real architecture)" if mark.is_file() else "imported"
    note("writing random-weight MuseTalk models (real architecture)")
    src = random_models.write_official_models(home.parent / "random", tiny=False)
    taesd = random_models.write_taesd(home.parent / "random" / "taesd")
    weights.import_models(src, taesd.parent, models_dir=store)
    mark.touch()
    return "random (real architecture)"


def _gpu_bytes(text: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith("studio_gpu_memory_bytes") and 'kind="allocated"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _moved(g, ref) -> float:
    from studio.service.live_viewer import moved

    return moved(g.mouth, ref.mouth) if g.mouth is not None and ref.mouth is not None else 0.0


def _q(values, p) -> float | None:
    return round(float(np.percentile(values, p)), 1) if len(values) else None


def live_rows(
    sessions: int,
    workdir: Path,
    device: str = "cpu",
    engine: str = "classic",
    height: int = 600,
    seconds: float = 12.0,
    viewers: int = 1,
    note=log.info,
) -> dict:
    import httpx

    from studio.bench.user import PHOTO, add_avatars
    from studio.service.serve_process import ServeProcess

    workdir = Path(workdir)
    home = workdir / "home"
    home.mkdir(parents=True, exist_ok=True)
    env.put("STUDIO_HOME", str(home))
    out: dict = {"sessions": sessions, "viewers": min(viewers, sessions), "engine": engine, "device": device}
    settings = {"engine": engine, "device": device}
    if engine == "musetalk":
        out["weights"] = _models(home, note)
        settings["decoder"] = "taesd"
    note(f"adding the {height}p photo avatar")
    out["avatar"] = add_avatars(workdir / "src", height)["photo_size"]
    from studio.core.avatars import library

    x1, y1, x2, y2 = (int(v) for v in library.resolve(PHOTO).boxes[0])
    warm = ",".join(f"{k}={v}" for k, v in settings.items())
    child = env.child(STUDIO_HOME=str(home), PYTHONPATH=os.pathsep.join(sys.path))
    t0 = time.perf_counter()
    srv = ServeProcess(home, child, ("--max-live", str(sessions + 1), "--warm", warm), timeout=600)
    try:
        with httpx.Client(base_url=srv.url, timeout=120) as c:
            while c.get("/v1/ready").status_code != 200:
                time.sleep(0.2)
            out["ready_s"] = round(time.perf_counter() - t0, 2)
            before = _gpu_bytes(c.get("/metrics").text)
            res = asyncio.run(_run(srv.url, sessions, viewers, seconds, settings, (x1, y1, x2, y2)))
            out.update(res)
            after = _gpu_bytes(c.get("/metrics").text)
            if before or after:
                out["gpu_mb_per_session"] = round((after - before) / 2**20 / sessions, 1)
    finally:
        srv.stop()
        out["server_log_tail"] = srv.log_tail(800)
    return out


async def _run(url: str, n: int, viewers: int, seconds: float, settings: dict, box) -> dict:
    import httpx
    import websockets

    from studio.service.live_viewer import Viewer

    voice, onsets = _voice(seconds)
    pcm = (np.clip(voice, -1, 1) * 32767).astype("<i2")
    async with httpx.AsyncClient(base_url=url, timeout=120) as c:
        opened = []
        for _ in range(n):
            t = time.monotonic()
            r = await c.post("/v1/live", json={"avatar": "bench-photo", **settings})
            r.raise_for_status()
            opened.append((t, r.json()))
        watch = []
        for t, s in opened[:viewers]:
            v = Viewer(url, s["id"], {}, mouth=box)
            await v.__aenter__()
            watch.append((t, s, v))
        await asyncio.sleep(1.5)  # rest frames: the references
        refs = [v.frames[-1] if v.frames else None for _, _, v in watch]

        sent_at: list[list[float]] = [[] for _ in range(n)]

        async def feed(k: int, s: dict) -> None:
            ws_url = url.replace("http", "ws", 1) + s["links"]["audio"] + f"?rate=16000&key={s['key']}"
            async with websockets.connect(ws_url, max_size=2**20) as ws:
                step = int(16_000 * CHUNK_S)
                t0 = time.monotonic()
                marks = [int(o * 16_000) for o in onsets]
                for i in range(0, len(pcm), step):
                    if marks and i >= marks[0]:
                        sent_at[k].append(time.monotonic())
                        marks.pop(0)
                    await ws.send(pcm[i : i + step].tobytes())
                    ahead = t0 + (i + step) / 16_000 - time.monotonic()
                    if ahead > 0:
                        await asyncio.sleep(ahead)
                await asyncio.sleep(1.0)

        t_feed = time.monotonic()
        await asyncio.gather(*(feed(k, s) for k, (_, s) in enumerate(opened)))
        figures = [(await c.get(s["links"]["self"])).json()["figures"] for _, s in opened]
        for _, _s, v in watch:
            await v.leave()
        for _, s in opened:
            await c.delete(s["links"]["self"])

    first, lat, gaps, p99 = [], [], [], []
    for k, ((t_open, _s, v), ref) in enumerate(zip(watch, refs, strict=True)):
        if v.frames:
            first.append((v.frames[0].at - t_open) * 1e3)
        at = np.array([g.at for g in v.frames if g.at >= t_feed])
        if len(at) > 2:
            d = np.diff(at) * 1e3
            gaps.append(float(d.max()))
            p99.append(float(np.percentile(d, 99)))
        if ref is None:
            continue
        for onset in sent_at[k]:
            hit = next((g for g in v.frames if g.at >= onset and _moved(g, ref) > MOVED), None)
            if hit is not None:
                lat.append((hit.at - onset) * 1e3)
    server = {
        "fps_min": min(f["fps"] for f in figures),
        "late_total": sum(f["late"] for f in figures),
        "dropped_total": sum(f["dropped"] for f in figures),
        "interval_p99_ms_max": max((f["frame_interval_ms"]["p99"] or 0) for f in figures),
        "interval_max_ms_max": max((f["frame_interval_ms"]["max"] or 0) for f in figures),
        "latency_p95_ms_max": max((f["latency_ms"]["p95"] or 0) for f in figures),
        "first_frame_s_max": max((f["first_frame_s"] or 0) for f in figures),
        "engine_frames": sum(f["engine_frames"] for f in figures),
    }
    return {
        "receiver": {
            "first_frame_ms": [round(x) for x in first],
            "onset_latency_ms": {"n": len(lat), "p50": _q(lat, 50), "p95": _q(lat, 95), "max": _q(lat, 100)},
            "interval_p99_ms": [round(x, 1) for x in p99],
            "largest_gap_ms": [round(x, 1) for x in gaps],
        },
        "server": server,
    }


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--engine", default="classic")
    p.add_argument("--height", type=int, default=600)
    p.add_argument("--seconds", type=float, default=12.0)
    p.add_argument("--viewers", type=int, default=1)
    p.add_argument("--workdir", default="/tmp/bench-live")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    res = live_rows(a.sessions, Path(a.workdir), a.device, a.engine, a.height, a.seconds, a.viewers)
    text = json.dumps(res, indent=1)
    print(text)
    if a.json:
        Path(a.json).write_text(text)
    return 0
