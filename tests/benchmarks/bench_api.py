"""``studio serve`` figures: round-trip overhead of POST /generate, a load of concurrent clients, a kill,
and what a submit and a listing cost.

    .venv/bin/python tests/benchmarks/bench_api.py [--engine classic] [--runs 3] [--clients 20]
                                                  [--cancelling 5] [--skip-load] [--skip-kill]
    .venv/bin/python tests/benchmarks/bench_api.py --only-submit      # part 4 alone (no renders)

1. Overhead: the demo clip (the 28 s voice-over, 706 frames) through ``POST /generate`` (audio
   uploaded in the request, the MP4 downloaded in the answer), warm (one render first), against the
   server's own render time for the same job (``X-Studio-Render-Seconds``: the renderer's wall time
   from reading the audio to the finished file) measured in the same run.
2. Load: ``--clients`` threads post short renders at once (1.6 s voice-overs, 40 frames, each its
   own upload) and follow their events; ``--cancelling`` of them cancel theirs once it is queued.
   Checks: every job reaches a final state, every ``done`` file decodes as an MP4 with all its
   frames, no temporary is left in the data folder, the server's memory (RSS of the process and
   its children) sampled throughout.
3. Kill: six renders queued, the server SIGKILLed while the first renders, restarted on the same
   data folder: the running job comes back ``interrupted``, the queued ones are still queued and
   then render.

4. Submit and list: the time to the 202 of ``POST /v1/renders`` (every check done before it: the
   settings, the engine/encoder/device, the voice-over, the output; then the queue's transaction),
   with and without an ``Idempotency-Key``, and ``GET /v1/renders`` at 150 jobs: the default page
   (50) against all of them, in milliseconds and bytes.

Each part starts its own server process (``sys.executable -m studio serve``) on 127.0.0.1 on a
free port, with its own data folder.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from served import Server  # noqa: E402 - the tests' real-server helper (127.0.0.1, free port)

DEMO = ROOT / "resources" / "demo"
FINAL = ("done", "failed", "cancelled", "interrupted")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="classic")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--cancelling", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3, help="load rounds (memory after each)")
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--skip-kill", action="store_true")
    ap.add_argument("--only-submit", action="store_true", help="only part 4 (submit and list)")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores; engine {args.engine}; python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.only_submit:
            submit_and_list(tmp / "d")
            return
        overhead(tmp / "a", args)
        submit_and_list(tmp / "d")
        if not args.skip_load:
            load(tmp / "b", args)
        if not args.skip_kill:
            kill(tmp / "c", args)


# --------------------------------------------------------------------------------------------


def overhead(home: Path, args) -> None:
    with Server(home) as srv, httpx.Client(base_url=srv.url, timeout=600) as c:
        add_avatar(c)
        rows = []
        for i in range(args.runs + 1):  # the first one warms the engine, the avatar cache and imports
            t0 = time.perf_counter()
            with open(DEMO / "voiceover.flac", "rb") as fh:
                r = c.post(
                    "/generate",
                    data={"avatar": "astro", "engine": args.engine},
                    files={"audio": ("voiceover.flac", fh)},
                )
            wall = time.perf_counter() - t0
            r.raise_for_status()
            render = float(r.headers["x-studio-render-seconds"])
            out = home / f"generate-{i}.mp4"
            out.write_bytes(r.content)
            frames = count_frames(out)
            label = "warm-up" if i == 0 else f"run {i}"
            print(
                f"generate {label:>7}: wall {wall:6.3f} s, server render {render:6.3f} s, overhead "
                f"{wall - render:5.3f} s ({100 * (wall - render) / render:4.1f} %), {frames} frames, "
                f"{len(r.content) / 1e6:.2f} MB"
            )
            if i:
                rows.append((wall, render))
        walls = [w for w, _ in rows]
        renders = [r for _, r in rows]
        ov = [100 * (w - r) / r for w, r in rows]
        print(
            f"generate median: wall {statistics.median(walls):.3f} s, render {statistics.median(renders):.3f} s, "
            f"overhead {statistics.median(ov):.1f} % (min {min(ov):.1f} %, max {max(ov):.1f} %; target <= 5 %)"
        )


def load(home: Path, args) -> None:
    clips = home.parent / "clips"
    clips.mkdir(parents=True, exist_ok=True)
    with Server(home) as srv, httpx.Client(base_url=srv.url, timeout=600) as c:
        add_avatar(c)
        paths = [short_clip(clips / f"client-{i:02d}.wav", seed=i) for i in range(args.clients)]
        rss = RssSampler(srv.proc.pid)
        rss.start()
        results: list[dict] = [None] * args.clients  # type: ignore[list-item]
        barrier = threading.Barrier(args.clients)

        def client(i: int) -> None:
            with httpx.Client(base_url=srv.url, timeout=600) as hc:
                barrier.wait()
                t0 = time.perf_counter()
                with open(paths[i], "rb") as fh:
                    r = hc.post(
                        "/v1/renders",
                        data={"avatar": "astro", "engine": args.engine},
                        files={"audio": (paths[i].name, fh)},
                    )
                if r.status_code != 202:
                    results[i] = {"status": r.status_code, "error": r.json().get("error")}
                    return
                job = r.json()
                cancel = i < args.cancelling
                seen = []
                with hc.stream("GET", job["links"]["events"]) as ev:
                    for line in ev.iter_lines():
                        if not line.startswith("data:"):
                            continue
                        d = json.loads(line[5:])
                        seen.append(d.get("state", "progress"))
                        if cancel and len(seen) == 1:
                            hc.delete(job["links"]["cancel"])
                final = hc.get(job["links"]["self"]).json()
                results[i] = {
                    "id": job["id"],
                    "state": final["state"],
                    "cancel": cancel,
                    "events": len(seen),
                    "seconds": time.perf_counter() - t0,
                    "output": final["output"],
                }
                if final["state"] == "done":
                    v = hc.get(job["links"]["video"])
                    p = home / f"load-{i:02d}.mp4"
                    p.write_bytes(v.content)
                    results[i]["frames"] = count_frames(p)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        rss.stop()
        states = [r.get("state", f"HTTP {r.get('status')}") for r in results]
        done = [r for r in results if r.get("state") == "done"]
        good = [r for r in done if r.get("frames") == 40]
        cancelled = [r for r in results if r.get("state") == "cancelled"]
        leftovers = [
            str(p.relative_to(home))
            for p in home.rglob("*")
            if p.is_file() and (".part" in p.name or p.name.startswith(".incoming"))
        ]
        cancelled_files = [r["output"] for r in cancelled if (home / "renders" / r["output"]).exists()]
        print(
            f"load: {args.clients} clients ({args.cancelling} cancelling) in {wall:.1f} s: "
            + ", ".join(f"{s} {states.count(s)}" for s in sorted(set(states)))
        )
        print(
            f"load: every job final: {all(s in FINAL for s in states)}; done files valid MP4 with 40 frames: "
            f"{len(good)}/{len(done)}; files of cancelled jobs: {len(cancelled_files)}; temporaries left: "
            f"{len(leftovers)} {leftovers[:3]}"
        )
        lat = sorted(r["seconds"] for r in done)
        if lat:
            print(
                f"load: done jobs' client time from POST to final state: min {lat[0]:.1f} s, median "
                f"{statistics.median(lat):.1f} s, max {lat[-1]:.1f} s ({len(done) * 40 / wall:.1f} frames/s overall)"
            )
        print(
            f"load: server RSS (process + children) before {rss.first / 2**20:.0f} MiB, peak {rss.peak / 2**20:.0f} MiB, "
            f"after {rss.last / 2**20:.0f} MiB ({rss.samples} samples; the server process alone "
            f"{tree_rss(srv.proc.pid, children=False) / 2**20:.0f} MiB)"
        )
        for extra in range(2, args.rounds + 1):  # more rounds: memory must level off, not grow per job
            rss2 = RssSampler(srv.proc.pid)
            rss2.start()
            t1 = time.perf_counter()
            threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            rss2.stop()
            states = [r.get("state", f"HTTP {r.get('status')}") for r in results]
            print(
                f"load: round {extra} ({time.perf_counter() - t1:.1f} s; "
                + ", ".join(f"{s} {states.count(s)}" for s in sorted(set(states)))
                + f"): server RSS peak {rss2.peak / 2**20:.0f} MiB, after {rss2.last / 2**20:.0f} MiB "
                f"(the server process alone {tree_rss(srv.proc.pid, children=False) / 2**20:.0f} MiB)"
            )


def kill(home: Path, args) -> None:
    clips = home.parent / "clips"
    clips.mkdir(parents=True, exist_ok=True)
    medium = short_clip(clips / "medium.wav", seed=7, seconds=6.0)
    srv = Server(home)
    with srv, httpx.Client(base_url=srv.url, timeout=600) as c:
        add_avatar(c)
        with open(medium, "rb") as fh:
            audio_id = c.post("/v1/audio", files={"file": ("medium.wav", fh)}).json()["id"]
        ids = [
            c.post("/v1/renders", data={"avatar": "astro", "audio_id": audio_id, "engine": args.engine}).json()["id"]
            for _ in range(6)
        ]
        with c.stream("GET", f"/v1/renders/{ids[0]}/events") as ev:
            for line in ev.iter_lines():
                if line.startswith("event: progress"):
                    break
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait()
        print(f"kill: server SIGKILLed while job {ids[0]} rendered ({len(ids) - 1} queued behind it)")
    parts = [str(p.relative_to(home)) for p in (home / "renders").iterdir() if ".part" in p.name]
    with Server(home) as srv2, httpx.Client(base_url=srv2.url, timeout=600) as c:
        states = {j["id"]: j["state"] for j in c.get("/v1/renders").json()["renders"]}
        print(
            f"kill: after restart: job {ids[0]} {states.get(ids[0])}; the others: "
            + ", ".join(f"{i} {states.get(i)}" for i in ids[1:])
        )
        t0 = time.perf_counter()
        finals = {i: wait(c, i)["state"] for i in ids[1:]}
        print(
            f"kill: the queued jobs then ran: {finals} in {time.perf_counter() - t0:.1f} s; "
            f"partial files of the killed render after restart: "
            f"{[str(p.relative_to(home)) for p in (home / 'renders').iterdir() if '.part' in p.name]} "
            f"(at the kill: {parts})"
        )
        retried = c.post(f"/v1/renders/{ids[0]}/retry").json()
        print(f"kill: the interrupted job retried: {wait(c, ids[0])['state']} (was {retried['state']})")


# --------------------------------------------------------------------------------------------


class RssSampler(threading.Thread):
    """The resident memory of a process and its descendants, from /proc, every 0.2 s."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid = pid
        self.first = self.peak = self.last = tree_rss(pid)
        self.samples = 1
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(0.2):
            v = tree_rss(self.pid)
            self.peak, self.last, self.samples = max(self.peak, v), v, self.samples + 1

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self.last = tree_rss(self.pid)


