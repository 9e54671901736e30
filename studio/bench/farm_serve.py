"""``studio serve --farm`` on a real Ray cluster of this machine: frames/s of concurrent HTTP requests
with 1, 2, ... worker nodes, and (``--plain``) the same requests through a plain ``studio serve``.

    python -m studio.bench.farm_serve --workers 1,2 --clients 12 --seconds 10 --json farm.json
    python -m studio.bench.farm_serve --workers 1 --device cuda --plain       # one-GPU farm vs plain serve
    python -m studio.bench.farm_serve --workers 1,2 --clients 4 --seconds 3   # a 2-core machine

For each count K of worker nodes: a head (``ray start --head --num-cpus 0``) and K ``ray start
--address`` nodes, each with ``--cpus-per-node`` CPUs (one render actor per CPU; with ``--device cuda``
one GPU each: one actor), each with its own data folder (the avatar and the voice-overs travel
through Ray's object store and the files come back over the cluster, as between hosts; or the head's
folder with ``--shared-home``), all with a token of their own (``RAY_AUTH_MODE=token``). Then
``studio serve --farm HEAD`` on the head's data folder; once every actor is up, one short request per
actor warms them; then ``--clients`` clients post at once one ``--seconds`` voice-over each
(``POST /generate``, the classic engine, the bench's presenter photo added from a real JPEG, each
voice-over its own content) and save the answers. The row: frames/s together (all frames over the
wall time from the first post to the last answer), each request's wall, frames per actor
(``GET /v1/farm``). Every file is checked: decodable, ``seconds`` x 25 frames, all distinct. The
nodes are stopped by the pids ``ray start --block`` ran as, with every descendant; the row says
whether any was left.

The benchmark only drives processes (``ray start``, ``studio serve``) and talks HTTP (httpx), as an
operator would: it imports no service code (the layers: the service is above the benchmarks).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from studio.bench.ray_nodes import RayNodes, free_port
from studio.core import env as core_env

FPS = 25
WARM_SECONDS = 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    workers = sorted({int(x) for x in args.workers.split(",") if x.strip()})
    if not workers or min(workers) < 1 or args.clients < 1 or args.seconds <= 0:
        print("give --workers as counts of 1 or more (1,2), --clients >= 1 and --seconds > 0", file=sys.stderr)
        return 2
    cpus = args.cpus_per_node or default_cpus(os.cpu_count() or 2, workers, args.clients)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="farm-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    head_home = work / "head-home"
    note = _note
    note(f"farm bench in {work}: {args.clients} clients x {args.seconds:g} s, {cpus} CPU(s) a node, {args.device}")
    voices, warm = inputs(work, head_home, args.clients, args.seconds, args.height)
    settings = {"engine": args.engine, **({"preset": args.preset} if args.preset else {})}
    out: dict = {
        "clients": args.clients,
        "seconds": args.seconds,
        "frames_each": int(round(args.seconds * FPS)),
        "settings": settings,
        "device": args.device,
        "cpus_per_node": cpus,
        "jobs_per_device": args.jobs_per_device,
        "height": args.height,
        "shared_home": args.shared_home,
        "farm": [],
    }
    for k in workers:
        row = farm_row(work, head_home, k, cpus, args, voices, warm, settings)
        out["farm"].append(row)
        note(
            f"farm, {k} worker node(s), {row['actors']} actor(s): {row['fps']} frames/s together "
            f"({row['frames']} frames in {row['seconds']:.1f} s; ok: {row['ok']})"
        )
    if len(out["farm"]) > 1:
        first, last = out["farm"][0], out["farm"][-1]
        out["ratio"] = round(last["fps"] / first["fps"], 3) if first["fps"] else None
        note(f"{last['workers']} worker nodes against {first['workers']}: {out['ratio']}x frames/s")
    if args.plain:
        out["plain"] = plain_row(work, head_home, args, voices, warm, settings)
        one = out["farm"][0]
        out["farm_vs_plain"] = round(one["fps"] / out["plain"]["fps"], 3) if out["plain"]["fps"] else None
        note(
            f"plain studio serve: {out['plain']['fps']} frames/s; the {one['workers']}-node farm "
            f"({one['actors']} actor(s)) runs at {out['farm_vs_plain']}x of it"
        )
    from studio.bench.reference import machine_info

    out["machine"] = machine_info()
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
        note(f"wrote {args.json}")
    return 0 if all(r["ok"] for r in out["farm"]) and out.get("plain", {"ok": True})["ok"] else 1


def default_cpus(cores: int, workers: list[int], clients: int) -> int:
    """CPUs a worker node offers: at most half the cores over the most nodes (the rest for the
    encoders, the head and the clients), and where possible a count that lets every node count
    render the clients' jobs in whole rounds (12 clients: 3 CPUs a node, 3 or 6 actors, 4 or 2
    rounds; 4 CPUs would be 3 rounds against 2, a ratio of 1.5 at best, the dispatch's granularity)."""
    cap = max(1, cores // (2 * max(workers)))
    whole = [c for c in range(cap, 0, -1) if all(clients % (c * k) == 0 for k in workers)]
    return whole[0] if whole else cap


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m studio.bench.farm_serve", description=__doc__.splitlines()[0])
    p.add_argument("--workers", default="1,2", help="counts of worker nodes to measure, such as 1,2")
    p.add_argument("--clients", type=int, default=12, help="requests posted at once (default 12)")
    p.add_argument("--seconds", type=float, default=10.0, help="each request's voice-over, in seconds")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="render actors on CPUs or one GPU a node")
    p.add_argument("--cpus-per-node", type=int, default=None, help="CPUs (CPU actors) a worker node offers")
    p.add_argument("--jobs-per-device", type=int, default=1, help="jobs an actor (or plain serve) renders at once")
    p.add_argument("--plain", action="store_true", help="also the same requests through a plain studio serve")
    p.add_argument("--engine", default="classic", help="the render engine (default classic: no weights)")
    p.add_argument("--preset", default=None, help="the x264 preset (default: the server's default)")
    p.add_argument("--height", type=int, default=540, help="the presenter photo's height (16:9; default 540)")
    p.add_argument("--shared-home", action="store_true", help="the worker nodes use the head's data folder")
    p.add_argument("--workdir", default=None, help="where the inputs, files and logs go (default: a new temp folder)")
    p.add_argument("--json", default=None, metavar="OUT", help="write every figure to this JSON file")
    return p


