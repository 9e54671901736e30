"""The API's contract against a real ``studio serve`` (127.0.0.1, classic engine): issue 40 and issue 33
items 12, 13, 19 and 20. Each test failed before its fix (noted per test)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from conftest import DEMO_AVATAR, speech_pause_speech
from served import ROOT, Server

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

BIG = "99999999999999999999999"  # past 64 bits


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("contract_home"), "--max-queued", "20")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def astro(client):
    with open(DEMO_AVATAR, "rb") as fh:
        r = client.post("/v1/avatars", data={"name": "astro"}, files={"file": ("astro.png", fh)})
    assert r.status_code == 201, r.text
    return "astro"


@pytest.fixture(scope="module")
def voice_id(client, tmp_path_factory):
    wav = speech_pause_speech(tmp_path_factory.mktemp("voice") / "v.wav", 0.6, 0.4, 0.6)
    with open(wav, "rb") as fh:
        r = client.post("/v1/audio", files={"file": ("v.wav", fh)})
    assert r.status_code == 201 and r.headers["location"] == f"/v1/audio/{r.json()['id']}"  # item 19: Location
    return r.json()["id"]


def sentence(r, status: int) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    text = r.json()["error"]
    assert text and "\n" not in text and "Traceback" not in text and "internal error" not in text
    return text


def test_numbers_past_64_bits_are_404_or_422(client, astro, voice_id):
    """Issue 33 item 13 / issue 40: before, these were 500 ``internal error (OverflowError)``."""
    for method, path in (
        ("GET", f"/v1/renders/{BIG}"),
        ("GET", f"/v1/renders/{BIG}/video"),
        ("GET", f"/v1/renders/{BIG}/events"),
        ("DELETE", f"/v1/renders/{BIG}"),
        ("POST", f"/v1/renders/-{BIG}{BIG[:8]}/retry"),
    ):
        assert "job_id" in sentence(client.request(method, path), 422), path
    assert "cursor" in sentence(client.get("/v1/renders", params={"cursor": BIG}), 422)
    assert client.get("/v1/renders", params={"cursor": "9" * 19}).status_code == 200  # past every id: page one
    frame = {"avatar": astro, "audio_id": voice_id}
    for t in ("inf", "nan", "-inf"):
        assert "'t'" in sentence(client.get("/v1/frame", params={**frame, "t": t}), 422)
    assert "past the end" in sentence(client.get("/v1/frame", params={**frame, "t": "1e308"}), 404)
    assert "outside the clip" in sentence(client.get("/v1/frame", params={**frame, "t": 99}), 404)
    r = client.post("/v1/renders", data={"avatar": astro, "audio_id": voice_id, "frame_start": BIG})
    assert "frame_start" in sentence(r, 422)
    r = client.post("/v1/renders", data={"avatar": astro, "audio_id": voice_id, "crf": BIG})
    assert "crf" in sentence(r, 422)


def test_the_cli_says_one_sentence_for_numbers_past_64_bits(tmp_path):
    """Issue 33 item 13: ``studio frame -t 1e308`` and ``studio queue show <23 digits>`` crashed."""
    env = dict(os.environ, STUDIO_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))
    wav = speech_pause_speech(tmp_path / "v.wav", 0.3, 0.2, 0.3)
    runs = (
        ["frame", "--avatar", str(DEMO_AVATAR), "--audio", str(wav), "-t", "1e308", "-o", str(tmp_path / "f.png")],
        ["queue", "show", BIG],
    )
    for args in runs:
        r = subprocess.run(
            [sys.executable, "-m", "studio", *args], env=env, capture_output=True, text=True, timeout=300
        )
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert not (tmp_path / "f.png").exists()


def test_405_names_every_method_of_the_path(client):
    """Issue 40: ``Allow`` named one route's method (``/v1/renders``: POST only, though GET exists)."""
    for path, methods in (
        ("/v1/renders", {"GET", "HEAD", "POST"}),
        ("/v1/renders/1", {"GET", "HEAD", "DELETE"}),
        ("/v1/avatars", {"GET", "HEAD", "POST"}),
        ("/v1/avatars/astro", {"PATCH", "DELETE"}),
    ):
        r = client.request("PUT", path)
        assert r.status_code == 405 and set(r.headers["allow"].split(", ")) == methods, (path, r.headers)
        assert "PUT is not allowed" in r.json()["error"]


