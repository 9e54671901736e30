"""Round four of the hostile user (issue 51): the voice, client-named paths, slow clients, the caches.

Real ``studio serve`` processes on 127.0.0.1 talked to with httpx and raw sockets, real ``studio``
commands, real files. Memory is the server process's resident size read from outside (psutil),
sampled while the request runs, against a bound; nothing here asserts a duration.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from conftest import prepare_demo_avatar, speech_pause_speech, speechlike
from hostile import studio
from served import Server

psutil = pytest.importorskip("psutil")
TOKEN = "round-four-token-123"
EMOJI = "\U0001f600"


class PeakRss:
    """The peak resident memory (MB) of process ``pid`` and its children while the block runs."""

    def __init__(self, pid: int):
        self.proc = psutil.Process(pid)
        self.peak = 0.0
        self.before = self._now()
        self._stop = threading.Event()

    def _now(self) -> float:
        total = self.proc.memory_info().rss
        for c in self.proc.children(recursive=True):
            try:
                total += c.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total / 2**20

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self._now())
            except psutil.NoSuchProcess:
                return
            time.sleep(0.02)

    def __enter__(self):
        self._t = threading.Thread(target=self._watch, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self._now())

    @property
    def grew(self) -> float:
        return self.peak - self.before


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("round4_home")
    prepare_demo_avatar(home, "astro")
    return home


@pytest.fixture(scope="module")
def short(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("short") / "short.wav"
    sf.write(path, speechlike(1.0, 16_000), 16_000, subtype="PCM_16")
    return path


def _client(srv: Server, token: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=srv.url, headers=headers, timeout=600)


# ------------------------------------------------------------------------------------------------
# Row 1 and 8: speech is bounded before synthesis


def test_emoji_are_left_out_and_memory_stays_bounded(tmp_path):
    """5000 emoji after two words: the server speaks the words (espeak-ng would spell every emoji
    out: 6 GB before), its memory grows by well under a gigabyte."""
    with Server(tmp_path / "srv") as srv, _client(srv) as c:
        with PeakRss(srv.proc.pid) as rss:
            r = c.post("/v1/audio/speech", data={"text": "Hello there " + EMOJI * 5000})
        assert r.status_code == 201, r.text
        assert r.json()["duration_s"] < 5
        assert rss.grew < 700, rss.grew
        with PeakRss(srv.proc.pid) as rss:  # three at once, 4 KB each (three got the server OOM-killed in 9 GiB)
            threads = [
                threading.Thread(
                    target=c.post, args=("/v1/audio/speech",), kwargs={"data": {"text": f"Hi {n} " + EMOJI * 1300}}
                )
                for n in range(3)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert rss.grew < 700, rss.grew
        r = c.post("/v1/audio/speech", data={"text": EMOJI * 3000})
        assert r.status_code == 422
        assert r.json()["error"] == (
            "the script has nothing a voice can say (only emoji or symbols); type the words the presenter says"
        )


def test_a_long_run_without_punctuation_is_cut_into_bounded_runs(tmp_path):
    """300 words with no punctuation (one sentence to the splitter before: 880 MB for 60 words)."""
    import random

    pick = random.Random(1).choice  # varied words: no sentence repeats (each would be cached)
    vocabulary = "the quick brown fox jumps over a lazy dog while seven hundred people watched quietly".split()
    words = " ".join(pick(vocabulary) for _ in range(300))
    with Server(tmp_path / "srv") as srv, _client(srv) as c:
        with PeakRss(srv.proc.pid) as rss:
            r = c.post("/v1/audio/speech", data={"text": words})
        assert r.status_code == 201, r.text
        assert r.json()["duration_s"] > 40
        assert rss.grew < 800, rss.grew


def test_speech_limits_are_checked_before_synthesis(tmp_path):
    """'A. ' x 660 against a 1-minute limit, and 1500 characters against a 1 MB upload limit: 422 with
    one sentence about the speech, and nothing was synthesised (no WAV, no sentence in the cache)."""
    home = tmp_path / "srv"
    with Server(home, "--max-audio-minutes", "1", "--max-upload-mb", "1") as srv, _client(srv) as c:
        r = c.post("/v1/audio/speech", data={"text": "A. " * 660})
        assert r.status_code == 422, r.text
        assert r.json()["error"].startswith("the script would speak for at least 6 minutes; voice-overs here are")
        r = c.post("/v1/audio/speech", data={"text": "Good evening and welcome. " * 30})
        assert r.status_code == 422, r.text
        assert "larger than this server's 1 MB limit (--max-upload-mb): speak it in parts" in r.json()["error"]
        assert "upload" not in r.json()["error"].split("limit")[0]
    assert not list((home / "scripts").glob("speech-*.wav")) if (home / "scripts").is_dir() else True
    cache = home / "speech-cache"
    assert not cache.is_dir() or not list(cache.iterdir())


def test_sentences_are_bounded_by_characters():
    from studio.core.media.script_text import MAX_SENTENCE_CHARS, plan_script

    plan = plan_script("x" * 1000 + " " + "word " * 300 + EMOJI * 3 + " end.")
    assert all(len(s) <= MAX_SENTENCE_CHARS for s in plan.sentences)
    assert "".join(plan.sentences).replace(" ", "") == plan.text.replace(" ", "")
    assert plan.left_out_count == 3 and plan.note.startswith("left out 3 characters no voice says")


# ------------------------------------------------------------------------------------------------
# Row 5: the speech cache verifies what it returns


@pytest.mark.parametrize("damage", ["cut", "scramble", "empty"])
def test_a_damaged_speech_cache_is_made_again(tmp_path, damage):
    home = tmp_path / "home"
    first = studio("speak", "Good evening. Here is the news.", "-o", tmp_path / "a.wav", env={"STUDIO_HOME": str(home)})
    assert first.returncode == 0, first.stderr
    (wav,) = (home / "scripts").glob("speech-*.wav")
    good = wav.read_bytes()
    if damage == "cut":
        wav.write_bytes(good[: len(good) // 2])
    elif damage == "scramble":
        wav.write_bytes(good[:44] + bytes(reversed(good[44:])))
    else:
        wav.write_bytes(b"")
    for npz in (home / "speech-cache").glob("*.npz"):  # the sentences' cache, scrambled too
        data = npz.read_bytes()
        npz.write_bytes(data[:200] + bytes(len(data) - 200))
    again = studio("speak", "Good evening. Here is the news.", "-o", tmp_path / "b.wav", env={"STUDIO_HOME": str(home)})
    assert again.returncode == 0, again.stderr
    assert "(cached)" not in again.stdout  # made again (Piper's timing varies a little between runs)
    remade = (tmp_path / "b.wav").read_bytes()
    assert wav.read_bytes() == remade and len(remade) > len(good) * 0.7
    assert sf.info(tmp_path / "b.wav").duration > 1.5
    third = studio("speak", "Good evening. Here is the news.", "-o", tmp_path / "c.wav", env={"STUDIO_HOME": str(home)})
    assert "(cached)" in third.stdout and (tmp_path / "c.wav").read_bytes() == remade  # the intact cache is used


# ------------------------------------------------------------------------------------------------
# Row 2: client-named paths, background included, through one check


def _render_form(**extra) -> dict:
    return {"avatar": "astro", "text": "Hello.", **extra}


def test_background_paths_go_through_the_path_check(tmp_path, home):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    outside = tmp_path / "good.png"
    from PIL import Image

    Image.new("RGB", (64, 64), "red").save(outside)
    (allowed / "link.png").symlink_to(outside)
    with Server(home) as srv, _client(srv) as c:  # no --allow-paths: no server path at all
        r = c.post("/v1/renders", data=_render_form(background=str(outside), canvas="320x240"))
        assert r.status_code == 403 and "opens no paths of its own (background)" in r.json()["error"], r.text
    with Server(home, "--allow-paths", str(allowed)) as srv, _client(srv) as c:
        answers = {}
        for name, value in {
            "exists": str(outside),
            "missing": str(tmp_path / "missing.png"),
            "dotdot": f"{allowed}/../good.png",
            "link": str(allowed / "link.png"),
            "relative": "good.png",
        }.items():
            r = c.post("/v1/renders", data=_render_form(background=value, canvas="320x240"))
            answers[name] = (r.status_code, r.json()["error"].replace(value, "PATH"))
        assert answers["exists"] == answers["missing"], answers  # no answer tells whether a path exists
        assert answers["exists"][0] == 403 and answers["link"][0] == 403
        assert answers["dotdot"][0] == 403 and "without '..'" in answers["dotdot"][1]
        assert answers["relative"][0] == 422
        assert not any("does not exist" in a[1] or "not a colour" in a[1] for a in answers.values())


# ------------------------------------------------------------------------------------------------
# Rows 3 and 9: slow clients, connection limits, TCP_NODELAY


def test_slow_headers_are_timed_out_and_one_address_holds_few_connections(tmp_path):
    args = ("--token", TOKEN, "--header-timeout", "2", "--max-client-connections", "8")
    with Server(tmp_path / "srv", *args, token=TOKEN) as srv:
        socks = []
        for _ in range(40):
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(b"GET /v1/hea")  # a partial request line, never finished
            socks.append(s)
        answers = []
        for s in socks:
            s.settimeout(60)
            answers.append(s.recv(4096).split(b"\r\n", 1)[0])
            s.close()
        assert answers.count(b"HTTP/1.1 503 Service Unavailable") >= 30, answers
        assert b"HTTP/1.1 408 Request Timeout" in answers
        with _client(srv, TOKEN) as c:
            assert c.get("/v1/health").status_code == 200
        log = srv.log_tail(100_000)
    assert "Traceback" not in log
    assert log.count("no whole request within 2 s") <= 2, log  # one line per event, rate-limited
    assert log.count("open already") <= 2, log


def test_a_stalled_body_is_closed(tmp_path):
    with Server(tmp_path / "srv", "--body-timeout", "2") as srv:
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(
            b"POST /v1/audio HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=x\r\n"
            b"Content-Length: 100000\r\n\r\n--x\r\n"
        )
        s.settimeout(60)
        got = b""
        while chunk := s.recv(4096):
            got += chunk
        s.close()
        assert not list((tmp_path / "srv" / "uploads" / "audio").glob(".incoming-*"))
        assert "request body stalled for 2 s" in srv.log_tail()


def test_connections_have_tcp_nodelay():
    """The protocol ``studio serve`` runs sets TCP_NODELAY on every connection (a real uvicorn server on
    a socket bound like ``studio serve`` binds it; before, every kept-alive request waited ~40 ms)."""
    import asyncio

    import uvicorn

    from studio.api.connections import Limits, guarded_protocol
    from studio.api.server import bind

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, http=guarded_protocol(Limits()), log_level="warning", lifespan="off"))
    t = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    t.start()
    try:
        while not server.started:
            time.sleep(0.05)
        with httpx.Client(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}") as c:
            assert c.get("/").text == "ok"
            (conn,) = list(server.server_state.connections)
            accepted = conn.transport.get_extra_info("socket")
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        server.should_exit = True
        t.join(30)


# ------------------------------------------------------------------------------------------------
# Rows 6 and 15: images and videos bounded from their headers


def test_an_8k_plus_video_avatar_is_refused_from_its_header(tmp_path):
    import av

    video = tmp_path / "huge.mp4"
    with av.open(str(video), "w") as out:
        st = out.add_stream("libx264", rate=25)
        st.width, st.height, st.pix_fmt = 8192, 4352, "yuv420p"
        st.options = {"preset": "ultrafast"}
        frame = av.VideoFrame.from_ndarray(np.zeros((4352, 8192, 3), np.uint8), format="rgb24")
        for packet in st.encode(frame.reformat(format="yuv420p")):
            out.mux(packet)
        for packet in st.encode():
            out.mux(packet)
    small = tmp_path / "small.mp4"
    with av.open(str(small), "w") as out:  # the route's modules loaded first, so only the request is measured
        st = out.add_stream("libx264", rate=25)
        st.width, st.height, st.pix_fmt = 64, 64, "yuv420p"
        for packet in st.encode(av.VideoFrame.from_ndarray(np.zeros((64, 64, 3), np.uint8), format="rgb24")):
            out.mux(packet)
        for packet in st.encode():
            out.mux(packet)
    with Server(tmp_path / "srv") as srv, _client(srv) as c:
        c.post("/v1/avatars", data={"name": "small"}, files={"file": ("small.mp4", small.read_bytes())})
        with PeakRss(srv.proc.pid) as rss:
            r = c.post("/v1/avatars", data={"name": "huge"}, files={"file": ("huge.mp4", video.read_bytes())})
        assert r.status_code == 422, r.text
        assert r.json()["error"].startswith("'huge.mp4': the video frame is 8192x4352 (36 megapixels), over")
        assert rss.grew < 200, rss.grew


def test_a_decompression_bomb_background_is_one_sentence(tmp_path, home, short):
    from PIL import Image

    bomb = tmp_path / "bomb.png"
    Image.new("1", (12000, 12000)).save(bomb)
    r = studio(
        "render", "--avatar", "astro", "--audio", short, "--canvas", "320x240", "--background", bomb,
        "-o", tmp_path / "out.mp4", env={"STUDIO_HOME": str(home)},
    )  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("studio: error: ") and "the background image is 12000x12000 (144 megapixels)" in last
    assert not (tmp_path / "out.mp4").exists()


# ------------------------------------------------------------------------------------------------
# Row 4: inputs are never outputs, --overwrite or not, side files included


def test_overwrite_never_replaces_an_input(tmp_path, home):
    short = speech_pause_speech(tmp_path / "voice.wav", 1.0, 0.5, 1.0)
    out = tmp_path / "out"
    out.mkdir()
    script = out / "b.srt"
    script.write_text("Hello there.\n")
    r = studio(
        "render", "--avatar", "astro", "--audio", short, "--script", script, "--captions", "srt",
        "-o", out / "b.mp4", "--overwrite", env={"STUDIO_HOME": str(home)},
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert f"{script} is this command's input (--script {script}); write the output to another name" in r.stderr
    assert script.read_text() == "Hello there.\n"
    assert sorted(p.name for p in out.iterdir()) == ["b.srt"]  # nothing half-written, no video without its captions
    cap_in = out / "v.srt"
    cap_in.write_text("Good evening.\n")
    r = studio(
        "captions", "--audio", short, "--text", cap_in, "-o", cap_in, "--overwrite", env={"STUDIO_HOME": str(home)}
    )
    assert r.returncode == 2 and "is this command's input (--text" in r.stderr, r.stderr
    assert cap_in.read_text() == "Good evening.\n"
    link = out / "link.srt"
    link.symlink_to(cap_in)
    r = studio(
        "captions", "--audio", short, "--text", cap_in, "-o", link, "--overwrite", env={"STUDIO_HOME": str(home)}
    )
    assert r.returncode == 2 and cap_in.read_text() == "Good evening.\n", r.stderr