def submit_and_list(home: Path, jobs: int = 150, posts: int = 20) -> None:
    from studio.core.settings import RenderSettings
    from studio.core.store.jobs import JobStore
    from studio.service.queue import QueueService
    from studio.service.request import RenderRequest

    with Server(home, "--max-queued", "1000") as srv, httpx.Client(base_url=srv.url, timeout=600) as c:
        add_avatar(c)
        clip = short_clip(home / "v.wav", 1)
        with open(clip, "rb") as fh:
            audio_id = c.post("/v1/audio", files={"file": ("v.wav", fh)}).json()["id"]
        busy = c.post("/v1/renders", data={"avatar": "astro", "audio_id": audio_id, "engine": "classic"}).json()
        times = {"no key": [], "Idempotency-Key": []}
        made = []
        for i in range(posts):  # queued behind `busy`, cancelled after
            for kind in times:
                headers = {"Idempotency-Key": f"bench-{i}"} if kind != "no key" else {}
                t0 = time.perf_counter()
                r = c.post(
                    "/v1/renders",
                    headers=headers,
                    data={"avatar": "astro", "audio_id": audio_id, "engine": "classic"},
                )
                times[kind].append((time.perf_counter() - t0) * 1e3)
                r.raise_for_status()
                made.append(r.json()["id"])
        for kind, ms in times.items():
            print(f"submit ({kind}): 202 in {statistics.median(ms):.1f} ms median, {min(ms):.1f} best of {posts}")
        for job_id in [*made, busy["id"]]:
            c.delete(f"/v1/renders/{job_id}")
        qs = QueueService(store=JobStore(home / "jobs.sqlite"))  # fill the queue to `jobs` (drafts)
        req = RenderRequest("astro", str(clip), str(home / "d.mp4"), RenderSettings(engine="classic"))
        while len(qs.list()) < jobs:
            qs.add(req, state="draft")
        for label, params in (("default page (50)", {}), (f"all {jobs}", {"limit": 500})):
            ms, size = [], 0
            for _ in range(10):
                t0 = time.perf_counter()
                r = c.get("/v1/renders", params=params)
                ms.append((time.perf_counter() - t0) * 1e3)
                size = len(r.content)
            print(
                f"GET /v1/renders at {jobs} jobs, {label}: {statistics.median(ms):.1f} ms median, {size / 1024:.0f} KB"
            )


