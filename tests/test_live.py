"""Studio Live end to end: a real ``studio serve`` on 127.0.0.1, real aiortc WHEP viewers, real audio over
the WebSocket, Piper's voice, a real ffmpeg listening for RTMP and SRT (docs/live.md).

Assertions hold whatever the machine's speed: frames are checked by their RTP times and their mouths,
waits are on what the viewer receives or the server reports, never on a sleep's length. The viewers that
judge mouths ask for VP8: on a busy machine the receiver's bandwidth estimate drops and aiortc restarts
its H.264 encoder at the lower bitrate (a blurred keyframe that changes the mouth crop as much as a
spoken syllable does), while its VP8 encoder takes the new bitrate without a keyframe, so a still
picture stays still; H.264 is checked on its own (``test_vp8_when_the_offer_prefers_it``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import prepare_demo_avatar, speechlike
from served import Server, free_port

from studio.service.live_viewer import Got, Viewer, mouth_box, moved, send_pcm

httpx = pytest.importorskip("httpx")
pytest.importorskip("aiortc")
websockets = pytest.importorskip("websockets")
pytest.importorskip("websockets.exceptions")  # loaded lazily otherwise: the first pytest.raises needs it

TOKEN = "live-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_LIVE = 2
# ``moved`` (the largest change of an 8x8 block's mean in the mouth): a speaking mouth differs from the
# resting one by 50-70 levels (15-25 in the crossfade's first frames); a resting one, frame to frame, by
# under 1, and by up to 20 where a viewer that lost a packet on a busy machine got a keyframe at the low
# bitrate the encoder then had (a blurred picture, refined over the next second)
MOVING_LEVELS = 30.0
STILL_LEVELS = 8.0
VP8 = "video/VP8"
HEADER_S = 3  # the server's --header-timeout: an audio socket outlives it


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    h = tmp_path_factory.mktemp("live_home")
    return h, prepare_demo_avatar(h, "astro")


@pytest.fixture(scope="module")
def server(home):
    h, _ = home
    s = Server(
        h, "--token", TOKEN, "--max-live", str(MAX_LIVE), "--header-timeout", str(HEADER_S), token=TOKEN, timeout=180
    )
    deadline = time.monotonic() + 180  # the engines warm before the first session (GET /v1/ready)
    while httpx.get(f"{s.url}/v1/ready", headers=AUTH).status_code != 200:
        assert time.monotonic() < deadline, s.log_tail()
        time.sleep(0.2)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def mouth(home):
    return mouth_box(home[1])


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as c:
        yield c
        for s in c.get("/v1/live").json()["sessions"]:  # each test leaves no session behind
            c.delete(s["links"]["self"])


def open_session(client, **kw) -> dict:
    r = client.post("/v1/live", json={"avatar": "astro", **kw})
    assert r.status_code == 201, r.text
    d = r.json()
    assert set(d["links"]) >= {"self", "whep", "audio", "speak", "clear", "events"}
    assert r.headers["location"] == d["links"]["self"]
    return d


def ws_url(server, session: dict, rate: int = 16_000, key: bool = True) -> str:
    base = server.url.replace("http://", "ws://")
    return f"{base}{session['links']['audio']}?rate={rate}" + (f"&key={session['key']}" if key else "")


def rest_of(frames) -> np.ndarray:
    return frames[-1].mouth


async def wait_for(pred, timeout: float = 60, what: str = "") -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_open_watch_rest_speak_and_end(server, client, mouth):
    """Frames at the session's rate; silence rests (the same mouth); speech over the socket moves it;
    DELETE ends the session, its viewers, threads and UDP ports."""
    d = open_session(client)
    assert client.get(d["links"]["self"]).json()["state"] in ("starting", "live")

    async def run():
        async with Viewer(server.url, d["id"], AUTH, mouth=mouth, prefer=VP8) as v:
            await v.wait_frames(75)
            rest = v.frames[50:75]  # after the encoder's first 2 s (it refines a still picture over them)
            # RTP times step by one frame at 25 fps (90 kHz clock): the session's rate
            steps = np.diff([g.pts for g in rest])
            assert np.all(steps % 3600 == 0) and np.median(steps) == 3600, steps
            ref = rest[-1]
            assert still(rest), [
                round(moved(a.mouth, b.mouth), 2) for a, b in zip(rest, rest[1:])
            ]  # at rest: the same mouth (the encoder only refines the still picture)
            assert client.get(d["links"]["self"]).json()["figures"]["engine_frames"] == 0  # no network in silence
            assert v.audio_frames > 0
            async with websockets.connect(ws_url(server, d, 48_000)) as ws:
                n0 = len(v.frames)
                await send_pcm(ws, speechlike(2.0, 48_000), 48_000)
                await v.wait_frames(10)
            spoke = [g for g in v.frames[n0:] if speaking(g, ref)]
            assert len(spoke) >= 10, (
                [round(moved(g.mouth, ref.mouth), 1) for g in v.frames[n0:]],
                client.get(d["links"]["self"]).json(),
            )
            info = client.get(d["links"]["self"]).json()
            assert info["figures"]["engine_frames"] > 0 and info["figures"]["rest_frames"] > 0
            assert info["figures"]["first_frame_s"] is not None
            listed = client.get("/v1/live").json()
            assert listed["viewers"] == 1 and listed["threads"] >= 1
            assert udp_sockets(server.proc.pid) > 0
        # the viewer left (DELETE of its Location); the session ends with DELETE, and so does its socket
        async with websockets.connect(ws_url(server, d)) as ws:
            assert (await asyncio.to_thread(client.delete, d["links"]["self"])).status_code == 204
            with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 30)
            assert closed.value.rcvd.code == 1001

    asyncio.run(run())
    assert client.get(d["links"]["self"]).status_code == 404
    deadline = time.monotonic() + 30
    while True:
        listed = client.get("/v1/live").json()
        if (listed["threads"], listed["viewers"], udp_sockets(server.proc.pid)) == (0, 0, 0):
            break
        assert time.monotonic() < deadline, (listed, udp_sockets(server.proc.pid))
        time.sleep(0.2)
    metrics = client.get("/metrics").text
    assert "studio_live_first_frame_seconds_count" in metrics and "studio_live_latency_seconds_bucket" in metrics


def still(frames) -> bool:
    """Frame-to-frame, the mouth crops differ by less than ``STILL_LEVELS`` (the encoder refining a still
    picture changes it slowly)."""
    return all(moved(a.mouth, b.mouth) < STILL_LEVELS for a, b in zip(frames, frames[1:]))


def speaking(g, ref) -> bool:
    """Frame ``g``'s mouth differs from ``ref``'s as a speaking one does."""
    return moved(g.mouth, ref.mouth) > MOVING_LEVELS


def resting(frames, before) -> bool:
    """No frame's mouth speaks, against the resting frames ``before`` (their median)."""
    ref = Got(0, 0.0, np.median(np.stack([g.mouth for g in before]), axis=0))
    return not any(speaking(g, ref) for g in frames)


