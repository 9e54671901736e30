"""``studio serve`` end to end: a real server process on 127.0.0.1 (free port, its own data folder,
bound with a token) and a real HTTP client (httpx): endpoints, bad inputs, SSE, cancel, the frame."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import DEMO_AVATAR, ROOT, speech_pause_speech
from served import Server

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
from httpx_sse import connect_sse  # noqa: E402

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_UPLOAD_MB = 2
MAX_QUEUED = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("served_home")
    s = Server(
        home, "--token", TOKEN, "--max-upload-mb", str(MAX_UPLOAD_MB), "--max-queued", str(MAX_QUEUED), token=TOKEN
    )
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("clips")
    return {
        "short": speech_pause_speech(d / "short.wav", 0.6, 0.4, 0.6),  # 40 frames, a pause inside
        "long": speech_pause_speech(d / "long.wav", 4.0, 0.4, 4.0),
        "dir": d,
    }


@pytest.fixture(scope="module")
def astro(client):
    with open(DEMO_AVATAR, "rb") as fh:
        r = client.post("/v1/avatars", data={"name": "astro"}, files={"file": ("presenter.bin", fh)})
    assert r.status_code == 201, r.text
    return r.json()


@pytest.fixture(scope="module")
def short_id(client, clips):
    with open(clips["short"], "rb") as fh:
        r = client.post("/v1/audio", files={"file": ("../../etc/voice.wav", fh)})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def one_sentence(r, status: int) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert list(body) == ["error"]
    msg = body["error"]
    assert msg and "\n" not in msg and "Traceback" not in msg
    return msg


def events(client, job_id: int) -> list[tuple[str, dict]]:
    out = []
    with connect_sse(client, "GET", f"/v1/renders/{job_id}/events") as src:
        assert src.response.status_code == 200
        assert src.response.headers["content-type"].startswith("text/event-stream")
        for sse in src.iter_sse():
            out.append((sse.event, json.loads(sse.data)))
    return out


def wait_state(client, job_id: int, states=("done", "failed", "cancelled"), timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        j = client.get(f"/v1/renders/{job_id}").json()
        if j["state"] in states:
            return j
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} still {j['state']}")


def mp4_frames(path: Path) -> list[np.ndarray]:
    import av

    with av.open(str(path)) as c:
        assert c.streams.audio, "the MP4 has no audio track"
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


# --------------------------------------------------------------------------------------------


def test_health_engines_and_docs(server, client):
    h = client.get("/v1/health").json()
    assert h["ok"] is True and h["max_queued"] == MAX_QUEUED and h["max_upload_mb"] == MAX_UPLOAD_MB
    e = client.get("/v1/engines").json()
    classic = next(x for x in e["engines"] if x["name"] == "classic")
    assert classic["ready"] is True and e["auto"] in ("classic", "musetalk")
    assert "swagger" in httpx.get(f"{server.url}/docs").text.lower()  # docs describe, need no token
    assert (
        "access-control-allow-origin" not in client.get("/v1/health", headers={"Origin": "https://x.example"}).headers
    )
    paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
    assert {"/generate", "/v1/renders", "/v1/frame", "/v1/avatars", "/v1/audio"} <= set(paths)


OPERATIONS = {  # stable operation ids: generated clients name their functions after them
    ("get", "/v1/health"): "health",
    ("get", "/v1/ready"): "ready",
    ("get", "/metrics"): "metrics",
    ("get", "/v1/engines"): "list_engines",
    ("get", "/v1/avatars"): "list_avatars",
    ("post", "/v1/avatars"): "add_avatar",
    ("get", "/v1/avatars/{name}/thumbnail"): "get_avatar_thumbnail",
    ("delete", "/v1/avatars/{name}"): "remove_avatar",
    ("patch", "/v1/avatars/{name}"): "rename_avatar",
    ("post", "/v1/audio"): "upload_audio",
    ("get", "/v1/audio/{audio_id}"): "get_audio",
    ("get", "/v1/frame"): "get_frame",
    ("post", "/generate"): "generate",
    ("post", "/v1/renders"): "create_render",
    ("get", "/v1/renders"): "list_renders",
    ("get", "/v1/renders/{job_id}"): "get_render",
    ("delete", "/v1/renders/{job_id}"): "delete_render",
    ("get", "/v1/renders/{job_id}/events"): "render_events",
    ("get", "/v1/renders/{job_id}/video"): "get_render_video",
    ("get", "/v1/renders/{job_id}/preview"): "get_render_preview",
    ("post", "/v1/renders/{job_id}/retry"): "retry_render",
    ("get", "/v1/renders/{job_id}/files/{name}"): "get_render_file",
    ("get", "/v1/events"): "queue_events",
    ("get", "/v1/audio"): "list_audio",
    ("get", "/v1/audio/{audio_id}/file"): "get_audio_file",
    ("patch", "/v1/audio/{audio_id}"): "rename_audio",
    ("delete", "/v1/audio/{audio_id}"): "remove_audio",
    ("post", "/v1/session"): "open_session",
    ("delete", "/v1/session"): "close_session",
}
BINARY = {
    "get_avatar_thumbnail": "image/png",
    "get_frame": "image/png",
    "get_render_frame": "image/png",
    "generate": "video/mp4",
    "get_render_video": "video/mp4",
    "get_render_preview": "image/jpeg",
    "get_audio_file": "audio/wav",
    "get_render_file": "application/x-subrip",
}


def test_the_openapi_document_is_typed(server):
    from studio.core.settings import specs

    doc = httpx.get(f"{server.url}/openapi.json").json()
    schemas = doc["components"]["schemas"]
    ops = {(m, p): o for p, item in doc["paths"].items() for m, o in item.items()}
    assert {k: o["operationId"] for k, o in ops.items() if k in OPERATIONS} == OPERATIONS
    assert "HTTPValidationError" not in schemas  # FastAPI's `detail` shape: this server never sends it
    for (method, path), op in ops.items():
        codes = {int(c) for c in op["responses"]}
        assert {401, 500} <= codes, (method, path)
        for code, r in op["responses"].items():
            content = r.get("content", {})
            if int(code) >= 400:
                assert content["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}, (path, code)
            elif int(code) == 204:  # nothing to answer (a live session ended, a viewer gone)
                assert not content, (method, path)
            elif op["operationId"] == "whep":  # WHEP: the SDP answer
                assert list(content) == ["application/sdp"], (path, content)
            elif op["operationId"] in BINARY:
                assert content[BINARY[op["operationId"]]]["schema"] == {"type": "string", "format": "binary"}
            elif op["operationId"] in ("render_events", "queue_events", "live_events"):
                assert list(content) == ["text/event-stream"]
            elif op["operationId"] == "metrics":
                assert list(content) == ["text/plain", "application/openmetrics-text"]
            else:
                schema = content["application/json"]["schema"]
                assert schema != {} and ("$ref" in schema or "anyOf" in schema), (method, path, schema)
    assert schemas["Error"]["required"] == ["error"] and schemas["Error"]["additionalProperties"] is False
    # the render settings' models are the schema's, field for field (formats' and check's settings included)
    form = schemas["RenderForm"]["properties"]
    for spec in specs("http"):
        assert form[spec.name]["description"] == spec.help, spec.name
    assert set(schemas["RenderSettings"]["properties"]) == {s.name for s in specs("job")}
    from studio.core.engines import engine_status

    runs = ["auto", *(name for name, a in engine_status().items() if a.ready)]  # this server's engines only
    assert form["crf"]["maximum"] == 51 and form["engine"]["enum"] == [
        e for e in ("auto", "classic", "musetalk") if e in runs
    ]
    assert {k: form["audio"][k] for k in ("type", "format")} == {"type": "string", "format": "binary"}
    encoding = ops[("post", "/v1/renders")]["requestBody"]["content"]["multipart/form-data"]["encoding"]
    assert "audio/wav" in encoding["audio"]["contentType"] and "image/png" in encoding["avatar_file"]["contentType"]
    assert schemas["RenderForm"]["additionalProperties"] is False
    body = ops[("post", "/v1/renders")]["requestBody"]["content"]
    assert list(body) == ["multipart/form-data"]
    assert {"StateEvent", "ProgressEvent", "Job", "RenderResult"} <= set(schemas)


def test_unknown_fields_are_named(client):
    r = client.post("/v1/renders", data={"avatar": "astro", "text": "hi", "crff": "18", "engin": "classic"})
    assert one_sentence(r, 422).startswith("unknown fields 'crff', 'engin'")
    r = client.get("/v1/frame", params={"t": 0, "avatar": "astro", "audio_id": "x", "thresold": 0.1})
    assert one_sentence(r, 422).startswith("unknown field 'thresold'")


def test_a_token_is_required_when_bound_with_one(server):
    for headers in ({}, {"Authorization": "Bearer wrong-token-xxxx"}, {"Authorization": TOKEN}):
        r = httpx.post(f"{server.url}/v1/audio", headers=headers, files={"file": ("a.wav", b"x" * 100)})
        assert "token" in one_sentence(r, 401)
        assert r.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{server.url}/v1/health", headers=AUTH).status_code == 200


def test_another_host_without_a_token_refuses_to_start(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "studio", "serve", "--host", "0.0.0.0", "--port", "1"],
        env=dict(os.environ, STUDIO_HOME=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "--token" in r.stderr


def test_a_port_in_use_is_one_sentence(server, tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "studio", "serve", "--port", str(server.port)],
        env=dict(os.environ, STUDIO_HOME=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert f"cannot listen on 127.0.0.1:{server.port} (Address already in use)" in r.stderr


def test_http_errors_are_json_sentences(client):
    assert "no such endpoint" in one_sentence(client.get("/v2/nothing"), 404)
    assert "not allowed" in one_sentence(client.delete("/v1/health"), 405)
    assert "'t' is required" == one_sentence(client.get("/v1/frame", params={"avatar": "astro"}), 422)
    assert "greater than or equal to 0" in one_sentence(client.get("/v1/frame", params={"t": -1}), 422)
    assert "crf" in one_sentence(client.post("/v1/renders", data={"avatar": "astro", "text": "hi", "crf": 99}), 422)


@pytest.mark.parametrize(
    "form, says",
    [
        ({"text": ""}, "text"),  # no voice-over at all: /v1/renders asks for one, /v1/audio/speech for text
        ({"text": "   "}, "the script text is empty; type what the presenter says"),
        ({"text": "x" * 50_000}, "the script text is 50000 characters; speak at most 20000 at a time"),
        ({"text": "Hello.", "voice": "nobody"}, "there is no voice named 'nobody'"),
        ({"text": "Hello.", "canvas": "0x0"}, "canvas 0x0 is out of range"),
        ({"text": "Hello.", "canvas": "20000x20000"}, "canvas 20000x20000 is out of range"),
        ({"text": "Hello.", "delivery": "nope"}, "there is no delivery named 'nope'"),
        ({"text": "Hello.", "script": "x" * 50_000}, "the script is 50000 characters"),
    ],
)
def test_bad_delivery_and_script_inputs_get_one_sentence_over_http(client, astro, form, says):
    """Issue 35's bad inputs over HTTP: a 4xx with one sentence before any job is queued."""
    before = client.get("/v1/renders").json()
    r = client.post("/v1/renders", data={"avatar": "astro", "engine": "classic", **form})
    assert says in one_sentence(r, 422)
    assert client.get("/v1/renders").json() == before
    if "canvas" not in form and "delivery" not in form and "script" not in form:  # the text alone: /v1/audio/speech
        speech = {k: v for k, v in form.items() if k in ("text", "voice")}
        assert says in one_sentence(client.post("/v1/audio/speech", data=speech), 422)


