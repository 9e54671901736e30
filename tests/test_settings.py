"""Every render setting, declared once (``studio.core.settings.SCHEMA``), is offered by every face it is
declared for: ``studio render`` / ``queue add`` / ``frame`` / ``demo``, the HTTP form of ``POST /v1/renders``
and ``POST /generate`` (from a real server's OpenAPI document), the window's Render panel and timeline, the
job store, and the server client's scrub. Then one test per bug the hand-written faces shipped (issue 25):
each fails on the code before the schema.
"""

from __future__ import annotations

import json
import os

import httpx
import numpy as np
import pytest
import soundfile as sf
from conftest import DEMO_AVATAR, prepare_demo_avatar, speechlike
from served import Server

from studio.core.settings import SCHEMA, RenderSettings, Spec, specs

RATE = 16_000
TOKEN = "settings-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def window_default(spec: Spec):
    """What the window starts with: the schema's default, or the window's own (``ui_default``)."""
    return spec.default if spec.ui_default is None else spec.ui_default


def other_value(spec: Spec, face: str = ""):
    """A valid value of ``spec`` that is not the default ``face`` starts with (so a face that drops
    it is caught)."""
    if spec.kind is bool:
        return not (window_default(spec) if face == "ui" else spec.default)
    if spec.choices:
        return next(c for c in reversed(spec.choices) if c != spec.default)
    if spec.kind is str:
        return spec.example or "cpu"  # device: None (auto) by default; canvas: 1280x720 ...
    if spec.default is None:  # an optional number (loudness: off by default)
        return (spec.minimum + spec.maximum) / 2
    if spec.kind is int:
        v = spec.default + 1
        return v if spec.maximum is None or v <= spec.maximum else spec.default - 1
    v = spec.default * 2 if spec.default else 0.5
    return v if spec.maximum is None or v <= spec.maximum else (spec.default + (spec.minimum or 0)) / 2


def non_default(face: str, groups=None) -> dict:
    return {s.name: other_value(s, face) for s in specs(face, groups)}


def test_the_schema_declares_what_every_face_needs():
    assert list(SCHEMA) == [f for f in RenderSettings.__dataclass_fields__]
    for s in SCHEMA.values():
        assert s.help and s.label and s.group in ("engine", "silence", "encode", "output"), s.name
        assert s.choices is None or s.default in s.choices, s.name
        assert s.problem(s.default) is None and s.problem(other_value(s)) is None, s.name
        assert other_value(s) != s.default, s.name
    # the settings every render face shows (preview_interval_s is the caller's, not the user's)
    shown = {s.name for s in specs("cli")}
    assert shown == {s.name for s in specs("http")} == {s.name for s in specs("job")}
    # the window's markers are its timeline's (EditorSession.markers_setting hands them to the render)
    assert {s.name for s in specs("ui")} == shown - {"markers"}
    assert {"engine", "decoder", "compile", "threshold", "min_silence", "crossfade", "crf"} <= shown
    assert set(RenderSettings().frame_settings()) == {s.name for s in specs("job", ("engine", "silence"))}


# --- the command line --------------------------------------------------------------------------


def _command_line(spec: Spec, value) -> list[str]:
    if spec.name == "script":  # the command line takes the script as a file
        import tempfile

        path = os.path.join(tempfile.mkdtemp(), "script.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(value)
        return [spec.option, path]
    if spec.kind is bool:
        return [spec.option if value else "--no-" + spec.option[2:]]
    return [spec.option, str(value)]


@pytest.mark.parametrize(
    "command, groups",
    [
        (["render", "--avatar", "a", "--audio", "v.wav", "-o", "o.mp4"], None),
        (["queue", "add", "--avatar", "a", "--audio", "v.wav", "-o", "o.mp4"], None),
        (["demo"], None),
        (["frame", "--avatar", "a", "--audio", "v.wav", "-t", "1", "-o", "f.png"], ("engine", "silence")),
    ],
    ids=["render", "queue add", "demo", "frame"],
)
def test_every_command_offers_every_setting(command, groups):
    from studio.cli import build_parser
    from studio.cli.render import settings_from_args as _settings

    want = non_default("cli", groups)
    argv = list(command)
    for name, value in want.items():
        argv += _command_line(SCHEMA[name], value)
    args = build_parser().parse_args(argv)
    got = _settings(args)
    assert {n: getattr(got, n) for n in want} == want
    assert _settings(build_parser().parse_args(command)) == RenderSettings()  # unset: the schema's defaults
    if groups is not None:  # a frame is not encoded: no encoder options
        with pytest.raises(SystemExit):
            build_parser().parse_args([*command, "--crf", "18"])


def test_a_bad_value_on_the_command_line_is_one_sentence_naming_the_setting(capsys):
    from studio.cli import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["render", "--avatar", "a", "--audio", "v.wav", "-o", "o.mp4", "--crossfade", "x"])
    assert exit_.value.code == 2 and "--crossfade" in capsys.readouterr().err