def udp_sockets(pid: int) -> int:
    """UDP sockets the process holds (its open sockets that /proc/net/udp lists)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("udp", "udp6"):
        p = Path(f"/proc/{pid}/net/{table}")
        if p.exists():
            for line in p.read_text().splitlines()[1:]:
                if line.split()[9] in inodes:
                    count += 1
    return count


def test_barge_in_and_two_sessions_own_lips(server, client, mouth):
    """Two sessions at once: the one spoken to moves its mouth, the other rests; a 'clear' on the
    socket drops the queued voice and the presenter rests again; a third session is 429."""
    a, b = open_session(client), open_session(client)
    r = client.post("/v1/live", json={"avatar": "astro"})
    assert r.status_code == 429 and int(r.headers["retry-after"]) > 0 and "max-live" in r.json()["error"]

    async def run():
        async with (
            Viewer(server.url, a["id"], AUTH, mouth=mouth, prefer=VP8) as va,
            Viewer(server.url, b["id"], AUTH, mouth=mouth, prefer=VP8) as vb,
        ):
            await va.wait_frames(75)  # the encoders settle on the still picture (2-3 s)
            await vb.wait_frames(5)
            ref = va.frames[-1]
            async with websockets.connect(ws_url(server, a)) as ws:
                await send_pcm(ws, speechlike(8.0, 16_000), 16_000, realtime=False)  # 8 s queued at once
                na, nb = len(va.frames), len(vb.frames)
                await wait_for(lambda: sum(speaking(g, ref) for g in va.frames[na:]) >= 8, what="a speaks")
                got = vb.frames[nb:]
                # b heard nothing: no engine frame, and its mouth stays still frame to frame
                assert client.get(b["links"]["self"]).json()["figures"]["engine_frames"] == 0
                assert resting(got, vb.frames[nb - 5 : nb])
                await ws.send(json.dumps({"type": "clear"}))
                cleared = json.loads(await ws.recv())
                assert cleared["type"] == "cleared"
                await wait_for(lambda: va.frames[-1].pts // 3600 > cleared["frame"] + 30, what="frames after the clear")
            assert client.get(a["links"]["self"]).json()["queued_voice_s"] == 0
            engine_frames = client.get(a["links"]["self"]).json()["figures"]["engine_frames"]
            await va.wait_frames(10)
            assert client.get(a["links"]["self"]).json()["figures"]["engine_frames"] == engine_frames  # resting
            # the presenter rests from the frame after the clear on (frame numbers are RTP times / 3600)
            after = [g for g in va.frames if g.pts // 3600 > cleared["frame"]]
            assert resting(after, va.frames[na - 5 : na]), [round(moved(g.mouth, ref.mouth), 1) for g in after]

    asyncio.run(run())


def test_the_audio_socket_outlives_the_http_header_timeout(server, client):
    """A voice socket stays open for as long as the session (the slow-client guard's header timer is
    for HTTP requests, never for an upgraded connection)."""
    d = open_session(client)

    async def run():
        async with websockets.connect(ws_url(server, d)) as ws:
            await send_pcm(ws, np.zeros(16_000 * (HEADER_S + 2), np.float32), 16_000)  # real time, past the timer
            await ws.send(json.dumps({"type": "clear"}))
            assert json.loads(await ws.recv())["type"] == "cleared"

    asyncio.run(run())


def test_speak_text_and_microphone(server, client, mouth):
    """POST {speak} (Piper) and the viewer's microphone track (sendrecv) both move the mouth."""
    from aiortc.mediastreams import AudioStreamTrack

    pytest.importorskip("piper")

    class Mic(AudioStreamTrack):
        def __init__(self):
            super().__init__()
            self.x = (np.clip(speechlike(30.0, 48_000), -1, 1) * 32767).astype(np.int16)
            self.i = 0

        async def recv(self):
            frame = await super().recv()  # paced 20 ms frames of silence at 48 kHz; filled with speech
            n = frame.samples
            chunk = self.x[self.i : self.i + n]
            self.i += n
            frame.planes[0].update(np.pad(chunk, (0, n - len(chunk))).tobytes())
            return frame

    d = open_session(client)

    async def run():
        async with Viewer(server.url, d["id"], AUTH, mouth=mouth, prefer=VP8) as v:
            await v.wait_frames(15)
            ref = v.frames[-1]
            r = client.post(d["links"]["speak"], json={"text": "Good evening, and welcome to the news at nine."})
            assert r.status_code == 202, r.text
            n0 = len(v.frames)
            await wait_for(lambda: sum(speaking(g, ref) for g in v.frames[n0:]) >= 5, what="Piper speech")
        mic = Mic()
        async with Viewer(server.url, d["id"], AUTH, mouth=mouth, mic=mic, prefer=VP8) as v:
            await v.wait_frames(5)
            n0 = len(v.frames)
            await wait_for(lambda: sum(speaking(g, ref) for g in v.frames[n0:]) >= 5, what="microphone")
            assert "sendrecv" in v.answer_sdp

    asyncio.run(run())
    assert client.post(d["links"]["speak"], json={"text": "   "}).status_code == 422


