"""The user's path in ``studio bench --user``: weights imported from the official files, library
avatars, the queue, a real ``studio serve`` and cold commands, in the bench's own data folder.

    res = user_path(workdir, device="cuda", frames=672, long_frames=15000, note=print)

Everything runs against ``<workdir>/home`` (``STUDIO_HOME``): the user's library, models and
caches are never touched. In order:

1. random weights written in the official layout (``random_models``: ``unet.pth``, the VAE's and
   whisper's ``.bin``, TAESD's safetensors), then imported with the real ``studio models import``
   (timed: checking, hashing, linking and the fast layout it writes);
2. core's user rows (``studio.bench.user``) on the warm engine of an ``EnginePool``: library
   avatars from a JPEG and an MP4, 48 kHz stereo WAV / MP3 / AAC voice-overs, the default preset
   and ultrafast, a fresh ``Renderer`` per job, the preset comparison;
3. the queue on that warm engine: ``clients`` jobs of ``clip_frames`` frames (each its own voice-
   over) run one after another, then pipelined (the next job's engine work while the previous
   job's encoders drain): frames/s together, and the ratio;
4. cold commands, while nothing else holds the GPU: ``studio render`` of a 15 s voice-over in a
   fresh process (MuseTalk from the imported fast layout, MuseTalk from the official pickles,
   classic), wall time of the whole process, and what importing torch alone costs;
5. a real ``studio serve`` process: ``POST /generate`` warm (default settings and ultrafast,
   ``repeats`` times each): the request's wall time and the server's render seconds; then
   ``clients`` clients posting ``clip_frames`` frames at once: frames/s together;
6. the server as a service (``studio.service.bench_serve``): a fresh server's time to ready and its
   first three requests against warm ones, 14 requests varying batch/decoder/precision (engines
   held, device memory), 8 and 16 clients at once with cross-job batching on and off.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from studio.core.env import child

log = logging.getLogger(__name__)

CLIP_FRAMES = 375  # 15 s


def user_path(
    workdir: Path,
    *,
    device: str | None = None,
    frames: int = 672,
    long_frames: int = 0,
    height: int = 1080,
    presets=("ultrafast", "superfast", "veryfast"),
    clients: int = 8,
    clip_frames: int = CLIP_FRAMES,
    repeats: int = 3,
    queue: bool = True,
    cold: bool = True,
    serve: bool = True,
    service: bool = True,
    note=log.info,
    on_part=None,
) -> dict:
    """Every row above; ``on_part(out)`` after each part (the command saves what it has so far)."""
    from studio.bench import user as bench_user

    save = on_part or (lambda out: None)
    from studio.core.engines.runtime_torch import resolve_device

    workdir = Path(workdir)
    home = workdir / "home"
    dev = str(resolve_device(device))
    cuda = dev.startswith("cuda")
    out: dict = {"runs": {}, "home": str(home)}
    env = child(STUDIO_HOME=str(home))
    with bench_user.env_home(home):
        out["import"] = import_official(workdir / "random", env, tiny=not cuda, note=note)  # the base bench's files
        from studio.core.settings import RenderSettings
        from studio.service.pool import EnginePool

        pool = EnginePool()
        settings = RenderSettings(device=dev, engine="musetalk")
        t0 = time.perf_counter()
        engine, _ = pool.get(settings)
        out["engine_object_s"] = round(time.perf_counter() - t0, 3)  # the networks load with the first job
        rows = bench_user.user_rows(
            workdir / "user",
            engine,
            device=dev,
            frames=frames,
            long_frames=long_frames,
            height=height,
            presets=presets,
            note=note,
        )
        out["runs"].update(rows.pop("runs"))
        out.update(rows)
        save(out)
        voices = [bench_user.voice_file(workdir / "clips", "wav48", clip_frames, seed=s) for s in range(1, clients + 1)]
        if queue:
            out["queue"] = queue_rows(workdir / "queue", pool, settings, voices, note=note)
            save(out)
        pool.close()
    if cold:
        out["cold"] = cold_rows(workdir / "cold", env, dev, voices[0], note=note)
        save(out)
    if serve:
        voice = bench_user.voice_file(workdir / "user" / "voices", "wav48", frames)  # the user rows' one
        out["serve"] = serve_rows(workdir / "serve", env, voices, voice, repeats=repeats, note=note)
        save(out)
    if serve and service:
        from studio.service.bench_serve import service_rows

        voice = bench_user.voice_file(workdir / "user" / "voices", "wav48", frames)
        many = [
            bench_user.voice_file(workdir / "clips", "wav48", clip_frames, seed=s) for s in range(1, 2 * clients + 1)
        ]
        short = bench_user.voice_file(workdir / "clips", "wav48", min(100, clip_frames), seed=99)
        fresh = [bench_user.voice_file(workdir / "user" / "voices", "wav48", frames, seed=s) for s in range(100, 106)]
        breaking = bench_user.voice_file(workdir / "clips", "wav48", 125, seed=77)  # 5 s, priority=breaking
        out["service"] = service_rows(
            workdir / "service",
            env,
            voice,
            many,
            note=note,
            short=short,
            fresh=fresh,
            counts=(clients, 2 * clients),
            breaking=breaking,
        )
        save(out)
    if serve and service:
        from studio.service.bench_serve import eviction_rows

        short = bench_user.voice_file(workdir / "clips", "wav48", min(100, clip_frames), seed=99)
        out["eviction"] = eviction_rows(workdir / "evict", env, short, note=note)
    return out


TABLE_VARIANTS = (("noprefetch", (), {"STUDIO_PREFETCH_JOBS": "0"}),)  # the bursts without the next jobs prepared


def table_path(workdir: Path, device: str | None, clients: int = 8, trace_dir: Path | None = None, **kw) -> dict:
    """Only what issue 48's table needs (``studio bench --user --table``, ~5 minutes on an H100): the
    weights imported, the photo avatar, the cold commands, a fresh server's warm ``POST /generate``
    of ``frames``, the hand-off, ``clients`` and twice as many clients at once with a 5 s breaking
    clip posted into each burst (and again on a server without the next jobs prepared ahead,
    ``TABLE_VARIANTS``; every request its own new voice-over), and an evicted engine's memory (``eviction_rows``); ``kw``: ``frames``
    (672), ``height`` (1080), ``clip_frames``, ``note``, ``on_part`` as ``user_path``'s. ``trace_dir``: the
    server's stage trace and GPU samples (``bench_serve.service_rows``; tests/benchmarks/trace_service.py)."""
    from studio.bench import user as bench_user
    from studio.core.engines.runtime_torch import resolve_device
    from studio.service.bench_serve import eviction_rows, service_rows

    note, save = kw.get("note", log.info), kw.get("on_part") or (lambda out: None)
    frames, height, clip_frames = kw.get("frames", 672), kw.get("height", 1080), kw.get("clip_frames", CLIP_FRAMES)
    workdir = Path(workdir)
    home = workdir / "home"
    dev = str(resolve_device(device))
    out: dict = {"runs": {}, "home": str(home), "table_only": True}
    env = child(STUDIO_HOME=str(home))
    with bench_user.env_home(home):
        out["import"] = import_official(workdir / "random", env, tiny=not dev.startswith("cuda"), note=note)
        out["avatars"] = bench_user.add_avatars(workdir / "user", height)
    many = [bench_user.voice_file(workdir / "clips", "wav48", clip_frames, seed=s) for s in range(1, 2 * clients + 1)]
    out["cold"] = cold_rows(workdir / "cold", env, dev, many[0], note=note)
    save(out)
    short = bench_user.voice_file(workdir / "clips", "wav48", min(100, clip_frames), seed=99)
    try:
        out["eviction"] = eviction_rows(workdir / "evict", env, short, note=note)
    except Exception as exc:  # noqa: BLE001 - the other rows still count; the table says it was not measured
        out["eviction"] = {"error": f"{type(exc).__name__}: {exc}"}
        note(f"eviction rows failed: {out['eviction']['error']}")
    save(out)
    voice = bench_user.voice_file(workdir / "user" / "voices", "wav48", frames)
    fresh = [bench_user.voice_file(workdir / "user" / "voices", "wav48", frames, seed=s) for s in range(100, 106)]
    breaking = bench_user.voice_file(workdir / "clips", "wav48", 125, seed=77)  # 5 s, priority=breaking
    out["service"] = {}
    try:
        service_rows(
            workdir / "service",
            env,
            voice,
            many,
            note=note,
            fresh=fresh,
            counts=(clients, 2 * clients),
            breaking=breaking,
            variants=TABLE_VARIANTS,
            voice_for=lambda n, seed: bench_user.voice_file(workdir / "clips", "wav48", n, seed=seed),
            cache=False,
            out=out["service"],
            trace_dir=trace_dir,
        )
    except Exception as exc:  # noqa: BLE001 - the rows so far still count; the table says which failed
        out["service"]["error"] = f"{type(exc).__name__}: {exc}"
        note(f"service rows failed: {out['service']['error']}")
    save(out)
    return out


