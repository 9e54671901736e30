"""The check after a render: ``studio render --check``, ``studio queue add --check`` and the ``check``
field over HTTP (a real ``studio serve`` process), each on a real classic render."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from conftest import DEMO_AUDIO, DEMO_AVATAR
from served import Server


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    import soundfile as sf

    x, rate = sf.read(DEMO_AUDIO, dtype="float32")
    path = tmp_path_factory.mktemp("voice") / "voice.wav"
    sf.write(path, x[: int(5.0 * rate)], rate)
    return path


def test_render_with_check_puts_the_report_in_the_result(tmp_path, voice, capsys):
    from studio.cli import main

    out = tmp_path / "out.mp4"
    argv = ["render", "--engine", "classic", "--device", "cpu", "--avatar", str(DEMO_AVATAR), "--audio", str(voice)]
    assert main([*argv, "-o", str(out), "--check", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    c = r["check"]
    assert c["state"] == "done" and c["verdict"] == "ok" and c["offset_frames"] == 0
    assert c["reference"].startswith("the avatar") and len(c["per_second"]) == 5
    # its visual report beside the video, a side file of the result
    assert r["files"]["check_report"] == str(tmp_path / "out.check.html") == c["report_files"][0]
    page = (tmp_path / "out.check.html").read_text()
    assert 'id="studio-report"' in page and "In sync" in page
    # without --check there is none, and the plain text says the verdict
    assert main([*argv, "-o", str(tmp_path / "plain.mp4"), "--json"]) == 0
    assert "check" not in json.loads(capsys.readouterr().out)
    assert main([*argv, "-o", str(tmp_path / "text.mp4"), "--check"]) == 0
    assert "check: ok: In sync" in capsys.readouterr().out


def test_a_queued_job_is_checked_after_its_render(tmp_path, voice, capsys):
    from studio.cli import main

    out = tmp_path / "queued.mp4"
    argv = ["queue", "add", "--engine", "classic", "--device", "cpu", "--avatar", str(DEMO_AVATAR)]
    assert main([*argv, "--audio", str(voice), "-o", str(out), "--check"]) == 0
    capsys.readouterr()
    assert main(["queue", "run", "--json"]) == 0  # returns once the checks are done too
    jobs = json.loads(capsys.readouterr().out)
    c = jobs[0]["result"]["check"]
    assert jobs[0]["settings"]["check"] is True
    assert c["state"] == "done" and c["verdict"] == "ok", c
    assert c["offset_frames"] == 0 and c["worst_second"] is not None
    assert "gate" not in c  # no limits asked
    report = tmp_path / "queued.check.html"
    assert jobs[0]["result"]["files"]["check_report"] == str(report) and report.is_file()


def test_a_job_that_misses_its_gate_is_marked_and_kept(tmp_path, voice, capsys):
    """``--check-gate ok,jitter=0.01`` (no render is that steady): the job stays done with its file
    and its report, and its check says which limit it missed; a met gate says so too."""
    from studio.cli import main

    argv = ["queue", "add", "--engine", "classic", "--device", "cpu", "--avatar", str(DEMO_AVATAR)]
    argv += ["--audio", str(voice)]
    assert main([*argv, "-o", str(tmp_path / "shaky.mp4"), "--check-gate", "ok,jitter=0.01"]) == 0
    assert main([*argv, "-o", str(tmp_path / "fine.mp4"), "--check-gate", "ok,jitter=50"]) == 0
    capsys.readouterr()
    assert main(["queue", "run", "--json"]) == 0
    jobs = {Path(j["result"]["output"]).name: j for j in json.loads(capsys.readouterr().out)}
    shaky, fine = jobs["shaky.mp4"], jobs["fine.mp4"]
    assert shaky["state"] == fine["state"] == "done"
    assert shaky["settings"]["check"] is False and shaky["result"]["check"]["state"] == "done"  # a gate checks
    gate = shaky["result"]["check"]["gate"]
    assert gate["met"] is False and gate["limits"] == "ok,jitter=0.01"
    assert len(gate["failures"]) == 1 and gate["failures"][0].startswith("jitter ")
    assert (tmp_path / "shaky.mp4").is_file() and (tmp_path / "shaky.check.html").is_file()
    assert fine["result"]["check"]["gate"] == {"limits": "ok,jitter=50", "met": True, "failures": []}
    # a bad gate is one sentence before any work
    assert main([*argv, "-o", str(tmp_path / "bad.mp4"), "--check-gate", "loudness=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "check_gate" in err and err.count("\n") == 0


def test_the_check_field_over_http(tmp_path, voice, capsys):
    with Server(tmp_path / "home") as server, httpx.Client(base_url=server.url, timeout=120) as client:
        with open(DEMO_AVATAR, "rb") as fh:
            assert client.post("/v1/avatars", data={"name": "astro"}, files={"file": ("a.png", fh)}).status_code == 201
        with open(voice, "rb") as fh:
            audio_id = client.post("/v1/audio", files={"file": ("voice.wav", fh)}).json()["id"]
        form = {"avatar": "astro", "audio_id": audio_id, "engine": "classic", "device": "cpu", "check": "true"}
        r = client.post("/v1/renders", data=form)
        assert r.status_code in (200, 201, 202), r.text
        job_id = r.json()["id"]
        deadline = time.monotonic() + 240
        job = {}
        while time.monotonic() < deadline:
            job = client.get(f"/v1/renders/{job_id}").json()
            if job["state"] in ("failed", "cancelled") or (job.get("result") or {}).get("check", {}).get("state") in (
                "done",
                "failed",
            ):
                break
            time.sleep(0.3)
        assert job["state"] == "done", job
        c = job["result"]["check"]
        assert c["state"] == "done" and c["verdict"] == "ok" and c["reference"] == "the avatar 'astro'", c
        assert job["settings"]["check"] is True
        # its visual report is a side file of the job, served by the job's files route
        files = {f["kind"]: f for f in client.get(f"/v1/renders/{job_id}").json()["files"]}
        page = client.get(files["check_report"]["url"])
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert 'id="studio-report"' in page.text and "/" not in job["result"]["files"]["check_report"]
        # studio render --server ... --check: rendered there, checked here (no avatar here: its own frame)
        from studio.cli import main

        out = tmp_path / "remote.mp4"
        argv = ["render", "--server", server.url, "--avatar", "astro", "--audio", str(voice), "-o", str(out)]
        assert main([*argv, "--engine", "classic", "--check", "--json"]) == 0
        c = json.loads(capsys.readouterr().out)["check"]
        assert c["state"] == "done" and c["verdict"] == "ok" and c["reference"].startswith("the video's own frame")
        # a bad value for the field is one sentence
        bad = client.post("/v1/renders", data={**form, "check": "maybe"})
        assert bad.status_code == 422 and "check" in bad.json()["error"]


def test_a_delivery_carries_a_gate_written_as_its_check(tmp_path):
    """A delivery file's ``"check": "ok,jitter=5"`` is the check turned on with that gate, for every
    render that names the delivery (a setting given as well wins)."""
    from studio.core.settings import from_dict
    from studio.core.store import deliveries

    src = tmp_path / "promo.json"
    src.write_text(json.dumps({"name": "promo", "settings": {"crf": 20, "check": "ok,jitter=5"}}))
    _, description, values = deliveries.load_file(src)
    d = deliveries.save("promo", values, description)
    assert d.settings["check"] is True and d.settings["check_gate"] == "ok,jitter=5"
    s = from_dict({"delivery": "promo"})
    assert s.check and s.checked and s.check_gate == "ok,jitter=5" and s.crf == 20
    assert from_dict({"delivery": "promo", "check_gate": "check"}).check_gate == "check"
    assert from_dict({"check": "true"}).check_gate == "" and not from_dict({"check": "off"}).checked
    with pytest.raises(Exception, match="check_gate"):
        from_dict({"check": "loudness=3"})
