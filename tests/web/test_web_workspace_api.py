"""What the page as a workspace needs of ``studio serve`` (issue 47), over HTTP against a real server:
a job's side files by URL (no server path in any answer), the media cookie (the browser streams by
URL with HTTP Range; GET only; forged or expired cookies refused), one event stream for the queue,
ETag/304 and gzip, and voice-overs listed, renamed, played and removed with the jobs' ownership."""

from __future__ import annotations

import json
import time

import pytest
from conftest import DEMO_AVATAR, speech_pause_speech
from page_server import AUTH, READ, TOKEN, client, server, upload  # noqa: F401 - fixtures

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")


@pytest.fixture(scope="module")
def voice(client, tmp_path_factory):
    return upload(client, speech_pause_speech(tmp_path_factory.mktemp("page_audio") / "take 1.wav", 0.6, 0.4, 0.6))


def finished(client, job_id: int) -> dict:
    """The job once final, waiting on its own event stream (no polling)."""
    with client.stream("GET", f"/v1/renders/{job_id}/events") as r:
        for line in r.iter_lines():
            if line.startswith("data:") and json.loads(line[5:]).get("state") in ("done", "failed", "cancelled"):
                break
    return client.get(f"/v1/renders/{job_id}").json()


@pytest.fixture(scope="module")
def job(client, voice):
    form = {
        "avatar": "astro",
        "audio_id": voice["id"],
        "captions": "srt",
        "script": "Hello there. Good evening.",
        "otio": "true",
    }
    r = client.post("/v1/renders", data=form)
    assert r.status_code == 202, r.text
    j = finished(client, r.json()["id"])
    assert j["state"] == "done", j
    return j


def test_side_files_are_served_by_name_and_no_path_leaks(client, server, job):
    text = json.dumps(job)
    assert str(server.home) not in text and '"/' not in text.replace('"/v1/', "")  # no server path anywhere
    kinds = {f["kind"]: f for f in job["files"]}
    assert set(kinds) == {"captions", "otio", "job"}, kinds
    assert job["result"]["files"] == {"captions": kinds["captions"]["name"], "otio": kinds["otio"]["name"]}
    srt = client.get(kinds["captions"]["url"])
    assert srt.status_code == 200 and srt.headers["content-type"].startswith("application/x-subrip")
    assert int(srt.headers["content-length"]) == kinds["captions"]["bytes"]
    assert "attachment" in srt.headers["content-disposition"] and "sandbox" in srt.headers["content-security-policy"]
    from pycaption import SRTReader

    captions = SRTReader().read(srt.text)
    cues = captions.get_captions(captions.get_languages()[0])
    assert " ".join(c.get_text() for c in cues) == "Hello there. Good evening."  # the script, timed
    import opentimelineio as otio

    timeline = otio.adapters.read_from_string(client.get(kinds["otio"]["url"]).text, "otio_json")
    assert timeline.duration().to_frames() == job["frames"]
    part = client.get(kinds["captions"]["url"], headers={"Range": "bytes=0-9"})
    assert part.status_code == 206 and part.content == srt.content[:10]
    as_json = client.get(kinds["job"]["url"]).json()
    assert as_json["id"] == job["id"] and as_json["files"] == job["files"]
    for bad, status in (("nope.srt", 404), ("..%2Fjobs.sqlite", 404), ("a/b", 404)):
        assert client.get(f"/v1/renders/{job['id']}/files/{bad}").status_code in (status, 422)
    assert httpx.get(f"{server.url}{kinds['captions']['url']}").status_code == 401  # the video's authorisation


def test_the_media_cookie_streams_by_url_and_changes_nothing(client, server, job):
    video = f"{server.url}{job['links']['video']}"
    assert httpx.get(video).status_code == 401
    r = client.post("/v1/session")
    assert r.status_code == 200 and r.json()["expires_in_s"] == 3600
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict") and TOKEN not in cookie
    value = r.cookies["studio_media"]
    jar = {"studio_media": value}
    part = httpx.get(video, cookies=jar, headers={"Range": "bytes=0-999"})
    assert part.status_code == 206 and len(part.content) == 1000 and part.headers["content-type"] == "video/mp4"
    assert httpx.get(f"{server.url}/v1/renders", cookies=jar).status_code == 200
    # GET only: a forged request with the cookie changes nothing
    assert httpx.post(f"{server.url}/v1/renders/{job['id']}/retry", cookies=jar).status_code == 401
    assert httpx.delete(f"{server.url}/v1/renders/{job['id']}", cookies=jar).status_code == 401
    for forged in (value[:-2] + "xx", "a.9999999999.AAAA", "a." + value.split(".", 1)[1].replace("1", "2", 1)):
        assert httpx.get(video, cookies={"studio_media": forged}).status_code == 401
    # the read token gets one too, which still only reads
    read = httpx.post(f"{server.url}/v1/session", headers={"Authorization": f"Bearer {READ}"})
    assert read.status_code == 200
    assert httpx.get(video, cookies={"studio_media": read.cookies["studio_media"]}).status_code == 200


