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

import contextlib
import logging
import re
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

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


VARIANTS: tuple[tuple[str, tuple[str, ...], dict], ...] = (  # the concurrent rows' other servers
    ("batched", ("--jobs-per-device", "4"), {}),
    ("unbatched", ("--jobs-per-device", "4", "--no-batching"), {}),
)


BREAKING = {"priority": "breaking"}  # the form field of a breaking clip (docs/server.md)


def service_rows(
    folder: Path,
    env: dict,
    voice: Path,
    voices: list[Path],
    note=log.info,
    short: Path | None = None,
    counts: tuple | list = (8, 16),
    fresh: list[Path] | None = None,
    *,
    variants=VARIANTS,
    trace_dir: Path | None = None,
    cache: bool = True,
    handoff: bool = True,
    voice_for=None,
    out: dict | None = None,
    breaking: Path | None = None,
):
    """Every row above; ``voice`` is the user rows' clip (672 frames), ``voices`` the clients' clips
        (``counts``: how many clients at once, each row), ``fresh`` six voice-overs of ``voice``'s length the
    server has not seen (each request of the fresh-server row has its own, as users' do).

    ``variants``: ``(label, serve arguments, environment)`` of the other servers the concurrent rows
    run on (``concurrent_<label>``). ``voice_for(frames, seed)``: a new voice-over for every request
    (no server has its AAC track cached), and each variant's server gets the fresh-server row too.
    ``trace_dir``: every server writes its stage trace there (``STUDIO_STAGE_TRACE``), and, where
    ``py-spy`` is on the PATH, the first burst of each server is sampled (all threads, and only the
    thread holding the GIL); each request's row then has its job's stages and times (``job_row``).
    ``out``: the dict the rows are put in as they are measured (a caller killed midway keeps them).
    ``breaking``: a 5 s voice-over posted with ``priority=breaking`` into every burst (``_burst``)."""
    from studio.service.serve_process import ServeProcess

    out = {} if out is None else out
    seeds = iter(range(1000, 10**6))
    new_voices = (lambda n, frames: [voice_for(frames, next(seeds)) for _ in range(n)]) if voice_for else None
    frames_of = _frames_in_name
    folder.mkdir(parents=True, exist_ok=True)
    for label, args, extra in (("default", (), {}), *(variants or ())):
        first = label == "default"
        if first or new_voices is not None:
            for name in ("renders", "uploads"):  # a fresh data folder: what a new server meets
                shutil.rmtree(Path(env["STUDIO_HOME"]) / name, ignore_errors=True)
        srv_env = dict(env, **extra)
        if trace_dir is not None:
            Path(trace_dir).mkdir(parents=True, exist_ok=True)
            srv_env["STUDIO_STAGE_TRACE"] = str(Path(trace_dir) / f"trace-{label}.jsonl")
        t0 = time.perf_counter()
        with ServeProcess(folder, srv_env, tuple(args)) as srv, _Sampler(trace_dir, label) as smi:
            if first or new_voices is not None:
                these = fresh or [voice] * 6
                if not first and new_voices is not None:
                    these = new_voices(6, frames_of(voice))
                row = fresh_row(srv, t0, these, folder, note, label)
                out["fresh" if first else f"fresh_{label}"] = row
            else:
                _wait_ready(srv.url)
                _generate(srv.url, voice, folder / "warm.mp4")
            if first and handoff:
                out["handoff"] = handoff_rows(folder, env, voices[0], note)
            out.setdefault("gpu_samples", {})[label] = smi.path
            rows = out.setdefault(f"concurrent_{label}", [])
            for k, n in enumerate(counts):
                these = new_voices(n, frames_of(voices[0])) if new_voices is not None else voices[:n]
                spy = _Spy(trace_dir, f"{label}-{n}", srv.proc.pid) if k == 0 else _Spy(None, "", 0)
                with spy:
                    rows.append(_burst(srv.url, these, folder, note, label, breaking))
            if first and cache:
                out["cache"] = cache_rows(srv.url, short or voice, folder, note)
    return out