def test_audio_uploaded_once_reused_by_id_with_its_silence(server, client, clips, short_id):
    from studio.core.media.analysis import analyze

    with open(clips["short"], "rb") as fh:
        again = client.post("/v1/audio", data={"min_silence": 3}, files={"file": ("other-name.wav", fh)})
    a = again.json()
    assert again.status_code == 201 and a["id"] == short_id  # same content, same id, stored once
    expected = analyze(clips["short"], use_cache=False).summary()
    assert a["frames"] == expected["frames"] == 40
    assert a["silent_spans"] == expected["silent_spans"] and a["silent_frames"] == expected["silent_frames"] > 0
    assert client.get(f"/v1/audio/{short_id}").json()["silent_spans"] == expected["silent_spans"]
    stored = sorted(p.name for p in (server.home / "uploads" / "audio").iterdir())
    assert stored == [f"{short_id}.json", f"{short_id}.wav"]  # a generated name, never the client's
    assert not list(server.home.rglob("etc"))


def test_bad_uploads_get_the_right_code_and_one_sentence(server, client, clips):
    r = client.post("/v1/audio", files={"file": ("voice.wav", b"RIFF\x00\x00garbage" * 50)})
    assert "'voice.wav': not an audio file" in one_sentence(r, 415)
    assert "empty" in one_sentence(client.post("/v1/audio", files={"file": ("e.wav", b"")}), 422)
    big = b"\x00" * int((MAX_UPLOAD_MB + 0.5) * 2**20)  # one file over the cap (the body is under its own)
    assert "too large" in one_sentence(client.post("/v1/audio", files={"file": ("big.wav", big)}), 413)
    huge = b"\x00" * int((2 * MAX_UPLOAD_MB + 2) * 2**20)  # refused from its Content-Length, unread
    assert "too large" in one_sentence(client.post("/v1/audio", files={"file": ("huge.wav", huge)}), 413)
    with open(clips["short"], "rb") as fh:  # audio is not an avatar, whatever its name says
        r = client.post("/v1/avatars", data={"name": "bad"}, files={"file": ("face.png", fh)})
    assert "not an image or video" in one_sentence(r, 415)
    assert "'../x' is not a valid avatar name; use up to 64 letters" in one_sentence(
        client.post("/v1/avatars", data={"name": "../x"}, files={"file": ("f.png", b"x")}), 422
    )
    leftovers = [p.name for p in (server.home / "uploads").rglob("*") if p.is_file() and p.name.startswith(".")]
    assert leftovers == []