# --------------------------------------------------------------------------------------------
# 1. The official files, imported


def import_official(folder: Path, env: dict, tiny: bool, note=log.info) -> dict:
    """Random weights in the official layout under ``folder``, then ``studio models import``."""
    from studio.core.engines import random_models

    official, taesd = folder / "models", folder / "taesd"  # what random_models writes
    if not (official / "musetalkV15" / "unet.pth").is_file():
        note("writing random weights in the official layout (" + ("tiny configs" if tiny else "real sizes") + ")")
        t0 = time.perf_counter()
        official = random_models.write_official_models(folder, tiny=tiny)
        random_models.write_taesd(taesd, config=random_models.TAESD_TINY if tiny else None)
        written = round(time.perf_counter() - t0, 3)
    else:
        written = 0.0
    note("studio models import (the official .pth/.bin files)")
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "studio", "models", "import", str(official), "--taesd", str(taesd), "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    seconds = round(time.perf_counter() - t0, 3)
    if r.returncode != 0:
        raise RuntimeError(f"studio models import failed: {r.stderr.strip()[-1000:]}")
    answer = json.loads(r.stdout)
    return {"write_s": written, "import_s": seconds, "musetalk": answer.get("musetalk"), "fast": answer.get("fast")}


# --------------------------------------------------------------------------------------------
# 3. The queue: serial against pipelined, on one warm engine