# --- the job store ------------------------------------------------------------------------------


def test_the_job_store_keeps_every_setting(tmp_path):
    from studio.core.store.jobs import JobStore
    from studio.service.queue import QueueService
    from studio.service.request import RenderRequest

    voice = tmp_path / "v.wav"
    sf.write(voice, speechlike(0.4, RATE), RATE, subtype="PCM_16")
    settings = RenderSettings(**non_default("job"))
    path = tmp_path / "jobs.sqlite"
    from studio.core.media.codecs import CODECS

    out = tmp_path / f"o{CODECS[settings.codec].suffix}"  # the extension follows the codec
    job = QueueService(store=JobStore(path)).add(RenderRequest("anna", str(voice), str(out), settings))
    again = QueueService(store=JobStore(path))  # a fresh process's view of the same file
    assert again.request(job.id).settings == settings
    stored = json.loads(json.dumps(again.get(job.id).settings))  # what the row holds, as JSON
    assert {n: stored[n] for n in SCHEMA if n in stored} == {n: getattr(settings, n) for n in stored if n in SCHEMA}
    assert {s.name for s in specs("job")} <= set(stored)


# --- the window ---------------------------------------------------------------------------------


def test_the_window_offers_every_setting(qtbot):
    pytest.importorskip("PySide6")
    from PySide6.QtWidgets import QCheckBox, QComboBox, QWidget

    from studio.ui.model import EditorSession
    from studio.ui.render_panel import RenderPanel
    from studio.ui.timeline import TimelineView

    session = EditorSession()  # the window's one owner of the settings: both views edit it
    panel = RenderPanel(session)
    timeline = TimelineView(session)
    qtbot.addWidget(panel)
    qtbot.addWidget(timeline)
    want = non_default("ui")
    from studio.ui.speech import SpeechBox

    library_box = SpeechBox()  # the Library's script box: the voice-over's text, the script setting's view
    qtbot.addWidget(library_box)
    for spec in specs("ui"):
        w = next(
            (v.findChild(QWidget, f"setting_{spec.name}") for v in (panel, timeline, library_box)
             if v.findChild(QWidget, f"setting_{spec.name}") is not None),
            None,
        )  # fmt: skip
        assert w is not None, f"the window has no widget for {spec.name}"
        if spec.name == "script":  # free text: its box, not a schema widget (main_window keeps it in the session)
            continue
        if isinstance(w, QComboBox):
            # the values it offers (the delivery's: its key, under its full name)
            items = [w.itemText(i) if w.itemData(i) is None else w.itemData(i) for i in range(w.count())]
            shown = spec.auto_label if spec.optional else str(spec.default)
            assert (items == list(spec.choices)) if spec.choices else (shown in items), spec.name
        elif isinstance(w, QCheckBox):
            assert w.isChecked() == window_default(spec), spec.name
        else:  # a spin box: the schema's range (the threshold's log plot starts above 0)
            assert w.maximum() == spec.maximum and w.minimum() >= (spec.minimum or 0), spec.name
            assert w.value() == pytest.approx(spec.default), spec.name
    panel.fields.set_values({n: v for n, v in want.items() if n in panel.fields})
    timeline.threshold_box.setValue(want["threshold"])
    timeline.min_run_box.setValue(want["min_silence"])
    session.set("script", want["script"])  # what the window does as the Library's script box changes
    got = session.request("anna", "take.wav").settings  # what Render now queues
    assert panel.render_settings() == got
    assert {n: getattr(got, n) for n in want} == pytest.approx(want)


# --- the server: its OpenAPI document, and the client's scrub -----------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("settings_served"), "--token", TOKEN, token=TOKEN)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=180) as c:
        yield c


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    """Quiet speech (RMS between the default threshold 0.008 and 0.03), loud speech, silence, loud speech:
    the speech edges move with the threshold."""
    path = tmp_path_factory.mktemp("voice") / "voice.wav"
    x = np.concatenate(
        [
            0.1 * speechlike(0.4, RATE, 1),  # frames 0-9: speech at 0.008, silent at 0.03
            speechlike(0.6, RATE, 2),  # 10-24
            np.zeros(int(0.4 * RATE), np.float32),  # 25-34
            speechlike(0.6, RATE, 3),  # 35-49
        ]
    )
    sf.write(path, x.astype(np.float32), RATE, subtype="FLOAT")
    return path