def tree_rss(pid: int, children: bool = True) -> int:
    if not children:
        return _rss(pid)
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += _rss(p)
        todo += kids.get(p, [])
    return total


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def add_avatar(c: httpx.Client) -> None:
    with open(DEMO / "astronaut.png", "rb") as fh:
        c.post("/v1/avatars", data={"name": "astro"}, files={"file": ("astronaut.png", fh)}).raise_for_status()


def short_clip(path: Path, seed: int, seconds: float = 1.6, rate: int = 16_000) -> Path:
    """A speech-like buzz with a pause in the middle (different per seed: each client's own upload)."""
    rng = np.random.default_rng(seed)
    n = int(seconds * rate)
    t = np.arange(n) / rate
    x = (
        0.2
        * (np.sin(2 * np.pi * (120 + seed) * t) + 0.1 * rng.standard_normal(n))
        * (0.6 + 0.4 * np.abs(np.sin(8 * t)))
    )
    x[int(0.4 * n) : int(0.6 * n)] = 0
    sf.write(path, x.astype(np.float32), rate, subtype="PCM_16")
    return path


def count_frames(path: Path) -> int:
    import av

    with av.open(str(path)) as c:
        if not c.streams.audio:
            return -1
        return sum(1 for _ in c.decode(video=0))


def wait(c: httpx.Client, job_id: int, timeout: float = 900) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        j = c.get(f"/v1/renders/{job_id}").json()
        if j["state"] in FINAL:
            return j
        time.sleep(0.2)
    raise SystemExit(f"job {job_id} did not finish")


if __name__ == "__main__":
    main()