def queue_rows(folder: Path, pool, settings, voices: list[Path], note=log.info) -> dict:
    """``len(voices)`` jobs through a ``QueueService`` on ``pool``'s warm engine, serially and
    pipelined; frames/s together and whether both wrote the same files."""
    from studio.bench import user as bench_user
    from studio.core.media import aac_cache
    from studio.service.queue import QueueService
    from studio.service.request import RenderRequest

    folder.mkdir(parents=True, exist_ok=True)
    out: dict = {"jobs": len(voices)}
    for mode in ("serial", "pipelined", "serial", "pipelined"):  # warm once each, then timed
        aac_cache.clear()
        store = folder / f"jobs-{mode}.sqlite"
        store.unlink(missing_ok=True)
        qs = QueueService(store, pool=pool, pipeline=mode == "pipelined")
        for k, v in enumerate(voices):
            qs.add(RenderRequest(bench_user.PHOTO, str(v), str(folder / f"{mode}_{k}.mp4"), settings, overwrite=True))
        t0 = time.perf_counter()
        done: list[Any] = list(qs.run_until_empty())
        wall = time.perf_counter() - t0
        qs.close()
        frames = sum(int((j.result or {}).get("frames", 0)) for j in done)
        failed = [j.reason for j in done if j.state != "done"]
        out[mode] = {"seconds": round(wall, 3), "frames": frames, "fps": round(frames / wall, 1), "failed": failed}
        note(f"queue, {len(voices)} jobs {mode}: {out[mode]['fps']} frames/s together ({wall:.2f} s)")
    out["pipelined_over_serial"] = round(out["pipelined"]["fps"] / max(1e-9, out["serial"]["fps"]), 2)
    out["same_files"] = all(
        _packets(folder / f"serial_{k}.mp4") == _packets(folder / f"pipelined_{k}.mp4") for k in range(len(voices))
    )
    for p in folder.glob("*.mp4"):
        p.unlink()
    return out