def test_avatars_listed_with_thumbnails_added_and_removed(client, astro):
    import PIL.Image

    listed = {a["name"]: a for a in client.get("/v1/avatars").json()["avatars"]}
    assert listed["astro"]["kind"] == "photo" and listed["astro"]["width"] == 512
    thumb = client.get(listed["astro"]["thumbnail"])
    assert thumb.headers["content-type"] == "image/png"
    import io

    assert max(PIL.Image.open(io.BytesIO(thumb.content)).size) <= 192
    with open(DEMO_AVATAR, "rb") as fh:
        assert "already exists" in one_sentence(
            client.post("/v1/avatars", data={"name": "astro"}, files={"file": ("a.png", fh)}), 409
        )
    with open(DEMO_AVATAR, "rb") as fh:  # the same bytes under another name: astro is offered (docs/web.md)
        assert "already avatar 'astro'" in one_sentence(
            client.post("/v1/avatars", data={"name": "gone"}, files={"file": ("a.png", fh)}), 409
        )
    with open(DEMO_AVATAR, "rb") as fh:
        made = client.post("/v1/avatars", data={"name": "gone", "force": "true"}, files={"file": ("a.png", fh)})
        assert made.status_code == 201
    assert client.delete("/v1/avatars/gone").json() == {"removed": "gone"}
    assert "gone" not in {a["name"] for a in client.get("/v1/avatars").json()["avatars"]}
    assert "no avatar named 'gone'" in one_sentence(client.delete("/v1/avatars/gone"), 404)