@pytest.fixture(scope="module")
def astro(tmp_path_factory):
    return prepare_demo_avatar(tmp_path_factory.mktemp("settings_home"))


@pytest.fixture(scope="module")
def on_server(http):
    with open(DEMO_AVATAR, "rb") as fh:
        r = http.post("/v1/avatars", data={"name": "astro"}, files={"file": ("astro.png", fh)})
    assert r.status_code == 201, r.text
    return "astro"


def test_the_http_forms_offer_every_setting(server):
    doc = httpx.get(f"{server.url}/openapi.json").json()
    schemas = doc["components"]["schemas"]

    def form(path: str) -> dict:
        body = doc["paths"][path]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
        return schemas[body["$ref"].rsplit("/", 1)[1]]["properties"]

    for path in ("/v1/renders", "/generate"):
        fields = form(path)
        for spec in specs("http"):
            f = fields.get(spec.name)
            assert f is not None, f"{path} has no field {spec.name}"
            options = [f, *f.get("anyOf", [])]
            if spec.choices:  # the choices this server runs (its default always), in the schema's order
                enum = next(o["enum"] for o in options if "enum" in o)
                assert spec.default in enum and enum == [c for c in spec.choices if c in enum], (path, spec.name)
            if spec.maximum is not None:
                assert any(o.get("maximum") == spec.maximum for o in options), (path, spec.name)
            assert f.get("default") == spec.default, (path, spec.name)
    frame = {p["name"] for p in doc["paths"]["/v1/frame"]["get"]["parameters"]}
    assert {s.name for s in specs("http", ("engine", "silence"))} - {"device"} <= frame  # every frame setting


def test_compile_and_crossfade_over_http_reach_the_job(http, on_server, voice):
    """Bugs: ``compile`` was no field of the form (dropped: a render on a server never compiled), and
    ``crossfade`` could not be set over HTTP."""
    with open(voice, "rb") as fh:
        audio_id = http.post("/v1/audio", files={"file": ("voice.wav", fh)}).json()["id"]
    form = {"avatar": on_server, "audio_id": audio_id, "engine": "classic", "compile": "true", "crossfade": "0"}
    refused = http.post("/v1/renders", data=dict(form, preset="ultrafast"))  # issue 33 item 20: no silent no-op
    assert refused.status_code == 422 and "compile=true is a setting of the musetalk engine" in refused.json()["error"]
    r = http.post("/v1/renders", data=dict(form, preset="ultrafast", compile="false"))
    assert r.status_code == 202, r.text
    job = http.get(f"/v1/renders/{r.json()['id']}").json()
    assert job["settings"]["compile"] is False and job["settings"]["crossfade"] == 0


def test_a_scrub_on_a_server_sends_every_frame_setting_and_shows_its_frame(server, on_server, astro, voice):
    """Bug: a scrub on a server sent only engine, threshold and min_silence: the frame shown for an
    SD-VAE job was a TAESD frame, and the crossfade was the default's."""
    from studio.core.render.renderer import Renderer
    from studio.service.client import StudioClient
    from studio.service.remote import RemoteFrames

    sent: list[httpx.URL] = []

    class Recording(httpx.HTTPTransport):  # the real transport; it notes what went out
        def handle_request(self, request):
            sent.append(request.url)
            return super().handle_request(request)

    settings = RenderSettings(engine="classic", decoder="sd-vae", crossfade=0, threshold=0.03, min_silence=2)
    with StudioClient(server.url, token=TOKEN, transport=Recording()) as c:
        frames = RemoteFrames(server.url, c)
        t = 10 / 25  # frame 10: the first speech frame at threshold 0.03
        image = frames.frame_at(on_server, str(voice), settings, t)
    (url,) = [u for u in sent if u.path == "/v1/frame"]
    params = dict(url.params)
    want = {k: v for k, v in settings.frame_settings().items() if k != "device"}
    assert set(want) <= set(params)
    assert {k: SCHEMA[k].parse(params[k]) for k in want} == want
    assert np.array_equal(image, Renderer(astro, voice, settings).frame_at(t))  # the server's frame is ours
    assert not np.array_equal(image, Renderer(astro, voice, settings.with_(crossfade=3)).frame_at(t))