def test_the_document_declares_what_the_server_sends(server, client, astro, voice_id):
    """Issue 33 item 19: no 403 for the read token, no 416/410, no 409 on /v1/audio, no 405, no Range,
    Retry-After, Location or webhooks in the document; /v1/frame said every parameter was optional."""
    doc = client.get("/openapi.json").json()
    ops = {op["operationId"]: (m, p, op) for p, item in doc["paths"].items() for m, op in item.items()}
    for op_id, (method, path, op) in ops.items():
        codes = set(op["responses"])
        assert "405" in codes and "Allow" in op["responses"]["405"]["headers"], op_id
        if method != "get" or path.endswith("/frame"):
            assert "403" in codes, op_id  # a read-only token
    video = ops["get_render_video"][2]
    assert {"206", "410", "416"} <= set(video["responses"])
    assert any(p["name"] == "Range" and p["in"] == "header" for p in video["parameters"])
    assert "409" in ops["upload_audio"][2]["responses"]
    create = ops["create_render"][2]["responses"]
    assert "Location" in create["202"]["headers"] and "Retry-After" in create["429"]["headers"]
    assert create["202"]["links"]["GetRender"] == {
        "operationId": "get_render",
        "parameters": {"job_id": "$response.body#/id"},
    }
    hooks = doc["webhooks"]
    assert {"render.done", "render.checked"} <= set(hooks)
    body = hooks["render.done"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["$ref"] == "#/components/schemas/Job"
    frame = {p["name"]: p for p in ops["get_frame"][2]["parameters"]}
    assert frame["avatar"]["required"] and frame["audio_id"]["required"] and frame["t"]["required"]
    assert "job" not in frame and "get_render_frame" in ops
    form = doc["components"]["schemas"]["RenderForm"]
    assert {"oneOf": [{"required": ["avatar"]}, {"required": ["avatar_file"]}, {"required": ["avatar_path"]}]} in form[
        "allOf"
    ]
    assert form["properties"]["frame_start"]["maximum"] == 2**63 - 1
    assert "anyOf" not in form["properties"]["avatar_file"]  # a form has no null

    r = client.post("/v1/renders", data={"avatar": astro, "audio_id": voice_id, "engine": "classic"})
    assert r.status_code == 202 and r.headers["location"] == f"/v1/renders/{r.json()['id']}"
    job = r.json()
    deadline = time.monotonic() + 120
    while (job := client.get(f"/v1/renders/{job['id']}").json())["state"] not in ("done", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    size = len(client.get(job["links"]["video"]).content)
    part = client.get(job["links"]["video"], headers={"Range": "bytes=0-99"})
    assert part.status_code == 206 and len(part.content) == 100
    past = client.get(job["links"]["video"], headers={"Range": f"bytes={size + 10}-"})
    assert "outside the video" in sentence(past, 416) and past.headers["content-range"] == f"bytes */{size}"
    assert client.get(job["links"]["video"], headers={"Range": "lines=1-2"}).status_code == 200  # ignored (RFC 9110)
    png = client.get(job["links"]["frame"])
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"


def test_settings_that_cannot_take_effect_are_refused(client, astro, voice_id):
    """Issue 33 item 20: on the classic engine MuseTalk's options were accepted and ignored, and an
    encoder with codec=vp9 was silently dropped."""
    base = {"avatar": astro, "audio_id": voice_id, "engine": "classic"}
    before = len(client.get("/v1/renders", params={"limit": 500}).json()["renders"])
    for extra, words in (
        ({"runtime": "tensorrt"}, "runtime=tensorrt is a setting of the musetalk engine"),
        ({"decoder": "sd-vae"}, "decoder=sd-vae is a setting of the musetalk engine"),
        ({"precision": "fp16"}, "precision=fp16"),
        ({"compile": "true"}, "compile=true"),
        ({"codec": "vp9", "encoder": "x264"}, "encoder=x264 chooses the H.264 encoder, and codec=vp9"),
    ):
        assert words in sentence(client.post("/v1/renders", data={**base, **extra}), 422), extra
    assert len(client.get("/v1/renders", params={"limit": 500}).json()["renders"]) == before  # nothing queued
    doc = client.get("/openapi.json").json()
    form = doc["components"]["schemas"]["RenderForm"]["properties"]
    assert form["runtime"]["enum"] == ["auto"] and form["decoder"]["enum"] == ["taesd"]  # what runs here


def test_generate_frees_its_key_after_a_dropped_connection_and_replays_say_so(server, client, astro, tmp_path):
    """Issue 33 items 12 and 20: after a dropped /generate every retry with its key answered 409
    "cancelled" for 24 h; a replay did not carry Idempotent-Replayed."""
    wav = speech_pause_speech(tmp_path / "long.wav", 3.0, 0.4, 3.0)
    key = "story-4711-take-1"
    with open(wav, "rb") as fh:
        data = fh.read()

    def post(timeout):
        return httpx.post(
            f"{str(client.base_url).rstrip('/')}/generate",
            data={"avatar": astro, "engine": "classic"},
            files={"audio": ("long.wav", data)},
            headers={"Idempotency-Key": key},
            timeout=timeout,
        )

    with server.hold:  # held: it cannot finish before the client goes
        with pytest.raises(httpx.ReadTimeout):
            post(0.6)  # the client goes away while it renders
        deadline = time.monotonic() + 120
        while not any(j["state"] == "cancelled" for j in client.get("/v1/renders").json()["renders"]):
            assert time.monotonic() < deadline, "the dropped /generate was never cancelled"
            time.sleep(0.2)
    again = post(300)
    assert again.status_code == 200 and again.headers["content-type"] == "video/mp4", again.text[:200]
    assert "idempotent-replayed" not in again.headers  # it rendered: a new job
    replay = post(300)
    assert replay.status_code == 200 and replay.headers["idempotent-replayed"] == "true"
    assert replay.headers["x-studio-job"] == again.headers["x-studio-job"] and replay.content == again.content


def test_every_route_says_its_summary_in_its_docstring(tmp_path, monkeypatch):
    """A route's OpenAPI summary is its function's docstring (``studio.api.route.Route``): every router
    uses Route (without it FastAPI makes up "Get Audio" and repeats the docstring as the description),
    and a docstring's later paragraphs are the description."""
    import importlib

    from fastapi.routing import APIRoute

    from studio.api.route import Route, docstring_parts

    monkeypatch.setenv("STUDIO_HOME", str(tmp_path))
    from studio.api.app import create_app

    ops = {op["operationId"]: op for item in create_app().openapi()["paths"].values() for op in item.values()}
    names = sorted(p.stem for p in (ROOT / "studio/api/routers").glob("*.py") if p.stem != "__init__")
    routes = [r for n in names for r in importlib.import_module(f"studio.api.routers.{n}").router.routes]
    api_routes = [r for r in routes if isinstance(r, APIRoute)]
    assert len(api_routes) == len(ops) >= 40
    for route in api_routes:
        assert isinstance(route, Route), route.name
        summary, _ = docstring_parts(route.endpoint)
        assert summary and ops[route.name]["summary"] == summary, route.name
        assert "description" not in ops[route.name], route.name  # one paragraph each: no description

    def two_paragraphs():
        """Say it
        on two lines.

        Then more."""

    route = Route("/x", two_paragraphs, methods=["GET"])
    assert (route.summary, route.description) == ("Say it on two lines.", "Then more.")
    named = Route("/x", two_paragraphs, summary="Named", methods=["GET"])
    assert (named.summary, named.description) == ("Named", "Then more.")