def _note(text: str) -> None:
    print(text, flush=True)


# --------------------------------------------------------------------------------------------
# inputs


def inputs(work: Path, head_home: Path, clients: int, seconds: float, height: int) -> tuple[list[Path], Path]:
    """The presenter photo (a real JPEG, added to the head's library as the user bench does) and one
    voice-over per client (the demo voice with a room tone of its own seed: distinct content)."""
    import numpy as np
    import PIL.Image

    from studio.bench import user as bench_user
    from studio.bench.inputs import synthetic_avatar

    core_env.put("STUDIO_HOME", str(head_home))  # the library below is the head's
    still = synthetic_avatar(work / "src-photo", height, photo=True)
    jpg = work / "presenter.jpg"
    PIL.Image.fromarray(np.asarray(still.frames[0])).save(jpg, quality=92)
    from studio.core.avatars import library

    with bench_user.tracker(np.asarray(still.landmarks)):
        library.prepare(bench_user.PHOTO, jpg, force=True)
    frames = int(round(seconds * FPS))
    voices = [bench_user.voice_file(work / "voices", "wav48", frames, seed=k) for k in range(clients)]
    return voices, bench_user.voice_file(work / "voices", "wav48", WARM_SECONDS * FPS, seed=10_000)


# --------------------------------------------------------------------------------------------
# rows


def farm_row(work: Path, head_home: Path, k: int, cpus: int, args, voices, warm, settings) -> dict:
    gpus = 1 if args.device == "cuda" else 0
    hide = {} if args.device == "cuda" else {"CUDA_VISIBLE_DEVICES": ""}
    folder = work / f"farm-{k}"
    folder.mkdir(parents=True, exist_ok=True)
    with RayNodes(folder) as nodes:
        for i in range(k):
            home = head_home if args.shared_home else folder / f"node{i}-home"
            nodes.add_node(cpus=cpus, gpus=gpus, env={"STUDIO_HOME": str(home), **hide})
        env = core_env.child(**nodes.env, **hide, STUDIO_HOME=str(head_home))
        with Server(folder, env, ["--farm", nodes.address, "--jobs-per-device", str(args.jobs_per_device)]) as srv:
            actors = k * (gpus or cpus)
            srv.wait_actors(actors)
            warmed = burst(srv.url, [warm] * actors, folder / "warm", settings, distinct=False)
            before = srv.counted(warmed["frames"])
            row = burst(srv.url, voices, folder / "out", settings)
            row["per_actor_frames"] = _frames_by_actor(before, srv.counted(warmed["frames"] + row["frames"]))
    row.update(workers=k, actors=actors, leftover_pids=nodes.leftovers())
    row["ok"] = row["ok"] and not row["leftover_pids"]
    return row


def plain_row(work: Path, head_home: Path, args, voices, warm, settings) -> dict:
    hide = {} if args.device == "cuda" else {"CUDA_VISIBLE_DEVICES": ""}
    folder = work / "plain"
    folder.mkdir(parents=True, exist_ok=True)
    env = core_env.child(**hide, STUDIO_HOME=str(head_home))
    with Server(folder, env, ["--jobs-per-device", str(args.jobs_per_device)]) as srv:
        burst(srv.url, [warm], folder / "warm", settings, distinct=False)
        return burst(srv.url, voices, folder / "out", settings)


def _frames_by_actor(before: dict, after: dict) -> dict:
    done = {a["name"]: a["frames_done"] for a in before.get("actors", [])}
    return {a["name"]: a["frames_done"] - done.get(a["name"], 0) for a in after.get("actors", [])}