def fresh_row(srv, t0: float, voices: list[Path], folder: Path, note, label: str = "default") -> dict:
    """A server just started on a fresh data folder: seconds to ``/v1/health`` and to ready, then
    the first three requests against the three after them (each its own voice-over)."""
    ready_s = _wait_ready(srv.url)
    since = time.perf_counter() - t0
    note(f"serve {label} (fresh folder): /v1/health after {srv.start_s:.1f} s, /v1/ready 200 after {since:.1f} s")
    walls = [_generate(srv.url, v, folder / f"first{k}.mp4", trace=True) for k, v in enumerate(voices)]
    warm = statistics.median(w["request_s"] for w in walls[3:])
    row = {
        "health_s": round(srv.start_s, 2),
        "ready_s": round(since, 2),
        "ready_poll_s": round(ready_s, 2),
        "requests": walls,
        "first_three_vs_warm": [round(w["request_s"] / warm, 3) for w in walls[:3]],
    }
    note(
        f"serve {label}: first three requests after ready "
        + ", ".join(f"{w['request_s']:.3f}" for w in walls[:3])
        + f" s against warm {warm:.3f} s ("
        + ", ".join(f"{x:.2f}x" for x in row["first_three_vs_warm"])
        + ")"
    )
    return row


def _frames_in_name(path: Path) -> int:
    """The frames of a ``bench.user.voice_file`` (``voice_wav48_<frames>_<seed>.wav``)."""
    return int(Path(path).stem.split("_")[2])


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
            "handed": "render: handed" in p.stderr,
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


def _generate(url: str, voice: Path, dest: Path, settings: dict | None = None, trace: bool = False) -> dict:
    from studio.bench import user as bench_user
    from studio.service.client import StudioClient

    with StudioClient(url, timeout=600) as c:
        t0, e0 = time.perf_counter(), time.time()
        r = c.generate(bench_user.PHOTO, dest, audio=voice, settings=settings)
        wall = time.perf_counter() - t0
        job = c.render(r["job"])
    res = job.get("result") or {}
    out = {"request_s": round(wall, 3), "render_s": r["render_seconds"], "frames": res.get("frames")}
    if trace:
        out.update(job_row(job, e0, e0 + wall))
    return out


def job_row(job: dict, sent: float, answered: float) -> dict:
    """Where one request's time went, from its job (epoch seconds): ``upload_s`` (sent until the
    job existed: the upload, its checks, the queue's insert), ``server_s`` (until the job's last
    change: waiting, the audio, the render, the file), ``answer_s`` (until the client had the whole
    MP4: the answer's start and the download), and the render's own stages (``stage_ms``)."""
    res = job.get("result") or {}
    return {
        "job": job.get("id"),
        "output": job.get("output"),
        "sent": round(sent, 4),
        "answered": round(answered, 4),
        "upload_s": round(float(job.get("created") or sent) - sent, 4),
        "server_s": round(float(job.get("updated") or sent) - float(job.get("created") or sent), 4),
        "answer_s": round(answered - float(job.get("updated") or answered), 4),
        "seconds": res.get("seconds"),
        "stage_ms": res.get("stage_ms"),
        "finish_ms": res.get("finish_ms"),
        "audio": res.get("audio"),
        "queue_s": job.get("queue_s"),
        "first_frame_s": job.get("first_frame_s"),
    }


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


EVICTION_REQUESTS: tuple[dict, ...] = (  # with one engine kept: each request evicts the one before
    {},
    {"decoder": "sd-vae", "precision": "fp32"},
    {},
)


