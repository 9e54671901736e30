"""``studio bench`` smoke version on the CPU: both pipelines run and the figures are written."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_bench_cpu_smoke_writes_figures_with_a_ratio(tmp_path, studio_home):
    out = tmp_path / "bench.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "studio",
            "bench",
            "--device",
            "cpu",
            "--frames",
            "12",
            "--height",
            "144",
            "--official-frames",
            "6",
            "--decoders",
            "taesd",
            "--codecs",
            "prores,vp9",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "STUDIO_HOME": str(studio_home)},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(out.read_text())
    assert d["frames"] == 12 and d["height"] == 144 and d["machine"]["cpu_count"] >= 1
    assert set(d["runs"]) == {"musetalk-taesd", "classic", "classic-prores", "classic-vp9", "official"}
    for codec, enc in (("prores", "prores_ks"), ("vp9", "libvpx-vp9")):  # a row per delivery codec
        row = d["runs"][f"classic-{codec}"]
        assert row["frames"] == 12 and row["fps"] > 0 and row["encoder"].startswith(enc), row
        assert f"classic-{codec}" in r.stdout
    ours = d["runs"]["musetalk-taesd"]
    assert ours["frames"] == 12 and ours["fps"] > 0 and ours["output_bytes"] > 1000
    assert {"engine", "encode"} <= set(ours["stage_ms"])
    assert d["runs"]["official"]["frames"] == 6
    assert d["ratios"]["musetalk-taesd"] == round(ours["fps"] / d["runs"]["official"]["fps"], 1)
    assert "x official" in r.stdout and "musetalk-taesd" in r.stdout


def test_bench_long_photo_and_cold_runs_print_the_finish_and_cold_breakdowns(tmp_path, studio_home):
    out = tmp_path / "bench.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "studio",
            "bench",
            "--device",
            "cpu",
            "--frames",
            "12",
            "--height",
            "144",
            "--decoders",
            "taesd",
            "--no-official",
            "--no-classic",
            "--long",
            "60",
            "--photo",
            "--cold",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "STUDIO_HOME": str(studio_home)},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(out.read_text())
    assert set(d["runs"]) == {
        "musetalk-taesd",
        "musetalk-taesd-photo",
        "musetalk-taesd-photo-no-hints",
        "musetalk-taesd-no-hints",
        "musetalk-taesd-60",
        "cold-classic",
        "cold-musetalk-taesd",
    }
    long = d["runs"]["musetalk-taesd-60"]
    assert long["frames"] == 60 and {"flush", "join", "file"} <= set(long["finish_ms"])
    assert d["runs"]["musetalk-taesd-photo"]["frames"] == 12
    for key in ("cold-classic", "cold-musetalk-taesd"):
        cold = d["runs"][key]
        assert "error" not in cold, cold.get("error")
        assert cold["frames"] == 375 and cold["import_s"] > 0 and 0 < cold["seconds"] < cold["process_wall_s"]
    assert "finish: encoders' tail" in r.stdout and "cold: python start" in r.stdout and ", exit " in r.stdout