def burst(url: str, voices: list[Path], folder: Path, settings: dict, distinct: bool = True) -> dict:
    """One client per voice-over, all posting ``POST /generate`` at once; frames/s from the first post
    to the last answer; every answer checked (decodable, the voice-over's frames, all distinct)."""
    import httpx

    folder.mkdir(parents=True, exist_ok=True)
    answers: list[dict] = [{} for _ in voices]
    start = threading.Barrier(len(voices) + 1)

    def client(i: int) -> None:
        dest = folder / f"client{i}.mp4"
        try:
            with httpx.Client(base_url=url, timeout=httpx.Timeout(1800, connect=10)) as c, open(voices[i], "rb") as fh:
                start.wait()
                t0 = time.perf_counter()
                files = {"audio": (voices[i].name, fh, "audio/wav")}
                with c.stream("POST", "/generate", data={"avatar": "bench-photo", **settings}, files=files) as r:
                    if r.status_code != 200:
                        r.read()
                        raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
                    part = dest.with_name(f".{dest.name}.part")
                    with open(part, "wb") as out:
                        for block in r.iter_bytes(1 << 20):
                            out.write(block)
                    part.replace(dest)
                    answers[i] = {"t0": t0, "t1": time.perf_counter(), "job": int(r.headers.get("x-studio-job", 0))}
        except Exception as exc:  # noqa: BLE001 - reported in the row
            answers[i] = {"error": f"{type(exc).__name__}: {exc}"}

    with ThreadPoolExecutor(len(voices)) as pool:
        for i in range(len(voices)):
            pool.submit(client, i)
        start.wait()  # every client is ready: they post at once
        t0 = time.perf_counter()
    wall = time.perf_counter() - t0  # the pool has waited for the last answer
    errors = [a["error"] for a in answers if "error" in a]
    files = [folder / f"client{i}.mp4" for i, a in enumerate(answers) if "error" not in a]
    counts = [count_frames(f) for f in files]
    frames = sum(c for c in counts if c > 0)
    want = [_voice_frames(v) for v, a in zip(voices, answers) if "error" not in a]
    all_distinct = len({hashlib.sha256(f.read_bytes()).hexdigest() for f in files}) == len(files)
    right = counts == want
    return {
        "clients": len(voices),
        "seconds": round(wall, 3),
        "frames": frames,
        "fps": round(frames / wall, 1) if wall else 0.0,
        "request_s": [round(a["t1"] - a["t0"], 3) for a in answers if "t1" in a],
        "jobs": [a.get("job") for a in answers],
        "errors": errors,
        "distinct_files": all_distinct,
        "right_frame_counts": right,
        "ok": not errors and (all_distinct or not distinct) and right,
    }


def count_frames(path: Path) -> int:
    """Frames decoded from ``path`` (-1: it does not decode)."""
    import av

    try:
        with av.open(str(path)) as c:
            return sum(1 for _ in c.decode(video=0))
    except (av.FFmpegError, OSError):
        return -1


def _voice_frames(path: Path) -> int:
    import soundfile as sf

    info = sf.info(str(path))
    return int(round(info.frames / info.samplerate * FPS))


# --------------------------------------------------------------------------------------------
# the server


class Server:
    """``python -m studio serve --port FREE *args`` with ``env``, its output in ``folder/serve.log``;
    ``__enter__`` returns once ``/v1/ready`` answers 200; ``__exit__`` stops it (SIGTERM, then SIGKILL)."""

    def __init__(self, folder: Path, env: dict, args: list[str], timeout: float = 600):
        self.folder, self.env, self.args, self.timeout = folder, env, args, timeout
        self.url = ""

    def __enter__(self) -> Server:
        import httpx

        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(self.folder / "serve.log", "ab")
        cmd = [sys.executable, "-m", "studio", "serve", "--port", str(port), *self.args]
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.timeout
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"studio serve exited ({self.proc.returncode}): see {self.folder}/serve.log")
                try:
                    if httpx.get(f"{self.url}/v1/ready", timeout=5).status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                time.sleep(0.5)
            raise RuntimeError(f"studio serve was not ready within {self.timeout:.0f} s: see {self.folder}/serve.log")
        except BaseException:
            self.__exit__()
            raise

    def farm(self) -> dict:
        import httpx

        return httpx.get(f"{self.url}/v1/farm", timeout=30).json()

    def counted(self, frames: int, timeout: float = 30) -> dict:
        """``GET /v1/farm`` once its actors' ``frames_done`` add up to ``frames`` (the head reads them
        every quarter second), or after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.farm()
            if sum(a["frames_done"] for a in status.get("actors", [])) >= frames or time.monotonic() > deadline:
                return status
            time.sleep(0.2)

    def wait_actors(self, count: int, timeout: float = 600) -> None:
        """Until ``count`` render actors are idle (started, the avatar not yet needed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            idle = [a for a in self.farm().get("actors", []) if a["state"] == "idle"]
            if len(idle) >= count:
                return
            time.sleep(0.5)
        raise RuntimeError(f"{count} render actors were not up within {timeout:.0f} s: see {self.folder}/serve.log")

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


if __name__ == "__main__":
    sys.exit(main())
