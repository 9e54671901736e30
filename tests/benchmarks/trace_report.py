"""Read a ``STUDIO_TRACE`` file (``VideoWriter`` with the env var set): where the encoders waited.

    .venv/bin/python tests/benchmarks/trace_report.py trace.json

Per lane: frames, x264 busy (seconds inside ``ctx.encode``) over the span from the first frame's
arrival to the last frame's end, the worker's idle gaps (waiting for the next frame), and the
queueing inside the worker (arrival to encode start). For the parent: when frames were handed to
the writer (``write``), when the lane thread took them and when it had sent them on; and when each
chunk was muxed against when the last frame was encoded. Prints a summary; not collected by pytest.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def report(path: str) -> dict:
    t = json.load(open(path))
    chunks = t["chunks"]
    frames = [np.array(c["frames"], float).reshape(-1, 4) for c in chunks]  # pts, recv, start, end
    allf = np.concatenate([f for f in frames if len(f)]) if any(len(f) for f in frames) else np.zeros((0, 4))
    t0 = min(w[3] for w in t["writes"]) if t["writes"] else allf[:, 1].min()
    end = allf[:, 3].max()
    w = t["window"]
    lanes = []
    for j in range(w):
        fl = np.concatenate([frames[k] for k in range(j, len(chunks), w) if len(frames[k])])
        fl = fl[np.argsort(fl[:, 2])]
        busy = float((fl[:, 3] - fl[:, 2]).sum())
        gaps = fl[1:, 2] - fl[:-1, 3]
        lanes.append(
            {
                "frames": len(fl),
                "first_arrival": round(float(fl[0, 1] - t0), 3),
                "last_end": round(float(fl[-1, 3] - t0), 3),
                "busy_s": round(busy, 3),
                "busy_pct_of_render": round(100 * busy / (end - t0), 1),
                "idle_gaps_s": round(float(gaps[gaps > 0].sum()), 3),
                "queued_in_worker_ms_median": round(1e3 * float(np.median(fl[:, 2] - fl[:, 1])), 2),
                "encode_ms_median": round(1e3 * float(np.median(fl[:, 3] - fl[:, 2])), 2),
            }
        )
    writes = np.array([x[3] for x in t["writes"]]) - t0
    lane_rows = [np.array(r, float).reshape(-1, 6) for r in t["lanes"]]  # chunk, first, n, wait, got, sent
    took = np.concatenate([r[:, 4] - r[:, 3] for r in lane_rows if len(r)])
    handling = np.concatenate([r[:, 5] - r[:, 4] for r in lane_rows if len(r)])
    muxed = [c["muxed"] - t0 for c in chunks if c["muxed"] is not None]
    out = {
        "render_span_s": round(end - t0, 3),
        "last_write_s": round(float(writes.max()), 3) if len(writes) else None,
        "close_called_s": round(t["close_called"] - t0, 3),
        "last_frame_encoded_s": round(end - t0, 3),
        "chunks": len(chunks),
        "chunks_muxed_before_close": sum(m < t["close_called"] - t0 for m in muxed),
        "last_mux_s": round(max(muxed), 3) if muxed else None,
        "lane_thread_wait_ms_median": round(1e3 * float(np.median(took)), 2),
        "lane_thread_send_ms_median": round(1e3 * float(np.median(handling)), 2),
        "busy_pct_mean": round(float(np.mean([x["busy_pct_of_render"] for x in lanes])), 1),
        "lanes": lanes,
    }
    return out


if __name__ == "__main__":
    r = report(sys.argv[1])
    lanes = r.pop("lanes")
    print(json.dumps(r, indent=1))
    for j, x in enumerate(lanes):
        print(j, x)