def test_unknown_ids_are_404(client, astro, short_id):
    for method, path in (
        ("GET", "/v1/renders/99999"),
        ("GET", "/v1/renders/99999/events"),
        ("GET", "/v1/renders/99999/video"),
        ("DELETE", "/v1/renders/99999"),
        ("POST", "/v1/renders/99999/retry"),
        ("GET", "/v1/audio/00000000deadbeef"),
    ):
        assert "99999" in one_sentence(client.request(method, path), 404) or "deadbeef" in path
    assert "no render job" in one_sentence(client.get("/v1/renders/99999/frame", params={"t": 0}), 404)
    r = client.post("/v1/renders", data={"avatar": "nobody", "audio_id": short_id})
    assert "no avatar named 'nobody'" in one_sentence(r, 404)
    assert "no uploaded voice-over" in one_sentence(
        client.post("/v1/renders", data={"avatar": "astro", "audio_id": "ffffffffffffffff"}), 404
    )


def test_server_paths_are_refused_without_allow_paths(client, clips):
    r = client.post("/v1/renders", data={"avatar_path": str(DEMO_AVATAR), "audio_path": str(clips["short"])})
    assert "--allow-paths" in one_sentence(r, 403)


def test_generate_answers_the_mp4_and_the_frame_endpoint_is_that_frame(server, client, clips, astro, short_id):
    import io

    import PIL.Image

    t = 0.5  # frame 12: speech
    r = client.post(
        "/generate",
        data={"avatar": "astro", "engine": "classic"},
        files={"audio": ("short.wav", open(clips["short"], "rb"))},
    )
    assert r.status_code == 200 and r.headers["content-type"] == "video/mp4"
    mp4 = clips["dir"] / "generated.mp4"
    mp4.write_bytes(r.content)
    frames = mp4_frames(mp4)
    assert len(frames) == 40

    png = client.get("/v1/frame", params={"avatar": "astro", "audio_id": short_id, "t": t, "engine": "classic"})
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    served = np.asarray(PIL.Image.open(io.BytesIO(png.content)).convert("RGB"))
    by_job = client.get(f"/v1/renders/{int(r.headers['x-studio-job'])}/frame", params={"t": t})
    assert np.array_equal(np.asarray(PIL.Image.open(io.BytesIO(by_job.content)).convert("RGB")), served)

    out = clips["dir"] / "cli-frame.png"  # `studio frame` on the same data folder: the same pixels
    env = dict(os.environ, STUDIO_HOME=str(server.home), PYTHONPATH=str(ROOT))
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "studio",
            "frame",
            "--avatar",
            "astro",
            "--audio",
            str(clips["short"]),
            "-t",
            str(t),
            "-o",
            str(out),
            "--engine",
            "classic",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    assert np.array_equal(np.asarray(PIL.Image.open(out).convert("RGB")), served)

    encoded = frames[12].astype(np.int16)  # the MP4's frame 12: the same picture through H.264
    assert encoded.shape == served.shape
    assert np.abs(encoded - served).mean() < 3.0
    # and a different frame is further away where the two pictures differ (the mouth): the test can
    # fail (over the whole frame, H.264's noise on the still background outweighs the mouth)
    png30 = client.get("/v1/frame", params={"avatar": "astro", "audio_id": short_id, "t": 1.2, "engine": "classic"})
    served30 = np.asarray(PIL.Image.open(io.BytesIO(png30.content)).convert("RGB")).astype(np.int16)
    mouth = np.abs(served30 - served).max(axis=2) > 24
    assert mouth.sum() > 50
    other = frames[30].astype(np.int16)
    assert np.abs(encoded - served)[mouth].mean() < np.abs(other - served)[mouth].mean()


