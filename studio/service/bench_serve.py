"""The server-as-a-service rows of ``studio bench --user`` (issue 38), on real ``studio serve`` processes.

    out = service_rows(folder, env, voice, voices, note=print)

- ``fresh``: a server started on a data folder without ``renders/`` or ``uploads/``: seconds until
  ``/v1/health`` answers and until ``/v1/ready`` says 200 (the engine loaded and warmed), then the
  first three ``POST /generate`` after ready against three warm ones (the 4th to 6th): each
  request's wall and its ratio to the warm median;
- ``cache``: 14 requests that vary ``batch`` (8-128), ``decoder`` and ``precision``: after each, the
  engines held, evictions and the device memory reserved (``/metrics``): the bound holds, every
  request answers;
- ``handoff``: a fresh ``studio render`` of a 15 s voice-over (MuseTalk, classic) while that server
  runs on its data folder: the command hands the job to it; wall time of the whole command;
- ``concurrent``: 8 and 16 clients posting a 15 s voice-over at once: the default (one job a device,
  pipelined), 4 jobs a device with their batches merged (``--jobs-per-device 4``) and not
  (``--no-batching``: jobs at once, engine calls in turn): frames/s together and each request's wall.
"""

from __future__ import annotations

import logging
import re
import shutil
import statistics
import time
from pathlib import Path

log = logging.getLogger(__name__)

CACHE_REQUESTS: tuple[dict, ...] = (  # 14 requests: batch, decoder and precision each varied
    {"batch": 8},
    {"batch": 16},
    {"batch": 24},
    {"batch": 32},
    {"batch": 48},
    {"batch": 64},
    {"batch": 96},
    {"batch": 128},
    {"decoder": "sd-vae"},
    {"precision": "fp32"},
    {"precision": "bf16"},
    {"decoder": "sd-vae", "precision": "fp32"},
    {"decoder": "sd-vae", "batch": 32},
    {},
)