def eviction_rows(folder: Path, env: dict, voice: Path, note=log.info) -> dict:
    """Issue 48 item 7 on a server keeping one warm engine (``STUDIO_MAX_ENGINES=1``): the default
    engine, a larger one (SD-VAE decoder, fp32) that evicts it, then the default again, evicting the
    larger one. After each, the device memory in use as another process sees it (``nvidia-smi``, and
    ``torch.cuda.mem_get_info`` in a new process) and the server's own reserved memory. Met when the
    memory in use after the last eviction is within 1 GiB of the first row's (the same one engine
    held): the evicted engine's memory went back to the device."""
    from studio.service.serve_process import ServeProcess

    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    with ServeProcess(folder, dict(env, STUDIO_MAX_ENGINES="1")) as srv:
        _wait_ready(srv.url)
        rows.append({"settings": "ready (default engine warm)", **_device_use(), **metrics(srv.url)})
        for k, settings in enumerate(EVICTION_REQUESTS):
            try:
                r = _generate(srv.url, voice, folder / f"evict{k}.mp4", settings=settings)
            except Exception as exc:  # noqa: BLE001 - a refusal is a row too
                r = {"error": f"{type(exc).__name__}: {exc}"}
            time.sleep(1.0)  # the eviction's empty_cache ran as the next engine loaded; the answer came after
            r.update(settings=settings or "default", **_device_use(), **metrics(srv.url))
            rows.append(r)
            note(f"serve eviction: {settings or 'default'}: {r}")
    first, last = rows[1], rows[-1]
    out: dict = {"requests": rows}
    if first.get("used_gb") is not None and last.get("used_gb") is not None:
        out.update(
            one_engine_gb=first["used_gb"],
            larger_engine_gb=rows[2].get("used_gb"),
            after_eviction_gb=last["used_gb"],
            met=last["used_gb"] <= first["used_gb"] + 1.0 and (last.get("engine_evictions_total") or 0) >= 2,
        )
    return out