def test_queued_render_streams_events_in_order_and_serves_ranges(client, astro, short_id, clips):
    r = client.post("/v1/renders", data={"avatar": "astro", "audio_id": short_id, "engine": "classic"})
    assert r.status_code == 202
    job = r.json()
    assert job["state"] in ("queued", "running") and job["links"]["events"] == f"/v1/renders/{job['id']}/events"
    got = events(client, job["id"])
    kinds = [k for k, _ in got]
    assert kinds[0] == "state" and kinds[-1] == "state" and "progress" in kinds
    assert got[-1][1]["state"] == "done" and got[-1][1]["video"] == job["links"]["video"]
    states = [d["state"] for k, d in got if k == "state"]
    assert states[-2:] == ["running", "done"] and states.index("running") < len(states) - 1
    done = [d["done"] for k, d in got if k == "progress"]
    assert done == sorted(done) and done[-1] == 40
    assert all(d["total"] == 40 and d["fps"] >= 0 and d["eta_s"] >= 0 for k, d in got if k == "progress")
    assert events(client, job["id"]) == [("state", got[-1][1])]  # a finished job: its state, then the end

    full = client.get(job["links"]["video"])
    assert full.status_code == 200 and full.headers["accept-ranges"] == "bytes"
    part = client.get(job["links"]["video"], headers={"Range": "bytes=100-199"})
    assert part.status_code == 206 and part.content == full.content[100:200]
    assert part.headers["content-range"] == f"bytes 100-199/{len(full.content)}"
    size = len(full.content)
    for bad in (f"bytes={size}-", "bytes=200-100", "bytes=-0"):  # past the end, backwards, nothing
        r = client.get(job["links"]["video"], headers={"Range": bad})
        assert r.status_code == 416 and r.headers["content-range"] == f"bytes */{size}", bad
        assert "is outside the video" in r.json()["error"], r.text
    tail = client.get(job["links"]["video"], headers={"Range": f"bytes=-{size + 10}"})  # more than the file: all of it
    assert tail.status_code == 206 and tail.content == full.content
    path = clips["dir"] / "queued.mp4"
    path.write_bytes(full.content)
    assert len(mp4_frames(path)) == 40
    listed = {j["id"]: j for j in client.get("/v1/renders").json()["renders"]}
    assert listed[job["id"]]["state"] == "done" and listed[job["id"]]["result"]["frames"] == 40


def test_cancel_leaves_no_file_the_queue_is_capped_and_retry_requeues(server, client, astro, short_id, clips):
    with open(clips["long"], "rb") as fh:
        long_id = client.post("/v1/audio", files={"file": ("long.wav", fh)}).json()["id"]
    running = client.post("/v1/renders", data={"avatar": "astro", "audio_id": long_id, "engine": "classic"}).json()
    queued = [
        client.post("/v1/renders", data={"avatar": "astro", "audio_id": short_id, "engine": "classic"})
        for _ in range(MAX_QUEUED + 2)
    ]
    codes = [r.status_code for r in queued]
    assert codes.count(429) >= 1 and codes[0] == 202
    assert "queue is full" in one_sentence(next(r for r in queued if r.status_code == 429), 429)
    waiting = [r.json() for r in queued if r.status_code == 202]

    for j in waiting:  # queued ones first (the runner would take the next when the first stops)
        assert client.delete(f"/v1/renders/{j['id']}").json()["state"] == "cancelled"
    with connect_sse(client, "GET", running["links"]["events"]) as src:  # cancel once it is rendering
        for sse in src.iter_sse():
            if sse.event == "progress" and json.loads(sse.data)["preview"]:
                break
    preview = client.get(running["links"]["preview"])  # the live preview, while it renders
    assert preview.status_code == 200 and preview.headers["content-type"] == "image/jpeg"
    assert 0 <= int(preview.headers["x-studio-frame"]) < 210
    assert client.delete(f"/v1/renders/{running['id']}").status_code == 200
    assert wait_state(client, running["id"])["state"] == "cancelled"
    for j in [running, *waiting]:
        assert not (server.home / "renders" / j["output"]).exists()
        assert "cancelled" in one_sentence(client.get(j["links"]["video"]), 409)
    assert [p.name for p in (server.home / "renders").iterdir() if ".part" in p.name or p.name.startswith(".")] == []

    first = waiting[0]
    again = client.post(f"/v1/renders/{first['id']}/retry")  # a new job; the cancelled one stays as it was
    assert again.status_code == 202, again.text
    new = again.json()
    assert new["state"] == "queued" and new["retry_of"] == first["id"] and new["id"] != first["id"]
    assert client.get(f"/v1/renders/{first['id']}").json()["state"] == "cancelled"
    done = wait_state(client, new["id"])
    assert done["state"] == "done" and (server.home / "renders" / done["output"]).is_file()
    active = client.post("/v1/renders", data={"avatar": "astro", "audio_id": long_id, "engine": "classic"}).json()
    assert "only a finished job" in one_sentence(client.post(f"/v1/renders/{active['id']}/retry"), 409)
    assert client.delete(f"/v1/renders/{active['id']}").json()["state"] in ("cancelled", "running")
    wait_state(client, active["id"], states=("cancelled",))

    video = server.home / "renders" / done["output"]  # a retried done job: a new file, the first one kept
    redo = client.post(f"/v1/renders/{new['id']}/retry").json()
    redone = wait_state(client, redo["id"])
    assert redone["output"] != done["output"] and video.is_file()
    assert client.get(f"/v1/renders/{new['id']}").json()["state"] == "done"

    msg = one_sentence(client.delete(f"/v1/renders/{new['id']}"), 409)  # a finished job: kept, with its file
    assert "purge" in msg and video.is_file() and client.get(new["links"]["video"]).status_code == 200
    gone = client.delete(f"/v1/renders/{new['id']}", params={"purge": "true"})
    assert gone.status_code == 200 and gone.json() == {
        "id": new["id"],
        "state": "removed",
        "reason": "purged: the job and its files were removed",
        "files": [done["output"]],
    }
    assert not video.exists() and (server.home / "renders" / redone["output"]).is_file()
    assert "no render job" in one_sentence(client.get(f"/v1/renders/{new['id']}"), 404)


