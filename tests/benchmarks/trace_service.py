"""Where a server's time goes: reads what ``bench_service.py --trace-dir DIR --json OUT`` wrote.

    python tests/benchmarks/trace_service.py OUT.json DIR            # a text report

- each fresh server's first requests against its warm ones, stage by stage (the render's
  ``stage_ms`` and the request's upload / server / answer split, from the job's times);
- each burst of clients: the GPU's busy fraction (the union of the traced batches' GPU spans:
  background, engine and compositing, from CUDA events; ``STUDIO_STAGE_TRACE``), the jobs' time line
  (upload, waiting in the queue, the audio before the render, the render, the file), the host
  stages summed over the jobs, and per thread the host time in stages;
- py-spy's samples of the server during the first burst: the fraction of the time some thread held
  the GIL and what it ran then, by thread and by function.
"""

from __future__ import annotations

import collections
import json
import statistics
import sys
from pathlib import Path


def union(spans: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] covered by at least one span."""
    cut = sorted((max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi)
    total, end = 0.0, lo
    for a, b in cut:
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def load_trace(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def renders_by_output(trace: list[dict]) -> dict[str, dict]:
    """output file name -> {render id, made, run, spans}"""
    runs = {t["r"]: t for t in trace if t.get("k") == "run"}
    made = {t["r"]: t["t0"] for t in trace if t.get("k") == "cpu" and t.get("s") == "made"}
    spans = collections.defaultdict(list)
    for t in trace:
        if t.get("k") in ("cpu", "gpu") and t.get("s") != "made":
            spans[t["r"]].append(t)
    out = {}
    for r, run in runs.items():
        out[run["out"]] = {"r": r, "made": made.get(r), "run": run["t"], "frames": run["frames"], "spans": spans[r]}
    return out


def fresh_report(name: str, row: dict, renders: dict) -> list[str]:
    reqs = row["requests"]
    lines = [f"## {name}: /v1/ready after {row['ready_s']} s; requests (s) and their parts"]
    lines.append("  #  request  upload  server  answer  render  queue>made  made>run  run>end  stages (ms)")
    for k, q in enumerate(reqs):
        tr = renders.get(q.get("output") or "", {})
        made, run = tr.get("made"), tr.get("run")
        created = q["sent"] + q["upload_s"] if "sent" in q else None
        ends = [s["t1"] for s in tr.get("spans", []) if s["k"] == "cpu"]
        st = q.get("stage_ms") or {}
        lines.append(
            f"  {k}  {q['request_s']:.3f}  {q.get('upload_s', 0):.3f}  {q.get('server_s', 0):.3f}  "
            f"{q.get('answer_s', 0):.3f}  {q.get('render_s', 0):.3f}  "
            + (
                f"{made - created:.3f}  {run - made:.3f}  {max(ends) - run:.3f}"
                if made and run and created and ends
                else "-  -  -"
            )
            + "  "
            + " ".join(f"{k2} {v:.0f}" for k2, v in st.items() if v >= 1)
        )
    warm = reqs[3:]
    if warm and reqs[0].get("stage_ms"):
        keys = sorted({k for q in reqs for k in (q.get("stage_ms") or {})})
        med = {k: statistics.median((q.get("stage_ms") or {}).get(k, 0.0) for q in warm) for k in keys}
        first = reqs[0]["stage_ms"]
        diff = {k: first.get(k, 0.0) - med[k] for k in keys}
        lines.append(
            "  first - warm median, ms: "
            + ", ".join(f"{k} {v:+.0f}" for k, v in sorted(diff.items(), key=lambda x: -abs(x[1])) if abs(v) >= 2)
        )
        for part in ("upload_s", "server_s", "answer_s", "render_s"):
            m = statistics.median(q.get(part, 0) for q in warm)
            lines.append(
                f"  {part}: first {reqs[0].get(part, 0):.3f} against warm {m:.3f} ({reqs[0].get(part, 0) - m:+.3f})"
            )
    return lines


def burst_report(row: dict, trace: list[dict], renders: dict) -> list[str]:
    t0, t1 = row["t0"], row["t1"]
    wall = t1 - t0
    gpu = [(t["t0"], t["t1"]) for t in trace if t.get("k") == "gpu"]
    lines = [
        f"### {row['label']}: {row['clients']} clients, {row['fps']} frames/s ({row['frames']} frames in {wall:.2f} s)"
    ]
    if gpu:
        busy = union(gpu, t0, t1)
        parts = {
            s: union([(t["t0"], t["t1"]) for t in trace if t.get("k") == "gpu" and t["s"] == s], t0, t1)
            for s in ("background", "engine", "composite")
        }
        lines.append(
            f"  GPU busy (traced batches, CUDA events): {busy:.2f} s of {wall:.2f} s = {100 * busy / wall:.0f} %; "
            + ", ".join(f"{k} {v:.2f} s" for k, v in parts.items())
        )
    if gpu:
        lines += idle_report(gpu, trace, t0, t1)
    eng = [(t["t0"], t["t1"]) for t in trace if t.get("k") == "cpu" and t.get("s") in ("engine", "merged")]
    if eng:
        lines.append(f"  host time inside an engine call (union over the jobs): {union(eng, t0, t1):.2f} s")
    smi = _smi(row.get("smi"), t0, t1)
    if smi:
        lines.append(f"  nvidia-smi utilization over the burst: mean {smi[0]:.0f} % ({smi[1]} samples)")
    jobs = row.get("jobs") or []
    lines.append("  job  upload  wait(made)  audio(run)  render  file+answer  frames   (s from the burst's start)")
    stage_sum: collections.Counter = collections.Counter()
    first_run = []
    for j in jobs:
        tr = renders.get(j.get("output") or "", {})
        created = j["sent"] + j["upload_s"]
        made, run = tr.get("made"), tr.get("run")
        spans = tr.get("spans", [])
        gpu_end = max((s["t1"] for s in spans if s["k"] == "gpu"), default=None)
        if gpu_end is None:  # no GPU spans (a CPU): the last batch's compositing on the host
            gpu_end = max((s["t1"] for s in spans if s["k"] == "cpu" and s["s"] == "composite"), default=None)
        for k, v in (j.get("stage_ms") or {}).items():
            stage_sum[k] += v
        if run:
            first_run.append(run)
        lines.append(
            f"  {j['job']}  {created - t0:6.3f}  "
            + (f"{made - t0:6.3f}  {run - t0:6.3f}  " if made and run else "  -  -  ")
            + (f"{gpu_end - t0:6.3f}  " if gpu_end else "  -  ")
            + f"{j['answered'] - t0:6.3f}  {tr.get('frames', '-')}"
        )
    if stage_sum:
        lines.append(
            "  host stages summed over the jobs (s): "
            + ", ".join(f"{k} {v / 1e3:.2f}" for k, v in stage_sum.most_common())
        )
    threads: collections.Counter = collections.Counter()
    for t in trace:
        if t.get("k") == "cpu" and t["t1"] > t0 and t["t0"] < t1 and t.get("s") != "made":
            threads[f"{_kind(t.get('th', '?'))}: {t.get('s', '')}"] += min(t["t1"], t1) - max(t["t0"], t0)
    if threads:
        lines.append(
            "  host time in stages by thread kind (s): " + ", ".join(f"{k} {v:.2f}" for k, v in threads.most_common(12))
        )
    return lines


def idle_report(gpu: list[tuple[float, float]], trace: list[dict], t0: float, t1: float) -> list[str]:
    """The GPU's idle gaps in [t0, t1] and the host stages that ran during them; the GPU time of
    the engine's full (64-frame) batches."""
    gaps, end = [], t0
    for a, b in sorted(gpu):
        if b <= t0 or a >= t1:
            continue
        if a > end:
            gaps.append((end, a))
        end = max(end, b)
    if t1 > end:
        gaps.append((end, t1))
    during: collections.Counter = collections.Counter()
    for t in trace:
        if t.get("k") != "cpu" or t.get("s") in ("made", "merged"):
            continue
        for a, b in gaps:
            o = min(b, t["t1"]) - max(a, t["t0"])
            if o > 0:
                during[f"{_kind(t.get('th', '?'))}: {t['s']}"] += o
    big = sorted(gaps, key=lambda g: g[0] - g[1])[:6]
    lines = [
        f"  GPU idle {sum(b - a for a, b in gaps):.2f} s in {len(gaps)} gaps; the largest (start s, length s): "
        + ", ".join(f"({a - t0:.2f}, {b - a:.3f})" for a, b in big),
        "  host stages while the GPU idled (s): " + ", ".join(f"{k} {v:.2f}" for k, v in during.most_common(8)),
    ]
    full = sorted(
        t["t1"] - t["t0"] for t in trace if t.get("k") == "gpu" and t.get("s") == "engine" and t.get("n") == 64
        and t0 < t["t0"] < t1
    )  # fmt: skip
    if full:
        lines.append(
            f"  engine, 64-frame batches on the GPU (ms): min {1e3 * full[0]:.1f}, median "
            f"{1e3 * full[len(full) // 2]:.1f}, max {1e3 * full[-1]:.1f} ({len(full)} batches)"
        )
    return lines