def test_vp8_when_the_offer_prefers_it(server, client, mouth):
    d = open_session(client)

    async def run():
        async with Viewer(server.url, d["id"], AUTH, mouth=mouth, prefer="video/VP8") as v:
            await v.wait_frames(5)
            video = v.answer_sdp.split("m=video")[1]
            assert f"a=rtpmap:{video.splitlines()[0].split()[2]} VP8/90000" in video
        async with Viewer(server.url, d["id"], AUTH, mouth=mouth, prefer="video/H264") as v:
            await v.wait_frames(5)
            video = v.answer_sdp.split("m=video")[1]
            first_pt = video.splitlines()[0].split()[2]
            assert f"a=rtpmap:{first_pt} H264/90000" in video

    asyncio.run(run())


def test_bad_inputs_one_sentence_and_the_server_stays_healthy(server, client):
    assert client.post("/v1/live", json={"avatar": "nobody"}).status_code == 404
    assert client.post("/v1/live", json={"avatar": "astro", "rate": 60}).status_code == 422
    assert httpx.post(f"{server.url}/v1/live", json={"avatar": "astro"}).status_code == 401
    d = open_session(client)
    whep = d["links"]["whep"]
    r = client.post(whep, content=b"v=0", headers={"Content-Type": "text/plain"})
    assert r.status_code == 415 and "application/sdp" in r.json()["error"]
    r = client.post(whep, content=b"not an offer at all", headers={"Content-Type": "application/sdp"})
    assert r.status_code == 400 and r.json()["error"]
    r = client.post(
        whep, content=b"v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\nbroken", headers={"Content-Type": "application/sdp"}
    )
    assert r.status_code == 400, r.text
    assert (
        client.post("/v1/live/nope/whep", content=b"v=0", headers={"Content-Type": "application/sdp"}).status_code
        == 404
    )
    assert client.post(d["links"]["push"], json={"url": "http://example.com/x"}).status_code == 422

    async def sockets():
        for rate in (0, 10**6, "abc"):
            with pytest.raises(websockets.exceptions.InvalidStatus) as e:
                async with websockets.connect(ws_url(server, d, rate)):
                    pass
            assert e.value.response.status_code == 422
        with pytest.raises(websockets.exceptions.InvalidStatus) as e:  # no token, no key
            async with websockets.connect(ws_url(server, d, key=False)):
                pass
        assert e.value.response.status_code == 401
        with pytest.raises(websockets.exceptions.InvalidStatus) as e:  # another site's page
            async with websockets.connect(ws_url(server, d), origin="http://evil.example"):
                pass
        assert e.value.response.status_code == 403
        # a 100 MB message: refused, the socket closed, the session still live
        async with websockets.connect(ws_url(server, d), max_size=None) as ws:
            with pytest.raises(websockets.exceptions.ConnectionClosed):
                await ws.send(b"\0" * (100 << 20))
                await ws.recv()
        async with websockets.connect(ws_url(server, d)) as ws:
            await ws.send("hello")
            assert json.loads(await ws.recv())["type"] == "error"
        # a viewer that stops reading (its peer never closes, its loop stops): the session keeps its clock
        v = Viewer(server.url, d["id"], AUTH)
        await v.__aenter__()
        await v.wait_frames(3)

    asyncio.run(sockets())  # the loop ends: the abandoned viewer's peer stops answering
    f0 = client.get(d["links"]["self"]).json()["figures"]["frames"]
    deadline = time.monotonic() + 30
    while client.get(d["links"]["self"]).json()["figures"]["frames"] < f0 + 25:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert client.get("/v1/health").status_code == 200
    assert client.get(d["links"]["self"]).json()["state"] == "live"
    # the session's events: its state, its first frame, then its figures every second
    kinds = []
    with client.stream("GET", d["links"]["events"]) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("event:"):
                kinds.append(line.split(":", 1)[1].strip())
            if "figures" in kinds:
                break
    assert kinds[:2] == ["state", "first_frame"] and "figures" in kinds, kinds


