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
    for codec, enc in (("prores", "prores_"), ("vp9", "libvpx-vp9")):  # a row per delivery codec
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
    assert {k for k in d["runs"] if not k.startswith("classic-")} == {
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


def test_bench_user_path_prints_every_row_of_issue_26(tmp_path, studio_home):
    """The user's path at smoke sizes: library avatars, WAV/MP3/AAC, default preset and ultrafast,
    the preset comparison, the queue serial vs pipelined, cold commands and a real server."""
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
            "--official-frames",
            "4",
            "--no-classic",
            "--user",
            "--no-service",  # its rows: tests/test_serve_ready.py, tests/test_engine_sharing.py
            "--presets",
            "ultrafast,veryfast",
            "--clients",
            "2",
            "--clip-frames",
            "25",
            "--repeats",
            "1",
            "--workdir",
            str(tmp_path / "work"),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "STUDIO_HOME": str(studio_home)},
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads(out.read_text())
    runs, u = d["runs"], d["user"]
    how = {k: v["audio"] for k, v in runs.items() if k.startswith("user-")}
    from studio.bench.user import other_preset

    default = u["default_preset"]
    assert how == {
        "user-photo-wav48": "encoded",
        "user-photo-wav48-again": "cached",
        **{f"user-photo-wav48-{p}": "encoded" for p in ("ultrafast", "veryfast") if p != default},
        "user-photo-mp3": "encoded",
        "user-photo-aac": "copied",
        "user-video-wav48": "encoded",
        f"user-video-wav48-{other_preset(default)}": "encoded",
        "user-photo-wav48-canvas-1920x1080": "cached",  # the output canvas (issue 35)
        "user-video-wav48-canvas-1080x1920": "cached",
    }
    assert all(runs[k]["frames"] == 12 and k in d["ratios"] for k in how)
    assert runs["user-photo-wav48"]["preset"] == u["default_preset"]
    assert u["avatars"]["photo_size"].endswith("1 frame(s)") and u["avatars"]["video_size"].endswith("50 frame(s)")
    for kind in ("photo", "video"):
        table = u["presets"][kind]
        for p in ("ultrafast", "veryfast"):
            assert table[p]["bytes"] > 0 and 30 < table[p]["psnr_y"] < 99 and 0.9 < table[p]["ssim"] <= 1
    q = u["queue"]
    assert q["same_files"] and q["serial"]["frames"] == q["pipelined"]["frames"] == 50
    assert len(u["import"]["fast"]) == 3 and u["import"]["musetalk"].startswith("ready")
    from studio.service.bench import COLD_PLAN

    for key, _, extra in COLD_PLAN:
        assert "error" not in u["cold"][key], u["cold"][key]
        assert u["cold"][key]["frames"] == 25 and u["cold"][key]["seconds"] > u["cold"][key]["render_s"]
        stages = u["cold"][key]["timeline"]  # seconds from the process's start, in order
        assert list(stages)[:2] == ["command", "placed"] and stages["rendered"] > stages["request"] > 0
        assert ("torch" in stages) == (not extra), stages  # STUDIO_PRELOAD=0: no preload thread
    assert u["cold"]["import_torch_s"] > 0
    assert "torch" in [name for name, _, _ in u["cold"]["imports"]]
    gen = u["serve"]["generate"]
    assert [len(gen["default"]), len(gen[other_preset(default)])] == [1, 1] and gen["default"][0]["frames"] == 12
    assert gen["default"][0]["request_s"] >= gen["default"][0]["render_s"] > 0
    burst = u["serve"]["concurrent"]
    assert burst["frames"] == 50 and not burst["errors"]
    for text in ("user's path:", "presets, photo avatar", "queue, 2 jobs", "cold `studio render`", "POST /generate"):
        assert text in r.stdout, r.stdout