def test_a_retry_whose_voice_over_is_gone_is_refused_before_the_202(server, client, astro, clips):
    voice = speech_pause_speech(clips["dir"] / "once.wav", 0.3, 0.2, 0.5)
    with open(voice, "rb") as fh:
        up = client.post("/v1/audio", files={"file": ("once.wav", fh)}).json()
    done = wait_state(client, client.post("/v1/renders", data={"avatar": "astro", "audio_id": up["id"]}).json()["id"])
    assert done["state"] == "done"
    stored = next((server.home / "uploads" / "audio").glob(f"{up['id']}.*[!n]"))  # removed by hand
    stored.unlink()
    before = len(client.get("/v1/renders", params={"limit": 500}).json()["renders"])
    msg = one_sentence(client.post(f"/v1/renders/{done['id']}/retry"), 410)  # gone: not a bad request
    assert "no longer on the server" in msg and str(server.home) not in msg
    assert len(client.get("/v1/renders", params={"limit": 500}).json()["renders"]) == before


def test_max_queued_holds_under_fifty_concurrent_posts(server, client, astro, short_id, clips):
    """Issue 24 item 7: 50 POSTs at once against --max-queued 3 accept exactly 3 (the count and the
    insert are one transaction)."""
    import concurrent.futures

    with open(clips["long"], "rb") as fh:
        long_id = client.post("/v1/audio", files={"file": ("long.wav", fh)}).json()["id"]
    busy = client.post("/v1/renders", data={"avatar": "astro", "audio_id": long_id, "engine": "classic"}).json()
    wait_state(client, busy["id"], states=("running",))  # the runner is busy: nothing else leaves the queue
    assert not [j for j in client.get("/v1/renders").json()["renders"] if j["state"] == "queued"]

    def post(_):
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as c:
            return c.post("/v1/renders", data={"avatar": "astro", "audio_id": short_id, "engine": "classic"})

    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(post, range(50)))
    codes = [r.status_code for r in answers]
    try:
        assert codes.count(202) == MAX_QUEUED and codes.count(429) == 50 - MAX_QUEUED, codes
        assert all(r.headers["retry-after"] for r in answers if r.status_code == 429)
        queued = [j for j in client.get("/v1/renders").json()["renders"] if j["state"] == "queued"]
        assert len(queued) == MAX_QUEUED
    finally:
        for r in answers:
            if r.status_code == 202:
                client.delete(f"/v1/renders/{r.json()['id']}")
        client.delete(f"/v1/renders/{busy['id']}")
        wait_state(client, busy["id"], states=("cancelled", "done"))


def test_a_refused_voice_over_leaves_nothing_and_names_no_server_path(server, client, astro, clips):
    """Issue 24 item 10: a WAV of float samples with NaNs is refused (422), under the client's name,
    and nothing of it stays in uploads/."""
    import soundfile as sf

    x = np.sin(np.linspace(0, 400, 16000)).astype(np.float32)
    x[4000:4100] = np.nan
    bad = clips["dir"] / "nan.wav"
    sf.write(bad, x, 16000, subtype="FLOAT")
    uploads = server.home / "uploads"
    before = sorted(p.relative_to(uploads) for p in uploads.rglob("*") if p.is_file())
    for path, data, field in (("/v1/audio", {}, "file"), ("/v1/renders", {"avatar": "astro"}, "audio")):
        with open(bad, "rb") as fh:
            r = client.post(path, data=data, files={field: ("my voice.wav", fh)})
        msg = one_sentence(r, 422)
        assert "'my voice.wav'" in msg and "NaN" in msg, msg
        assert str(server.home) not in msg and "uploads" not in msg
    after = sorted(p.relative_to(uploads) for p in uploads.rglob("*") if p.is_file())
    assert after == before


