"""LSE-C / LSE-D (``studio check --lse``) against an independent implementation of the published
SyncNet evaluation's maths, on random weights of the same architecture (no weights are needed):

* the audio front end equals python_speech_features' ``mfcc`` (what the published code calls);
* the network is run again here from its state dict with plain ``torch.nn.functional`` calls
  (convolutions, eval-mode batch norm, pooling, linear layers), and the score again with numpy
  (the distances, the 31 shifts with zero padding, the mean, median minus minimum): equal within 1e-4;
* ``studio models import-syncnet`` stores a good file and refuses a damaged one in one sentence;
* without weights, ``studio check --lse`` says how to get them and keeps its own score.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

SHIFT = 15


def _random_net(seed: int = 3):
    """The architecture with random weights and random batch-norm statistics (so eval mode matters)."""
    from studio.core.quality.syncnet import build_net

    torch.manual_seed(seed)
    net = build_net()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) * 2 + 0.5)
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
    return net.eval()


# --------------------------------------------------------------------------------------------
# The independent reference: the published network's layers, one functional call each


def _bn(x, sd, name):
    return F.batch_norm(
        x,
        sd[f"{name}.running_mean"],
        sd[f"{name}.running_var"],
        sd[f"{name}.weight"],
        sd[f"{name}.bias"],
        False,
        0.0,
        1e-5,
    )


def _ref_audio(sd, x):
    def block(x, conv, bn, pad):
        return F.relu(
            _bn(
                F.conv2d(x, sd[f"netcnnaud.{conv}.weight"], sd[f"netcnnaud.{conv}.bias"], padding=pad),
                sd,
                f"netcnnaud.{bn}",
            )
        )

    x = block(x, 0, 1, 1)  # a 1x1 max pool with stride 1 changes nothing
    x = F.max_pool2d(block(x, 4, 5, 1), (3, 3), (1, 2))
    x = block(x, 8, 9, 1)
    x = block(x, 11, 12, 1)
    x = F.max_pool2d(block(x, 14, 15, 1), (3, 3), (2, 2))
    x = block(x, 18, 19, 0)
    return _ref_head(sd, "netfcaud", x.reshape(len(x), -1))


def _ref_lips(sd, x):
    def block(x, conv, bn, stride=1, pad=0):
        w, b = sd[f"netcnnlip.{conv}.weight"], sd[f"netcnnlip.{conv}.bias"]
        return F.relu(_bn(F.conv3d(x, w, b, stride=stride, padding=pad), sd, f"netcnnlip.{bn}"))

    x = F.max_pool3d(block(x, 0, 1, (1, 2, 2)), (1, 3, 3), (1, 2, 2))
    x = F.max_pool3d(block(x, 4, 5, (1, 2, 2), (0, 1, 1)), (1, 3, 3), (1, 2, 2), (0, 1, 1))
    x = block(x, 8, 9, 1, (0, 1, 1))
    x = block(x, 11, 12, 1, (0, 1, 1))
    x = F.max_pool3d(block(x, 14, 15, 1, (0, 1, 1)), (1, 3, 3), (1, 2, 2))
    x = block(x, 18, 19)
    return _ref_head(sd, "netfclip", x.reshape(len(x), -1))


def _ref_head(sd, name, x):
    x = F.relu(_bn(F.linear(x, sd[f"{name}.0.weight"], sd[f"{name}.0.bias"]), sd, f"{name}.1"))
    return F.linear(x, sd[f"{name}.3.weight"], sd[f"{name}.3.bias"])


def _ref_scores(sd, crops, audio):
    """The published evaluation's score, computed independently (python_speech_features, numpy)."""
    import python_speech_features

    cc = np.asarray(python_speech_features.mfcc(audio, 16000)).T  # [13, N]
    windows = min(len(crops), len(audio) // 640) - 5
    lips, auds = [], []
    with torch.no_grad():
        for i in range(windows):
            clip = torch.tensor(crops[i : i + 5].astype(np.float64)).float().permute(3, 0, 1, 2)[None]
            lips.append(_ref_lips(sd, clip)[0].double().numpy())
            m = torch.tensor(cc[:, 4 * i : 4 * i + 20]).float()[None, None]
            auds.append(_ref_audio(sd, m)[0].double().numpy())
    lip, aud = np.stack(lips), np.stack(auds)
    padded = np.concatenate([np.zeros((SHIFT, aud.shape[1])), aud, np.zeros((SHIFT, aud.shape[1]))])
    dist = np.array(
        [[np.linalg.norm(lip[i] - padded[i + j] + 1e-6) for j in range(2 * SHIFT + 1)] for i in range(windows)]
    )
    mean = dist.mean(0)
    best = int(np.argmin(mean))
    return {"lse_d": mean[best], "lse_c": np.median(mean) - mean[best], "offset": SHIFT - best, "mean": mean}


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seconds", [0.02, 0.5, 1.37])
def test_the_mfcc_equals_python_speech_features(seconds):
    import python_speech_features

    from studio.core.quality.syncnet import mfcc

    rng = np.random.default_rng(int(seconds * 100))
    audio = (rng.normal(0, 4000, int(seconds * 16_000))).astype(np.int16)
    audio[: len(audio) // 4] = 0  # a silent stretch: the log of zero energy takes epsilon in both
    mine, theirs = mfcc(audio), python_speech_features.mfcc(audio, 16000)
    assert mine.shape == theirs.shape
    assert np.abs(mine - theirs).max() < 1e-6


def test_lse_equals_the_independent_implementation_on_random_weights():
    from studio.core.quality.syncnet import lse

    net = _random_net()
    sd = {k: v.clone() for k, v in net.state_dict().items()}
    rng = np.random.default_rng(11)
    frames = 16
    crops = rng.integers(0, 256, (frames, 224, 224, 3), dtype=np.uint8)
    t = np.arange(frames * 640) / 16_000
    audio = 8000 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 3 * t)) + rng.normal(0, 500, len(t))
    audio = audio.astype(np.int16)
    mine = lse(net, crops, audio, batch=4)
    ref = _ref_scores(sd, crops, audio)
    assert mine["windows"] == frames - 5
    assert abs(mine["lse_d"] - ref["lse_d"]) < 1e-4 and abs(mine["lse_c"] - ref["lse_c"]) < 1e-4, (mine, ref)
    assert mine["offset_frames"] == ref["offset"]
    assert np.abs(np.array(mine["mean_distances"]) - ref["mean"]).max() < 1e-4
    assert ref["lse_c"] > 1e-3  # not a degenerate case where every shift is alike