def _smi(path, t0: float, t1: float):
    """Mean ``utilization.gpu`` of the nvidia-smi samples within [t0, t1] (UTC time stamps)."""
    import datetime as dt

    if not path or not Path(path).is_file():
        return None
    vals = []
    for line in Path(path).read_text().splitlines():
        parts = [x.strip() for x in line.split(",")]
        try:
            when = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=dt.timezone.utc).timestamp()
            util = float(parts[2].rstrip(" %"))
        except (ValueError, IndexError):
            continue
        if t0 <= when <= t1:
            vals.append(util)
    return (sum(vals) / len(vals), len(vals)) if vals else None


def pyspy_report(idle: Path, gil: Path, rate: int = 100) -> list[str]:
    def read(p: Path):
        rows = []
        for line in p.read_text(errors="replace").splitlines():
            stack, _, n = line.rpartition(" ")
            if stack and n.isdigit():
                rows.append((stack, int(n)))
        return rows

    if not idle.is_file() or not gil.is_file():
        return [f"  (no py-spy files: {idle.name})"]
    a, g = read(idle), read(gil)
    per_thread: collections.Counter = collections.Counter()
    for stack, n in a:
        per_thread[stack.split(";")[0]] += n
    duration = max(per_thread.values(), default=0) / rate
    gil_total = sum(n for _, n in g)
    lines = [
        f"  py-spy: {duration:.2f} s sampled at {rate}/s, {len(per_thread)} threads; some thread held the GIL in "
        f"{gil_total} samples = {100 * gil_total / max(1, duration * rate):.0f} % of the time"
    ]
    by_thread: collections.Counter = collections.Counter()
    by_leaf: collections.Counter = collections.Counter()
    for stack, n in g:
        frames = stack.split(";")
        name = frames[0].split(":", 1)[-1].strip() or frames[0]
        by_thread[_kind(name)] += n
        ours = [f for f in frames[1:] if "studio/" in f]  # the deepest of Studio's own frames
        leaf = frames[-1] if not ours or ours[-1] == frames[-1] else f"{frames[-1]} < {ours[-1]}"
        by_leaf[(_kind(name), leaf)] += n
    lines.append("  GIL held, by thread kind (% of the time): " + ", ".join(
        f"{k} {100 * v / max(1, duration * rate):.0f}" for k, v in by_thread.most_common(8)))  # fmt: skip
    lines.append("  GIL held, by thread and function (% of the time):")
    for (kind, leaf), n in by_leaf.most_common(15):
        lines.append(f"    {100 * n / max(1, duration * rate):5.1f}  {kind}: {leaf}")
    return lines