def _device_use() -> dict:
    """GPU 0's memory in use as any other process sees it: ``nvidia-smi``'s used, and the free memory a
    new process's ``torch.cuda.mem_get_info`` reads (None without a GPU)."""
    import json
    import subprocess
    import sys

    out: dict = {"used_gb": None, "free_gb_other_process": None}
    smi = shutil.which("nvidia-smi")
    if smi:
        r = subprocess.run([smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                           capture_output=True, text=True)  # fmt: skip
        with contextlib.suppress(ValueError):
            out["used_gb"] = round(float(r.stdout.strip().splitlines()[0]) / 1024, 2)
    probe = "import json, torch; f, t = torch.cuda.mem_get_info(0); print(json.dumps([f, t]))"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    with contextlib.suppress(ValueError, IndexError):
        free, _total = json.loads(r.stdout.strip().splitlines()[-1])
        out["free_gb_other_process"] = round(free / 2**30, 2)
    return out


def _burst(url: str, voices: list[Path], folder: Path, note, label: str, breaking: Path | None = None) -> dict:
    """One client per voice-over, all posting at once; frames/s from the first post to the last
    answer, each request's wall, and its job's ``job_row`` (``jobs``). ``breaking``: one more client
    posts it with ``priority=breaking`` half a second into the burst (``breaking``: its job's row,
    its first frame's time after its submission included; not counted in the frames/s)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from studio.bench import user as bench_user
    from studio.service.client import StudioClient

    ready = threading.Barrier(len(voices) + 1)

    def one(k: int) -> tuple:
        with StudioClient(url, timeout=600) as c:
            ready.wait()
            sent = time.time()
            r = c.generate(bench_user.PHOTO, folder / f"burst_{k}.mp4", audio=voices[k])
            return sent, time.time(), c.render(r["job"])

    urgent: list = []

    def post_breaking() -> None:
        time.sleep(0.5)
        with StudioClient(url, timeout=600) as c:
            sent = time.time()
            r = c.generate(bench_user.PHOTO, folder / "burst_breaking.mp4", audio=breaking, settings=BREAKING)
            urgent.append(job_row(c.render(r["job"]), sent, time.time()))

    answers, errors = [], []
    with ThreadPoolExecutor(len(voices) + 1) as clients:
        futures = [clients.submit(one, k) for k in range(len(voices))]
        ready.wait()
        e0, t0 = time.time(), time.perf_counter()
        extra = clients.submit(post_breaking) if breaking is not None else None
        for f in futures:
            try:
                answers.append(f.result())
            except Exception as exc:  # noqa: BLE001 - reported in the row
                errors.append(f"{type(exc).__name__}: {exc}")
        wall = time.perf_counter() - t0
        if extra is not None:
            try:
                extra.result()
            except Exception as exc:  # noqa: BLE001 - reported in the row
                errors.append(f"breaking: {type(exc).__name__}: {exc}")
    done = [a for a in answers if a]
    jobs = sorted((job_row(a[2], a[0], a[1]) for a in done), key=lambda j: j["job"] or 0)
    b = urgent[0] if urgent else None
    firsts = [j["first_frame_s"] for j in jobs if j.get("first_frame_s") is not None]
    frames = sum(int((a[2].get("result") or {}).get("frames") or 0) for a in done)
    row = {
        "clients": len(voices),
        "seconds": round(wall, 3),
        "frames": frames,
        "fps": round(frames / wall, 1) if wall else 0.0,
        "request_s": [round(a[1] - a[0], 3) for a in done],
        "errors": errors,
        "label": label,
        "t0": round(e0, 4),
        "t1": round(e0 + wall, 4),
        "jobs": jobs,
        "breaking": b,
        "first_frame_s": [min(firsts), max(firsts)] if firsts else None,
    }
    walls = [round(a[1] - a[0], 3) for a in done]
    note(
        f"serve {label}: {len(voices)} clients at once: {row['fps']} frames/s together ({wall:.2f} s; "
        f"requests {min(walls, default=0):.2f}-{max(walls, default=0):.2f} s"
        + (f"; first frames {min(firsts):.2f}-{max(firsts):.2f} s" if firsts else "")
        + (
            f"; a breaking 5 s clip: first frame {b['first_frame_s']} s, answered {b['answered'] - b['sent']:.2f} s"
            if b
            else ""
        )
        + ")"
    )
    return row


class _Spy:
    """``py-spy record`` of a process for a ``with`` block, twice at once: every thread (idle ones
    too) and only the thread holding the GIL, as raw folded stacks in ``folder`` (nothing without a
    folder or a ``py-spy`` on the PATH). Sampled without pausing the process (``--nonblocking``)."""

    def __init__(self, folder: Path | None, label: str, pid: int, rate: int = 100):
        self.procs: list = []
        exe = shutil.which("py-spy") if folder is not None else None
        self.cmds: list[list[str]] = []
        if exe and folder is not None:
            for kind, flags in (("idle", ["--idle"]), ("gil", ["--gil"])):
                path = Path(folder) / f"pyspy-{label}-{kind}.txt"
                self.cmds.append([exe, "record", "--nonblocking", "--threads", *flags, "-r", str(rate)]
                                 + ["-f", "raw", "-o", str(path), "--pid", str(pid)])  # fmt: skip

    def __enter__(self):
        import subprocess

        for cmd in self.cmds:
            self.procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        if self.procs:
            time.sleep(0.3)  # attached before the burst starts
        return self

    def __exit__(self, *exc) -> None:
        import signal
        import subprocess

        for p in self.procs:
            p.send_signal(signal.SIGINT)  # py-spy writes its file on an interrupt
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


class _Sampler:
    """``nvidia-smi`` sampling the GPUs' load every 50 ms for a ``with`` block, into ``folder``
    (nothing without a folder or an ``nvidia-smi``): a coarse cross-check of the trace's GPU spans."""

    def __init__(self, folder: Path | None, label: str):
        exe = shutil.which("nvidia-smi") if folder is not None else None
        self.path = str(Path(folder) / f"smi-{label}.csv") if exe and folder is not None else None
        self.cmd = [
            exe or "nvidia-smi",
            "--query-gpu=timestamp,index,utilization.gpu,memory.used",
            "--format=csv,noheader",
            "-lms",
            "50",
        ]
        self.proc: Any = None

    def __enter__(self):
        import subprocess

        if self.path:
            self.fh = open(self.path, "w")
            self.proc = subprocess.Popen(self.cmd, stdout=self.fh, stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.fh.close()