@pytest.mark.skipif(shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None, reason="needs ffmpeg")
@pytest.mark.parametrize("scheme", ["rtmp", "srt"])
def test_push_to_a_local_ffmpeg_listener(server, client, tmp_path, scheme):
    from studio.service.live_push import protocol_ready

    if not protocol_ready(scheme):
        pytest.skip(f"PyAV's FFmpeg here has no {scheme} (PyPI's wheels carry RTMP, not SRT)")
    port = free_port()
    out = tmp_path / f"got.{'flv' if scheme == 'rtmp' else 'ts'}"
    src = f"rtmp://127.0.0.1:{port}/live/key" if scheme == "rtmp" else f"srt://127.0.0.1:{port}?mode=listener"
    listen = ["-listen", "1"] if scheme == "rtmp" else []
    ff = subprocess.Popen(
        [
            "ffmpeg",
            "-nostdin",
            "-hide_banner",
            "-loglevel",
            "error",
            *listen,
            "-i",
            src,
            "-t",
            "2",
            "-c",
            "copy",
            "-y",
            str(out),
        ],
        stderr=subprocess.PIPE,
    )
    try:
        d = open_session(client)
        url = f"rtmp://127.0.0.1:{port}/live/key" if scheme == "rtmp" else f"srt://127.0.0.1:{port}?mode=caller"
        deadline = time.monotonic() + 60
        r = client.post(d["links"]["push"], json={"url": url})
        assert r.status_code == 201, r.text
        assert "key" not in r.json()["url"]  # the stream key is never shown
        ff.wait(timeout=max(5, deadline - time.monotonic()))
        assert ff.returncode == 0, ff.stderr.read().decode()[-500:]
    finally:
        if ff.poll() is None:
            ff.kill()
            ff.wait()
    probe = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "stream=codec_name", "-of", "json", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    codecs = sorted(s["codec_name"] for s in json.loads(probe.stdout)["streams"])
    assert codecs == ["aac", "h264"], codecs
    decoded = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(out), "-f", "null", "-"], capture_output=True, text=True
    )
    assert decoded.returncode == 0 and not decoded.stderr.strip(), decoded.stderr[-300:]
    ev = client.get(d["links"]["self"]).json()
    assert ev["pushes"][0]["frames"] > 0