def _kind(name: str) -> str:
    """A thread's kind: its name without the job number or index."""
    import re

    return re.sub(r"[-_ ]?\d+$", "", re.sub(r"\(\d+\)", "", name)).strip() or name


def main(argv: list[str]) -> int:
    out = json.loads(Path(argv[0]).read_text())
    folder = Path(argv[1])
    sv = out.get("service") or out["user"]["service"]  # bench_service.py's or `studio bench --user --table`'s
    labels = ["default"] + [
        k.removeprefix("concurrent_") for k in sv if k.startswith("concurrent_") and k != "concurrent_default"
    ]
    lines = []
    for label in labels:
        trace = load_trace(folder / f"trace-{label}.jsonl")
        renders = renders_by_output(trace)
        fresh = sv.get("fresh" if label == "default" else f"fresh_{label}")
        if fresh:
            lines += fresh_report(label, fresh, renders)
        for k, row in enumerate(sv.get(f"concurrent_{label}") or []):
            smi = (sv.get("gpu_samples") or {}).get(label)
            row = dict(row, smi=str(folder / Path(smi).name) if smi else None)
            lines += burst_report(row, trace, renders)
            if k == 0:
                n = row["clients"]
                lines += pyspy_report(folder / f"pyspy-{label}-{n}-idle.txt", folder / f"pyspy-{label}-{n}-gil.txt")
        lines.append("")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