def test_an_expired_cookie_is_refused():
    from studio.api.clients import ADMIN
    from studio.api.media import MediaSessions

    sessions = MediaSessions(ttl_s=60)
    value, _ = sessions.issue(ADMIN, now=1000.0)
    assert sessions.verify(value, now=1059.0) is ADMIN and sessions.verify(value, now=1061.0) is None
    assert MediaSessions().verify(value, now=1000.0) is None  # another process's key (a restart)


def test_one_stream_tells_the_queue_of_every_job(client, server, voice):
    with client.stream("GET", "/v1/events") as r:
        lines = r.iter_lines()
        assert next(lines) == "event: hello"
        made = client.post("/v1/renders", data={"avatar": "astro", "audio_id": voice["id"], "check": "false"}).json()
        seen = []
        for line in lines:
            if line.startswith("data:"):
                data = json.loads(line[5:])
                if data.get("id") == made["id"] and "state" in data:
                    seen.append(data["state"])
                    if data["state"] == "done":
                        break
    assert seen[-1] == "done" and "running" in seen, seen


def test_lists_and_the_document_are_compressed_and_answer_304(client, server):
    doc = httpx.get(f"{server.url}/openapi.json", headers={"Accept-Encoding": "gzip"})
    assert doc.headers["content-encoding"] == "gzip" and int(doc.headers["content-length"]) < 40_000
    tag = doc.headers["etag"]
    again = httpx.get(f"{server.url}/openapi.json", headers={"If-None-Match": tag})
    assert again.status_code == 304 and again.content == b""
    page = client.get("/v1/renders?limit=30")
    same = client.get("/v1/renders?limit=30", headers={"If-None-Match": page.headers["etag"]})
    assert same.status_code == 304
    index = httpx.get(f"{server.url}/", headers={"Accept-Encoding": "gzip"})
    asset = next(p for p in index.text.split('"') if p.startswith("/assets/") and p.endswith(".js"))
    js = httpx.get(f"{server.url}{asset}", headers={"Accept-Encoding": "gzip"})
    assert js.headers["content-encoding"] == "gzip" and int(js.headers["content-length"]) < 30_000


def test_voice_overs_are_listed_renamed_played_and_removed(client, server, tmp_path):
    wav = speech_pause_speech(tmp_path / "own.wav", 0.3, 0.2, 0.3)
    made = client.post("/v1/audio", files={"file": ("own.wav", wav.read_bytes())}).json()
    listed = client.get("/v1/audio").json()["voiceovers"]
    assert listed[0]["id"] == made["id"] and listed[0]["filename"] == "own.wav"
    renamed = client.patch(f"/v1/audio/{made['id']}", json={"filename": "Intro take 2"})
    assert renamed.status_code == 200 and renamed.json()["filename"] == "Intro take 2"
    assert client.get(f"/v1/audio/{made['id']}").json()["filename"] == "Intro take 2"
    sound = client.get(f"/v1/audio/{made['id']}/file", headers={"Range": "bytes=0-3"})
    assert sound.status_code == 206 and sound.content == b"RIFF"
    assert client.patch(f"/v1/audio/{made['id']}", json={"filename": ""}).status_code == 422
    gone = client.delete(f"/v1/audio/{made['id']}")
    assert gone.status_code == 200 and gone.json()["deleted"] is True
    assert made["id"] not in {v["id"] for v in client.get("/v1/audio").json()["voiceovers"]}
    assert client.delete(f"/v1/audio/{made['id']}").status_code == 404
    read = {"Authorization": f"Bearer {READ}"}
    assert httpx.get(f"{server.url}/v1/audio", headers=read).status_code == 200
    assert httpx.delete(f"{server.url}/v1/audio/0123456789abcdef", headers=read).status_code == 403


def test_the_same_photo_twice_offers_the_avatar_it_made(client):
    data = DEMO_AVATAR.read_bytes()
    first = client.post("/v1/avatars", data={"name": "dup-a"}, files={"file": ("a.png", data)})
    assert first.status_code == 201, first.text
    t0 = time.monotonic()
    second = client.post("/v1/avatars", data={"name": "dup-b"}, files={"file": ("b.png", data)})
    assert second.status_code == 409 and second.headers["x-studio-avatar"] == "dup-a", second.text
    assert "already avatar 'dup-a'" in second.json()["error"] and time.monotonic() - t0 < 30
    names = {a["name"] for a in client.get("/v1/avatars").json()["avatars"]}
    assert "dup-b" not in names
    copy = client.post("/v1/avatars", data={"name": "dup-b", "force": "true"}, files={"file": ("b.png", data)})
    assert copy.status_code == 201