def test_import_syncnet_takes_a_good_file_and_refuses_a_damaged_one(tmp_path, capsys):
    from studio.cli import main
    from studio.core.errors import InputError
    from studio.core.quality import syncnet

    good = tmp_path / "syncnet_v2.model"
    torch.save(_random_net().state_dict(), good)
    assert main(["models", "import-syncnet", str(good), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["sha256"] == hashlib.sha256(good.read_bytes()).hexdigest() and rec["pinned"] is (
        syncnet.SYNCNET_SHA256 is not None
    )
    stored = syncnet.weights_file()
    assert stored is not None and stored.read_bytes() == good.read_bytes()
    loaded = syncnet.load_net()
    assert torch.equal(loaded.state_dict()["netfclip.3.weight"], torch.load(good)["netfclip.3.weight"])

    # cut short, or a network of another shape, or not the pinned file: one sentence each, nothing stored
    damaged = tmp_path / "damaged.model"
    damaged.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    state = _random_net().state_dict()
    state["netfcaud.3.weight"] = state["netfcaud.3.weight"][:512]
    other = tmp_path / "other.model"
    torch.save(state, other)
    for bad, words in (
        (damaged, "damaged"),
        (other, "not SyncNet's weights"),
        (tmp_path / "none.model", "no such file"),
    ):
        assert main(["models", "import-syncnet", str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert words in err and err.count("\n") == 0 and err.startswith("studio: error:"), err
    assert syncnet.weights_file().read_bytes() == good.read_bytes()  # the good one is still there
    with pytest.raises(InputError, match="SHA-256"):
        syncnet.import_syncnet(good, pin="0" * 64)


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """A 3 s classic-engine render of the demo photo speaking the demo voice-over's start."""
    import soundfile as sf
    from conftest import DEMO_AUDIO, DEMO_AVATAR

    from studio.core.render.renderer import Renderer
    from studio.core.settings import RenderSettings

    work = tmp_path_factory.mktemp("lse")
    x, rate = sf.read(DEMO_AUDIO, dtype="float32")
    voice = work / "voice.wav"
    sf.write(voice, x[: int(3.0 * rate)], rate)
    out = work / "clip.mp4"
    for _ in Renderer(str(DEMO_AVATAR), voice, RenderSettings(engine="classic", device="cpu")).run(out):
        pass
    return out


def test_check_lse_without_weights_says_how_to_get_them(clip, tmp_path, capsys):
    from studio.cli import main

    page = tmp_path / "r.html"
    assert main(["check", str(clip), "--lse", "--json", "--report", str(page)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["lse"]["lse_c"] is None and "import-syncnet" in out["lse"]["note"]
    assert out["verdict"] == "ok"  # Studio's own score stands
    assert "studio models import-syncnet" in page.read_text()


def test_check_lse_with_weights_scores_the_lossless_crops(clip, tmp_path, capsys):
    """Imported (random) weights: the score of the video equals the reference's on the same crops,
    and the crops are the face, centred as the published pipeline cuts it."""
    from studio.cli import main
    from studio.core.media.audio import load
    from studio.core.quality import syncnet

    net = _random_net(5)
    weights = tmp_path / "syncnet_v2.model"
    torch.save(net.state_dict(), weights)
    assert main(["models", "import-syncnet", str(weights)]) == 0
    capsys.readouterr()
    assert main(["check", str(clip), "--lse", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["lse"]
    assert "lossless" in got["note"]
    crops = syncnet.face_crops(clip)
    assert crops.shape == (75, 224, 224, 3)
    # the face sits where the published crop puts it: its box's centre 1.4 half-sizes from the left
    # and one from the top of the 2.8-half-size square (112, 80 px), its half-size 80 px
    from studio.core.avatars import faces
    from studio.core.quality.mouth import FaceFinder
    from studio.core.quality.video import Frame, luma_of_rgb

    with FaceFinder() as finder:
        rgb = np.ascontiguousarray(crops[40, :, :, ::-1])
        lm = finder.once(Frame.of_rgb(rgb, luma_of_rgb(rgb)))
    assert lm is not None
    oval = lm[list(faces.FACE_OVAL)]
    centre, half = (oval.min(0) + oval.max(0)) / 2, (oval.max(0) - oval.min(0)).max() / 2
    assert abs(centre[0] - 112) < 8 and abs(centre[1] - 80) < 8 and abs(half - 80) < 8, (centre, half)
    audio = syncnet.to_int16(load(clip).samples)
    ref = _ref_scores({k: v.clone() for k, v in net.state_dict().items()}, crops[:24], audio[: 24 * 640])
    mine = syncnet.lse(net, crops[:24], audio[: 24 * 640])
    assert abs(mine["lse_c"] - ref["lse_c"]) < 1e-4 and abs(mine["lse_d"] - ref["lse_d"]) < 1e-4
    assert got["windows"] == 70 and np.isfinite(got["lse_c"]) and np.isfinite(got["lse_d"])