def _packets(path: Path) -> list[bytes]:
    import av

    with av.open(str(path)) as c:
        return [bytes(p) for p in c.demux() if p.size]


# --------------------------------------------------------------------------------------------
# 4. Cold commands


COLD_PLAN: tuple[tuple[str, str, dict], ...] = (  # (row, engine, environment), in this order
    ("cold-cli-musetalk-new-avatar", "musetalk", {}),  # its first MuseTalk render computes the avatar's latents
    ("cold-cli-musetalk", "musetalk", {}),
    ("cold-cli-musetalk-no-preload", "musetalk", {"STUDIO_PRELOAD": "0"}),
    ("cold-cli-classic", "classic", {}),
    ("cold-cli-classic-no-preload", "classic", {"STUDIO_PRELOAD": "0"}),
)


def cold_rows(
    folder: Path,
    env: dict,
    device: str,
    voice: Path,
    note=log.info,
    imports: bool = True,
    engines=("musetalk", "classic"),
) -> dict:
    """Fresh ``studio render`` processes of ``voice`` (wall time of the whole command, and its
    ``timeline``: seconds from the process's start to each stage), ``COLD_PLAN``'s rows; what
    importing torch alone costs (``engines``: the rows of those engines); ``imports``: the heaviest
    imports of a cold command of the first engine
    (``python -X importtime``, ``imports``: the 25 largest by cumulative time)."""
    from studio.bench import user as bench_user

    folder.mkdir(parents=True, exist_ok=True)
    out: dict = {}
    r = subprocess.run(
        [sys.executable, "-c", "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"],
        capture_output=True,
        text=True,
        env=env,
    )
    out["import_torch_s"] = round(float(r.stdout.strip() or 0), 3)
    base = [sys.executable, "-m", "studio", "render", "--avatar", bench_user.PHOTO, "--audio", str(voice)]
    for key, engine, extra in [row for row in COLD_PLAN if row[1] in engines]:
        note(f"cold: a fresh `studio render` of {voice.name} with {engine} ({key})")
        cmd = [*base, "-o", str(folder / f"{key}.mp4"), "--engine", engine, "--device", device, "--json"]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env={**env, **extra, "STUDIO_LOCAL_SERVER": "0"})
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            out[key] = {"error": p.stderr.strip()[-1500:], "seconds": round(wall, 3)}
            continue
        res = json.loads(p.stdout.strip().splitlines()[-1])
        out[key] = {
            "seconds": round(wall, 3),
            "render_s": res.get("seconds"),
            "outside_render_s": round(wall - float(res.get("seconds") or 0), 3),
            "frames": res.get("frames"),
            "stage_ms": res.get("stage_ms"),
            "audio": res.get("audio"),
            "timeline": res.get("timeline"),
        }
        note(f"{key}: {wall:.2f} s wall (render {res.get('seconds')} s); timeline {res.get('timeline')}")
        (folder / f"{key}.mp4").unlink(missing_ok=True)
    if imports:
        cmd = [sys.executable, "-X", "importtime", *base[1:], "-o", str(folder / "imports.mp4")]
        p = subprocess.run(
            [*cmd, "--engine", engines[0], "--device", device],
            capture_output=True,
            text=True,
            env={**env, "STUDIO_PRELOAD": "0"},
        )  # one thread importing: importtime's tree is that thread's
        out["imports"] = heaviest_imports(p.stderr)
        (folder / "imports.mp4").unlink(missing_ok=True)
    return out