def service_rows(
    folder: Path,
    env: dict,
    voice: Path,
    voices: list[Path],
    note=log.info,
    short: Path | None = None,
    counts: tuple | list = (8, 16),
    fresh: list[Path] | None = None,
):
    """Every row above; ``voice`` is the user rows' clip (672 frames), ``voices`` the clients' clips
        (``counts``: how many clients at once, each row), ``fresh`` six voice-overs of ``voice``'s length the
    server has not seen (each request of the fresh-server row has its own, as users' do)."""
    from studio.service.serve_process import ServeProcess

    out: dict = {}
    home = Path(env["STUDIO_HOME"])
    for name in ("renders", "uploads"):  # a fresh data folder: what a new server meets
        shutil.rmtree(home / name, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with ServeProcess(folder, env) as srv:
        ready_s = _wait_ready(srv.url)
        since = time.perf_counter() - t0
        note(f"serve (fresh folder): /v1/health after {srv.start_s:.1f} s, /v1/ready 200 after {since:.1f} s")
        walls = [_generate(srv.url, v, folder / f"first{k}.mp4") for k, v in enumerate(fresh or [voice] * 6)]
        warm = statistics.median(w["request_s"] for w in walls[3:])
        out["fresh"] = {
            "health_s": round(srv.start_s, 2),
            "ready_s": round(since, 2),
            "ready_poll_s": round(ready_s, 2),
            "requests": walls,
            "first_three_vs_warm": [round(w["request_s"] / warm, 3) for w in walls[:3]],
        }
        note(
            "serve: first three requests after ready "
            + ", ".join(f"{w['request_s']:.3f}" for w in walls[:3])
            + f" s against warm {warm:.3f} s ("
            + ", ".join(f"{x:.2f}x" for x in out["fresh"]["first_three_vs_warm"])
            + ")"
        )
        out["handoff"] = handoff_rows(folder, env, voices[0], note)
        out["concurrent_default"] = [_burst(srv.url, voices[:n], folder, note, "default") for n in counts]
        out["cache"] = cache_rows(srv.url, short or voice, folder, note)
    for label, args, ns in (
        ("concurrent_batched", ("--jobs-per-device", "4"), tuple(counts)),
        ("concurrent_unbatched", ("--jobs-per-device", "4", "--no-batching"), tuple(counts)),
    ):
        with ServeProcess(folder, env, args) as srv:
            _wait_ready(srv.url)
            _generate(srv.url, voice, folder / "warm.mp4")
            out[label] = [_burst(srv.url, voices[:n], folder, note, label) for n in ns]
    return out


def handoff_rows(folder: Path, env: dict, voice: Path, note=log.info) -> dict:
    """``studio render`` of ``voice`` in a fresh process while this data folder's server runs: the
    command hands the job to it (no torch, no engine in the command); wall time of the command."""
    import subprocess
    import sys

    from studio.bench import user as bench_user

    out: dict = {}
    for engine in ("musetalk", "classic"):
        cmd = [sys.executable, "-m", "studio", "render", "--avatar", bench_user.PHOTO, "--audio", str(voice)]
        cmd += ["-o", str(folder / f"handoff-{engine}.mp4"), "--engine", engine, "--overwrite", "--json"]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        out[engine] = {
            "seconds": round(wall, 3),
            "handed": "handing this render" in p.stderr,
            "rc": p.returncode,
            "error": p.stderr.strip()[-600:] if p.returncode else "",
        }
        note(f"serve: a fresh `studio render` ({engine}, {voice.name}) handed to the server: {wall:.2f} s wall")
    return out


def _wait_ready(url: str, timeout: float = 600) -> float:
    import httpx

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if httpx.get(url + "/v1/ready", timeout=10).status_code == 200:
            return time.perf_counter() - t0
        time.sleep(0.1)
    raise RuntimeError(f"studio serve was not ready within {timeout:.0f} s")


def _generate(url: str, voice: Path, dest: Path, settings: dict | None = None) -> dict:
    from studio.bench import user as bench_user
    from studio.service.client import StudioClient

    with StudioClient(url, timeout=600) as c:
        t0 = time.perf_counter()
        r = c.generate(bench_user.PHOTO, dest, audio=voice, settings=settings)
        wall = time.perf_counter() - t0
        res = c.render(r["job"]).get("result") or {}
    return {"request_s": round(wall, 3), "render_s": r["render_seconds"], "frames": res.get("frames")}


def metrics(url: str) -> dict:
    """The engine gauges of ``/metrics``: warm engines, loads, evictions, GPU memory reserved."""
    import httpx

    text = httpx.get(url + "/metrics", timeout=30).text
    out: dict = {}
    for name in ("studio_warm_engines", "studio_engine_loads_total", "studio_engine_evictions_total"):
        m = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
        out[name.removeprefix("studio_")] = float(m.group(1)) if m else None
    reserved = re.findall(r'^studio_gpu_memory_bytes\{device="[^"]+",kind="reserved"\} ([0-9.e+]+)$', text, re.M)
    out["gpu_reserved_gb"] = round(sum(float(x) for x in reserved) / 2**30, 2) if reserved else None
    return out


def cache_rows(url: str, voice: Path, folder: Path, note=log.info) -> dict:
    """``CACHE_REQUESTS`` one after another: each answers, and the engines held stay under the bound."""
    rows = []
    for k, settings in enumerate(CACHE_REQUESTS):
        try:
            r = _generate(url, voice, folder / f"cache{k}.mp4", settings=settings)
        except Exception as exc:  # noqa: BLE001 - a refusal is a row too
            r = {"error": f"{type(exc).__name__}: {exc}"}
        r.update(settings=settings, **metrics(url))
        rows.append(r)
        note(f"serve cache: {settings or 'default'}: {r.get('request_s', r.get('error'))} s, {metrics(url)}")
    return {
        "requests": rows,
        "answered": sum("error" not in r for r in rows),
        "max_engines": max(r["warm_engines"] or 0 for r in rows),
        "max_gpu_reserved_gb": max((r["gpu_reserved_gb"] or 0) for r in rows),
    }


def _burst(url: str, voices: list[Path], folder: Path, note, label: str) -> dict:
    from studio.service.bench import _burst as burst

    row = burst(url, voices, folder, lambda text: None)
    row["label"] = label
    walls = row["request_s"]
    note(
        f"serve {label}: {len(voices)} clients at once: {row['fps']} frames/s together ({row['seconds']:.2f} s; "
        f"requests {min(walls, default=0):.2f}-{max(walls, default=0):.2f} s)"
    )
    return row