def test_an_avatar_is_renamed_once_and_a_taken_or_bad_name_is_refused(client, server):
    made = client.post(
        "/v1/avatars", data={"name": "ren-a", "force": "true"}, files={"file": ("r.png", DEMO_AVATAR.read_bytes())}
    )
    assert made.status_code == 201, made.text
    r = client.patch("/v1/avatars/ren-a", json={"name": "ren-b"})
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "ren-b" and r.json()["thumbnail"] == "/v1/avatars/ren-b/thumbnail"
    assert r.json()["frames"] == made.json()["frames"] and r.json()["source"] == made.json()["source"]
    names = {a["name"] for a in client.get("/v1/avatars").json()["avatars"]}
    assert "ren-b" in names and "ren-a" not in names
    assert client.get("/v1/avatars/ren-b/thumbnail").content[:8] == b"\x89PNG\r\n\x1a\n"
    meta = json.loads((server.home / "avatars" / "ren-b" / "meta.json").read_text())
    assert meta["name"] == "ren-b" and not (server.home / "avatars" / "ren-a").exists()
    # refused, one sentence each, nothing changed
    taken = client.patch("/v1/avatars/ren-b", json={"name": "astro"})
    assert taken.status_code == 409 and taken.json()["error"] == (
        "an avatar named 'astro' already exists; pick another name or remove that one first"
    )
    bad = client.patch("/v1/avatars/ren-b", json={"name": "../x"})
    assert bad.status_code == 422 and "is not a valid avatar name" in bad.json()["error"]
    assert client.patch("/v1/avatars/ren-a", json={"name": "ren-c"}).status_code == 404
    assert client.patch("/v1/avatars/ren-b", json={}).status_code == 422
    read = httpx.patch(
        f"{server.url}/v1/avatars/ren-b", json={"name": "ren-c"}, headers={"Authorization": f"Bearer {READ}"}
    )
    assert read.status_code == 403
    assert {a["name"] for a in client.get("/v1/avatars").json()["avatars"]} == names
    # a job not yet run names it (a draft another process added, as the window does): refused until it goes
    from studio.core.settings import RenderSettings
    from studio.core.store.jobs import JobStore
    from studio.service.queue import QueueService
    from studio.service.request import RenderRequest

    qs = QueueService(store=JobStore(server.home / "jobs.sqlite"))
    req = RenderRequest("ren-b", str(server.home / "x.wav"), str(server.home / "ren.mp4"))
    draft = qs.add(req.with_(settings=RenderSettings(engine="classic")), state="draft")
    held = client.patch("/v1/avatars/ren-b", json={"name": "ren-c"})
    assert held.status_code == 409 and held.json()["error"] == (
        f"avatar 'ren-b' is named by render job {draft.id}, which has not finished; "
        "rename it once that job is done or cancelled"
    )
    qs.remove(draft.id)
    assert client.patch("/v1/avatars/ren-b", json={"name": "ren-c"}).status_code == 200
    assert client.patch("/v1/avatars/ren-c", json={"name": "ren-b"}).json()["name"] == "ren-b"
    # a render by the new name works
    voice = speech_pause_speech(server.home / "ren.wav", 0.2, 0.1, 0.2)
    with open(voice, "rb") as fh:
        audio = client.post("/v1/audio", files={"file": ("ren.wav", fh)}).json()
    job = client.post("/v1/renders", data={"avatar": "ren-b", "audio_id": audio["id"], "check": "false"})
    assert job.status_code == 202, job.text
    done = finished(client, job.json()["id"])
    assert done["state"] == "done"
    # renamed after: the finished job keeps its video; it names the old name, so it has no frames
    assert client.patch("/v1/avatars/ren-b", json={"name": "ren-d"}).status_code == 200
    assert client.get(done["links"]["video"], headers={"Range": "bytes=0-7"}).status_code == 206
    frame = client.get(f"/v1/renders/{done['id']}/frame", params={"t": 0})
    assert frame.status_code == 410 and "no longer on the server" in frame.json()["error"]
    retry = client.post(f"/v1/renders/{done['id']}/retry")
    assert retry.status_code == 410 and "the avatar renamed or removed" in retry.json()["error"], retry.text