def test_studio_live_plays_a_file_and_refuses_bad_input(server, client, tmp_path):
    """``studio live --audio FILE`` plays a voice in real time on the server and prints the figures;
    bad input is one sentence and exit code 2."""
    import soundfile as sf

    voice = tmp_path / "voice.wav"
    sf.write(voice, speechlike(2.0, 48_000), 48_000, subtype="PCM_16")
    env = dict(os.environ, STUDIO_SERVER_TOKEN=TOKEN, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    run = [sys.executable, "-m", "studio", "live", "--server", server.url, "--avatar", "astro"]
    r = subprocess.run([*run, "--audio", str(voice), "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    figures = json.loads(r.stdout.strip().splitlines()[-1])
    assert figures["frames"] >= 50 and figures["engine_frames"] > 0 and figures["rest_frames"] >= 0
    assert client.get("/v1/live").json()["sessions"] == []  # it ended its session
    for extra, words in (
        (["--audio", "-", "--rate", "0"], "--rate"),
        (["--audio", str(tmp_path / "missing.wav")], "missing.wav"),
        (["--push", "http://example.com/x", "--audio", str(voice)], "push URL"),
    ):
        r = subprocess.run([*run, *extra], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = subprocess.run(
        [*run[:-1], "nobody", "--audio", str(voice)], env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and "no avatar named 'nobody'" in r.stderr, r.stderr