def heaviest_imports(importtime: str, most: int = 25) -> list[tuple[str, float, float]]:
    """``python -X importtime``'s output -> ``(module, cumulative s, self s)`` of the ``most`` modules
    with the largest cumulative time, top-level packages and studio's modules only (a child's time is
    in its parent's)."""
    rows = []
    for line in importtime.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = line.split("|")
        try:
            own, cum = int(parts[0].split(":")[1]), int(parts[1])
        except ValueError:
            continue  # the header line
        name = parts[2].rstrip()
        depth = (len(name) - len(name.lstrip())) // 2
        name = name.strip()
        if depth <= 1 or name.startswith("studio"):
            rows.append((name, round(cum / 1e6, 3), round(own / 1e6, 3)))
    return sorted(rows, key=lambda r: -r[1])[:most]


# --------------------------------------------------------------------------------------------
# 5. A real server


def serve_rows(folder: Path, env: dict, voices: list[Path], voice: Path, repeats: int, note=log.info) -> dict:
    """A ``studio serve`` process on the bench's data folder: ``POST /generate`` warm, then all
    ``voices`` posted at once by as many clients."""
    from studio.bench import user as bench_user
    from studio.core.media import aac_cache
    from studio.service.client import StudioClient

    folder.mkdir(parents=True, exist_ok=True)
    out: dict = {"generate": {}}
    from studio.service.serve_process import ServeProcess

    with ServeProcess(folder, env) as srv, StudioClient(srv.url, timeout=600) as client:
        note(f"serve: {srv.url} up in {srv.start_s:.1f} s; warming up")
        client.generate(bench_user.PHOTO, folder / "warm.mp4", audio=voice)
        time.sleep(2.0)  # the idle server captures its engine's other batch sizes (small jobs pay none)
        from studio.core.settings import RenderSettings

        for preset in ("", bench_user.other_preset(RenderSettings().preset)):
            rows = []
            for _ in range(repeats):
                with bench_user.env_home(Path(env["STUDIO_HOME"])):
                    aac_cache.clear()  # each request is a voice-over the server has not seen
                t0 = time.perf_counter()
                r = client.generate(
                    bench_user.PHOTO, folder / "out.mp4", audio=voice, settings={"preset": preset} if preset else None
                )
                wall = time.perf_counter() - t0
                job = client.render(r["job"])
                res = job.get("result") or {}
                rows.append(
                    {
                        "request_s": round(wall, 3),
                        "render_s": r["render_seconds"],
                        "frames": res.get("frames"),
                        "finish_s": round(float((res.get("stage_ms") or {}).get("finish", 0)) / 1e3, 3),
                        "audio": res.get("audio"),
                        "audio_wait_ms": (res.get("finish_ms") or {}).get("audio_wait"),
                    }
                )
            key = preset or "default"
            out["generate"][key] = rows
            note(generate_line(key, rows))
        out["concurrent"] = _burst(srv.url, voices, folder, note)
    return out


def generate_line(key: str, rows: list[dict], audio: bool = False) -> str:
    """One line of the ``POST /generate`` rows of a preset (``key``): each request's seconds and the server's
    render seconds; ``audio``: also each answer's audio stream."""
    line = (
        f"serve: POST /generate ({key}): request "
        + ", ".join(f"{x['request_s']:.3f}" for x in rows)
        + " s; server's render "
        + ", ".join(f"{x['render_s']:.3f}" for x in rows)
        + " s"
    )
    return line + ("; audio " + ", ".join(f"{x['audio']}" for x in rows) if audio else "")


