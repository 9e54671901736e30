"""What the web page needs of ``studio serve``, over HTTP against a real server process: the page at
``/`` (no token, a Content-Security-Policy, cached assets, the API still guarded), the waveform on a
render's frame grid, text spoken into a stored voice-over, and the settings' groups in the document."""

from __future__ import annotations

import gzip

import pytest
from conftest import ROOT, speech_pause_speech
from page_server import AUTH, READ, TOKEN, client, server, upload  # noqa: F401 - fixtures

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

STATIC = ROOT / "studio" / "api" / "static"


@pytest.fixture(scope="module")
def voice(client, tmp_path_factory):
    return upload(client, speech_pause_speech(tmp_path_factory.mktemp("web_api_audio") / "v.wav", 1.0, 0.8, 1.0))


def test_the_page_is_served_without_a_token_with_a_csp(server):
    r = httpx.get(f"{server.url}/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    csp = r.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "http" not in csp  # nothing from another host, no inline script
    assert r.headers["cache-control"] == "no-cache" and r.headers["x-content-type-options"] == "nosniff"
    assert "<script>" not in r.text and TOKEN not in r.text  # no inline script, no secret
    assets = [p for p in r.text.split('"') if p.startswith("/assets/")]
    assert len(assets) == 2, assets
    total = len(gzip.compress(r.content))
    for a in assets:
        got = httpx.get(f"{server.url}{a}")
        assert got.status_code == 200 and "immutable" in got.headers["cache-control"]
        assert "content-security-policy" in got.headers
        assert got.content == (STATIC / a.lstrip("/")).read_bytes()
        total += len(gzip.compress(got.content))
    assert total < 500_000, f"the page is {total} bytes compressed"
    # the API behind it still needs the token; an unknown asset is a 404 of the API's kind
    assert httpx.get(f"{server.url}/v1/avatars").status_code == 401
    assert httpx.get(f"{server.url}/assets/../v1/avatars").status_code in (401, 404)
    missing = httpx.get(f"{server.url}/assets/nope.js")
    assert missing.status_code == 404
    # a POST to the page is not the page's: the guard answers it
    assert httpx.post(f"{server.url}/").status_code == 401


def test_waveform_on_the_render_grid(client, voice):
    w = client.get(f"/v1/audio/{voice['id']}/waveform", params={"avatar": "astro", "columns": 200}).json()
    # a photo renders at 25 fps: the same grid, frames and silences as the upload's analysis
    assert (w["fps"], w["rate"], w["timecode"]) == (25, "25", {"nominal": 25, "drop": 0})
    assert w["frames"] == voice["frames"] == len(w["rms"])
    assert w["silent_spans"] == voice["silent_spans"] and len(w["silent_spans"]) == 1
    a, b = w["silent_spans"][0]
    assert 22 <= a <= 27 and 42 <= b <= 47  # the 0.8 s pause from 1.0 s
    assert max(w["rms"][a:b]) < w["threshold"] < min(w["rms"][:20])
    assert 16 <= len(w["envelope"]["min"]) == len(w["envelope"]["max"]) <= 200
    assert min(w["envelope"]["min"]) < -0.1 and max(w["envelope"]["max"]) > 0.1
    # a higher threshold: more silence, as the render would mask it
    hi = client.get(f"/v1/audio/{voice['id']}/waveform", params={"threshold": 0.5, "min_silence": 1}).json()
    assert sum(e - s for s, e in hi["silent_spans"]) > b - a
    # 29.97: drop-frame timecode, more frames
    ntsc = client.get(f"/v1/audio/{voice['id']}/waveform", params={"fps": "29.97"}).json()
    assert ntsc["rate"] == "29.97" and ntsc["timecode"] == {"nominal": 30, "drop": 2}
    assert ntsc["frames"] == len(ntsc["rms"]) == -(-int(2.8 * 30000) // 1001)


@pytest.mark.parametrize(
    ("path", "params", "status", "starts"),
    [
        ("/v1/audio/0123456789abcdef/waveform", {}, 404, "no uploaded voice-over with id"),
        ("{voice}", {"avatar": "nobody"}, 404, "no avatar named 'nobody'"),
        ("{voice}", {"columns": 3}, 422, ""),
        ("{voice}", {"fps": "31"}, 422, ""),
        ("{voice}", {"thresold": 0.1}, 422, "unknown field 'thresold'"),
    ],
)
def test_waveform_refuses_in_one_sentence(client, voice, path, params, status, starts):
    url = f"/v1/audio/{voice['id']}/waveform" if path == "{voice}" else path
    r = client.get(url, params=params)
    assert r.status_code == status, r.text
    sentence = r.json()["error"]
    assert sentence.startswith(starts) and "\n" not in sentence and len(sentence) < 300


def test_text_is_spoken_into_a_voice_over(client):
    r = client.post("/v1/audio/speech", data={"text": "Good evening, and welcome."})  # Piper's default voice
    assert r.status_code == 201, r.text
    a = r.json()
    assert a["filename"] == "Good_evening,_and_welcome..wav" and 1.0 < a["duration_s"] < 5.0 and a["frames"] > 25
    again = client.post("/v1/audio/speech", data={"text": "Good evening, and welcome.", "voice": ""}).json()
    assert again["id"] == a["id"]  # the same speech is the same stored voice-over
    assert client.get(f"/v1/audio/{a['id']}/waveform").json()["frames"] == a["frames"]
    robot = client.post("/v1/audio/speech", data={"text": "Good evening, and welcome.", "voice": "en-us"})
    assert robot.status_code == 201 and robot.json()["id"] != a["id"]  # an espeak-ng voice still speaks
    bad = client.post("/v1/audio/speech", data={"text": "hi", "voice": "en us;rm"})
    assert bad.status_code == 422 and bad.json()["error"].startswith("there is no voice named"), bad.text
    assert client.post("/v1/audio/speech", data={"text": ""}).status_code == 422
    read = {"Authorization": f"Bearer {READ}"}
    assert client.post("/v1/audio/speech", data={"text": "hi"}, headers=read).status_code == 403


def test_settings_carry_their_group_for_the_page(server):
    from studio.core.settings import specs

    form = httpx.get(f"{server.url}/openapi.json").json()["components"]["schemas"]["RenderForm"]["properties"]
    grouped = {name for name, p in form.items() if "x-group" in p}
    assert grouped == {s.name for s in specs("http")}  # the inputs (avatar, audio, ...) carry none
    for s in specs("http"):
        assert form[s.name]["x-group"] == s.group
    assert form["device"]["x-auto-label"] == "auto" and form["loudness"]["x-auto-label"] == "off"
    assert form["check"]["x-ui-default"] is True and form["check"]["default"] is False