def test_a_photo_uploaded_with_a_render_is_face_tracked_before_the_202(server, client, clips, short_id):
    """A photo without a face is a 422 under the client's name (no job, nothing left in uploads/); a
    photo with one is prepared before the 202 and renders from that cache."""
    from PIL import Image

    blank = clips["dir"] / "wall.png"
    Image.new("RGB", (320, 240), (128, 140, 150)).save(blank)
    uploads = server.home / "uploads"
    files_before = sorted(p.relative_to(uploads) for p in uploads.rglob("*") if p.is_file())
    jobs_before = len(client.get("/v1/renders", params={"limit": 500}).json()["renders"])
    with open(blank, "rb") as fh:
        r = client.post(
            "/v1/renders", data={"audio_id": short_id, "engine": "classic"}, files={"avatar_file": ("wall.png", fh)}
        )
    msg = one_sentence(r, 422)
    assert "'wall.png'" in msg and "no face" in msg, msg
    assert str(server.home) not in msg
    assert sorted(p.relative_to(uploads) for p in uploads.rglob("*") if p.is_file()) == files_before
    assert len(client.get("/v1/renders", params={"limit": 500}).json()["renders"]) == jobs_before
    caches = server.home / "cache" / "avatars"
    made_before = set(caches.iterdir()) if caches.is_dir() else set()
    with open(DEMO_AVATAR, "rb") as fh:
        r = client.post(
            "/v1/renders", data={"audio_id": short_id, "engine": "classic"}, files={"avatar_file": ("me.png", fh)}
        )
    assert r.status_code == 202, r.text
    made = set(caches.iterdir()) - made_before
    assert len(made) == 1 and (next(iter(made)) / "meta.json").is_file()  # prepared when the 202 came
    assert wait_state(client, r.json()["id"])["result"]["frames"] == 40

    # a video is looked at too: one without a face in its sampled frames is refused before the 202
    from test_avatar import make_video

    dark = make_video(clips["dir"] / "dark.mp4", seconds=1.0, blank=range(0, 30))
    files_before = sorted(p.relative_to(uploads) for p in uploads.rglob("*") if p.is_file())
    with open(dark, "rb") as fh:
        r = client.post(
            "/v1/renders", data={"audio_id": short_id, "engine": "classic"}, files={"avatar_file": ("night.mp4", fh)}
        )
    msg = one_sentence(r, 422)
    assert msg.startswith("'night.mp4': no face found in 8 frame(s) sampled across the video"), msg
    assert sorted(p.relative_to(uploads) for p in uploads.rglob("*") if p.is_file()) == files_before
    assert len(client.get("/v1/renders", params={"limit": 500}).json()["renders"]) == jobs_before + 1
    face = make_video(clips["dir"] / "face.mp4", seconds=1.0, blank=())
    with open(face, "rb") as fh:
        r = client.post(
            "/v1/renders", data={"audio_id": short_id, "engine": "classic"}, files={"avatar_file": ("me.mp4", fh)}
        )
    assert r.status_code == 202, r.text
    assert wait_state(client, r.json()["id"])["state"] == "done"


def test_what_cannot_run_here_is_refused_before_the_202(client, astro, short_id):
    """Issue 27 item 8: an engine, encoder or device this server cannot use, and a frame range outside
    the clip (40 frames), are 422 with the reason; no job is made."""
    from studio.core.engines.selection import engine_status
    from studio.core.media.encoders import probe_nvenc

    before = len(client.get("/v1/renders").json()["renders"])
    base = {"avatar": "astro", "audio_id": short_id, "engine": "classic"}
    if not engine_status()["musetalk"].ready:
        msg = one_sentence(client.post("/v1/renders", data={**base, "engine": "musetalk"}), 422)
        assert msg.startswith("engine=musetalk cannot run here: ") and "studio models import" in msg
    if not probe_nvenc()[0]:
        msg = one_sentence(client.post("/v1/renders", data={**base, "encoder": "nvenc"}), 422)
        assert msg.startswith("encoder=nvenc cannot run here: ")
    assert "cuda:7" in one_sentence(client.post("/v1/renders", data={**base, "device": "cuda:7"}), 422)
    for start, end in ((0, 41), (40, None), (45, 50)):
        data = {**base, "frame_start": start, **({"frame_end": end} if end else {})}
        msg = one_sentence(client.post("/v1/renders", data=data), 422)  # form fields outside the clip (issue 51)
        assert "outside the clip, which has 40 frames" in msg, msg
    assert len(client.get("/v1/renders").json()["renders"]) == before
    ok = client.post("/v1/renders", data={**base, "frame_start": 10, "frame_end": 40})  # up to the end: fine
    assert ok.status_code == 202 and ok.json()["frame_range"] == [10, 40]
    assert wait_state(client, ok.json()["id"])["result"]["frames"] == 30


def test_the_queue_is_shared_with_other_processes(server, client, astro, clips):
    """A job added to the data folder's jobs.sqlite by another process (the window) shows up and runs."""
    from studio.core.settings import RenderSettings
    from studio.core.store.jobs import JobStore
    from studio.service.queue import QueueService
    from studio.service.request import RenderRequest

    qs = QueueService(store=JobStore(server.home / "jobs.sqlite"))
    job = qs.add(
        RenderRequest(
            "astro", str(clips["short"]), str(clips["dir"] / "from-window.mp4"), RenderSettings(engine="classic")
        )
    )
    assert job.id in {j["id"] for j in client.get("/v1/renders").json()["renders"]}
    assert wait_state(client, job.id)["state"] == "done"
    assert len(mp4_frames(clips["dir"] / "from-window.mp4")) == 40