# --- crossfade from the command line, and the classic engine's edges -----------------------------


def _decoded(path) -> list[np.ndarray]:
    import av

    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def test_crossfade_from_render_and_queue_add(astro, voice, tmp_path, monkeypatch):
    """Bug: ``--crossfade`` did not exist: ``studio render`` and ``studio queue add`` always faded 3 frames."""
    from studio.cli import main as cli_main
    from studio.core.avatars import library
    from studio.core.render.renderer import Renderer

    monkeypatch.setenv("STUDIO_HOME", str(astro.folder.parent.parent))  # where the fixture prepared it
    assert library.load(astro.name).folder == astro.folder
    lossless = RenderSettings(engine="classic", device="cpu", encoder="x264", crf=0, preset="ultrafast")
    out = tmp_path / "cli.mp4"
    argv = ["render", "--avatar", astro.name, "--audio", str(voice), "-o", str(out)]
    argv += ["--engine", "classic", "--device", "cpu", "--encoder", "x264", "--crf", "0", "--preset", "ultrafast"]
    assert cli_main([*argv, "--crossfade", "0"]) == 0
    Renderer(astro, voice, lossless.with_(crossfade=0)).render(tmp_path / "zero.mp4")
    Renderer(astro, voice, lossless).render(tmp_path / "three.mp4")
    got, zero, three = _decoded(out), _decoded(tmp_path / "zero.mp4"), _decoded(tmp_path / "three.mp4")
    assert len(got) == len(zero) == 50 and all(np.array_equal(a, b) for a, b in zip(got, zero))
    assert any(not np.array_equal(a, b) for a, b in zip(got, three))  # the setting changed the frames
    qargv = ["queue", "add", *argv[1:], "--crossfade", "0", "--draft"]
    assert cli_main(qargv) == 0
    from studio.service.queue import QueueService

    (job,) = QueueService().list()
    assert QueueService().request(job.id).settings.crossfade == 0


def test_the_classic_mouth_eases_at_the_renders_own_speech_edges(astro, voice):
    """Bug: the classic engine recomputed its speech edges at the default threshold and crossfade, so
    with the threshold moved its mouth eased in and out where the render did not crossfade."""
    from studio.core.render.composite import Compositor
    from studio.core.render.renderer import Renderer

    settings = RenderSettings(engine="classic", device="cpu", threshold=0.03)
    r = Renderer(astro, voice, settings)
    w = r.plan.weight
    assert w[:10].max() == 0 and 0 < w[10] < w[11] < 1  # at 0.03 the speech starts at frame 10
    assert Renderer(astro, voice, settings.with_(threshold=0.008)).plan.weight[10] == 1  # inside speech at 0.008
    engine = r.engine
    prepared = engine.prepare(r.avatar)
    engine.bind(engine.audio_features(r.wave))
    a = r.avatar
    comp = Compositor(a.frames, a.boxes, a.masks, device=engine.device)
    k = np.array([10])
    ai = r.plan.avatar_idx[k]

    def composed(weight):
        face = engine.generate(prepared, ai, k, np.array([weight], np.float32))
        return comp.paste(face, ai, w[k]).numpy()[0]

    frame = r.frame(10)
    assert np.array_equal(frame, composed(w[10]))  # the mouth eased by the plan's own weight
    assert not np.array_equal(frame, composed(1.0))  # not the full mouth of the default's edges


def test_render_on_a_server_carries_every_setting(server, http, on_server, voice, tmp_path, monkeypatch, capsys):
    """``studio render --server`` goes through the service's server placement (the window's client):
    its old hand-written list of settings left out compile and crossfade."""
    from studio.cli import main as cli_main

    monkeypatch.setenv("STUDIO_SERVER_TOKEN", TOKEN)
    out = tmp_path / "remote.mp4"
    argv = ["render", "--server", server.url, "--avatar", on_server, "--audio", str(voice), "-o", str(out)]
    argv += ["--engine", "classic", "--crf", "30", "--crossfade", "1", "--preset", "ultrafast", "--json"]
    assert cli_main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["output"] == str(out) and result["frames"] == 50 and result["ran_on"] == f"Studio server {server.url}"
    job = max(http.get("/v1/renders").json()["renders"], key=lambda j: j["id"])
    assert job["settings"]["crf"] == 30 and job["settings"]["crossfade"] == 1  # (compile: MuseTalk's, refused here)
    assert len(_decoded(out)) == 50