def _burst(url: str, voices: list[Path], folder: Path, note) -> dict:
    """One client per voice-over, all posting at once; frames/s from the first post to the last answer."""
    from studio.bench import user as bench_user
    from studio.service.client import StudioClient

    answers: list = [None] * len(voices)
    errors: list[str] = []
    start = threading.Barrier(len(voices) + 1)

    def client(k: int) -> None:
        try:
            with StudioClient(url, timeout=600) as c:
                start.wait()
                t0 = time.perf_counter()
                r = c.generate(bench_user.PHOTO, folder / f"burst_{k}.mp4", audio=voices[k])
                answers[k] = (t0, time.perf_counter(), c.render(r["job"]).get("result") or {})
        except Exception as exc:  # noqa: BLE001 - reported in the row
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(len(voices))]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    frames = sum(int(a[2].get("frames") or 0) for a in answers if a)
    row = {
        "clients": len(voices),
        "seconds": round(wall, 3),
        "frames": frames,
        "fps": round(frames / wall, 1) if wall else 0.0,
        "request_s": [round(a[1] - a[0], 3) for a in answers if a],
        "errors": errors,
    }
    note(f"serve: {len(voices)} clients at once: {row['fps']} frames/s together ({wall:.2f} s)")
    return row


# --------------------------------------------------------------------------------------------
# Issue 48's table


def issue_table(u: dict) -> list[tuple[str, str, str, str]]:
    """The rows of issue 48's table from ``user_path``'s or ``table_path``'s figures: ``(what,
    measured, goal, "met"/"missed"/"not measured")``."""
    sv = u.get("service") or {}
    rows: list[tuple[str, str, str, str]] = []

    def row(what: str, value: float | None, goal: float, text: str, higher: bool = False) -> None:
        if value is None:
            rows.append((what, "not measured", text, "not measured"))
            return
        ok = value >= goal if higher else value <= goal
        rows.append((what, f"{value:,.1f} frames/s" if higher else f"{value:.2f} s", text, "met" if ok else "missed"))

    bursts = {b["clients"]: b for b in sv.get("concurrent_default") or []}
    for n, least in sorted(zip(sorted(bursts), (1000.0, 1100.0), strict=False)):
        row(f"{n} clients x 15 s at once, default server", bursts[n]["fps"], least, f">= {least:,.0f} frames/s", True)
    if not bursts:
        row("8 clients x 15 s at once, default server", None, 1000, ">= 1,000 frames/s", True)
    for n in sorted(bursts):
        b = bursts[n].get("breaking") or {}
        walls = bursts[n].get("request_s") or []
        what = f"a 5 s breaking clip's first frame, {n} clients running"
        if walls:
            what += f" (fastest client {min(walls):.2f} s, slowest {max(walls):.2f} s)"
        row(what, b.get("first_frame_s"), 0.25, "<= 0.25 s")
    f = sv.get("fresh") or {}
    warm = sorted(r["request_s"] for r in (f.get("requests") or [])[3:])
    frames = (f.get("requests") or [{}])[-1].get("frames") or 672
    row(f"one {frames}-frame POST /generate, warm (median)", warm[len(warm) // 2] if warm else None, 0.8, "<= 0.8 s")
    c = u.get("cold") or {}
    for key, label, goal in (("cold-cli-musetalk", "MuseTalk", 5.0), ("cold-cli-classic", "classic", 3.0)):
        r = c.get(key) or {}
        row(f"cold `studio render` of 15 s, {label}, this process", r.get("seconds"), goal, f"<= {goal:g} s")
    h = sv.get("handoff") or {}
    for engine, label, goal in (("musetalk", "MuseTalk", 5.0), ("classic", "classic", 3.0)):
        r = h.get(engine) or {}
        if r.get("handed"):
            row(
                f"fresh `studio render` of 15 s, {label}, handed to a warm server", r["seconds"], goal, f"<= {goal:g} s"
            )
    e = u.get("eviction") or {}
    if "met" in e:
        rows.append(
            (
                "GPU memory after an engine is evicted (one engine kept)",
                f"{e['after_eviction_gb']} GB used (before: {e['one_engine_gb']}, larger: {e['larger_engine_gb']})",
                "returned to the device",
                "met" if e["met"] else "missed",
            )
        )
    else:
        rows.append(("GPU memory after an engine is evicted", "not measured", "returned to the device", "not measured"))
    return rows