def test_render_command_line_on_the_server(server, client, astro, clips):
    out = clips["dir"] / "remote.mp4"
    env = dict(os.environ, STUDIO_SERVER_TOKEN=TOKEN, PYTHONPATH=str(ROOT))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "studio",
            "render",
            "--server",
            server.url,
            "--avatar",
            "astro",
            "--audio",
            str(clips["short"]),
            "-o",
            str(out),
            "--engine",
            "classic",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"wrote {out}: 40 frames (") and "classic" in r.stdout
    assert len(mp4_frames(out)) == 40
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "studio",
            "render",
            "--server",
            server.url,
            "--avatar",
            "nobody",
            "--audio",
            str(clips["short"]),
            "-o",
            str(clips["dir"] / "x.mp4"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert bad.returncode == 2 and "has no avatar 'nobody'" in bad.stderr and bad.stderr.count("\n") == 1
    assert not (clips["dir"] / "x.mp4").exists()


@pytest.mark.skipif(not __import__("shutil").which("espeak-ng"), reason="espeak-ng is not installed")
def test_generate_speaks_text(client, astro, clips):
    r = client.post("/generate", data={"avatar": "astro", "text": "Good evening.", "engine": "classic"})
    assert r.status_code == 200 and r.headers["content-type"] == "video/mp4"
    path = clips["dir"] / "spoken.mp4"
    path.write_bytes(r.content)
    assert 10 < len(mp4_frames(path)) < 100


def test_loopback_needs_no_token_and_allow_paths_opens_only_the_folders_listed(tmp_path, clips):
    """Issue 24 item 11: with --allow-paths DIR,DIR a client names files under those folders only:
    /etc, '..' and a link out of an allowed folder are 403 (links and '..' are resolved first)."""
    import shutil

    inside, out_dir, outside = tmp_path / "in", tmp_path / "out", tmp_path / "elsewhere"
    for d in (inside, out_dir, outside):
        d.mkdir()
    shutil.copy(DEMO_AVATAR, inside / "face.png")
    shutil.copy(clips["short"], inside / "voice.wav")
    shutil.copy(clips["short"], outside / "secret.wav")
    (inside / "link.wav").symlink_to(outside / "secret.wav")
    (inside / "escape").symlink_to(outside)
    s = Server(tmp_path / "home", "--allow-paths", f"{inside},{out_dir}")
    try:
        with httpx.Client(base_url=s.url, timeout=120) as c:
            assert c.get("/v1/health").status_code == 200  # loopback, no token: open
            base = {
                "avatar_path": str(inside / "face.png"),
                "audio_path": str(inside / "voice.wav"),
                "engine": "classic",
            }
            for field, path in (
                ("output", "/etc/studio-test.mp4"),
                ("output", str(out_dir / ".." / "elsewhere" / "x.mp4")),
                ("output", str(inside / "escape" / "x.mp4")),
                ("audio_path", str(inside / "link.wav")),
                ("audio_path", str(outside / "secret.wav")),
                ("avatar_path", "/etc/passwd"),
            ):
                msg = one_sentence(c.post("/v1/renders", data={**base, field: path}), 403)
                assert f"{field} {path} is outside the folders this server opens" in msg
            assert list(outside.iterdir()) == [outside / "secret.wav"]
            out = out_dir / "named-by-client.mp4"
            r = c.post("/v1/renders", data={**base, "output": str(out)})
            assert r.status_code == 202, r.text
            assert wait_state(c, r.json()["id"])["state"] == "done"
            assert len(mp4_frames(out)) == 40
            assert "no such file" in one_sentence(
                c.post("/v1/renders", data={"avatar_path": str(inside / "none.png"), "text": "hi"}), 422
            )
    finally:
        s.stop()
    bad = subprocess.run(
        [sys.executable, "-m", "studio", "serve", "--port", "1", "--allow-paths", str(tmp_path / "nowhere")],
        env=dict(os.environ, STUDIO_HOME=str(tmp_path / "home")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no such folder" in bad.stderr


def test_generate_cancels_its_job_when_the_client_goes_away(server, client, astro, clips):
    with open(clips["long"], "rb") as fh:
        long_id = client.post("/v1/audio", files={"file": ("long.wav", fh)}).json()["id"]
    before = {j["id"] for j in client.get("/v1/renders").json()["renders"]}
    with server.hold:  # the render cannot finish before the client goes: only the cancel ends it
        with pytest.raises(httpx.ReadTimeout):
            client.post("/generate", data={"avatar": "astro", "audio_id": long_id, "engine": "classic"}, timeout=1.0)
        deadline = time.monotonic() + 120  # the server may still be reading the upload when the client goes
        while not (new := {j["id"] for j in client.get("/v1/renders").json()["renders"]} - before):
            assert time.monotonic() < deadline, "the dropped /generate made no job"
            time.sleep(0.05)
        (job_id,) = new
        job = wait_state(client, job_id)
    assert job["state"] == "cancelled"
    assert "cancelled" in one_sentence(client.get(job["links"]["video"]), 409)
