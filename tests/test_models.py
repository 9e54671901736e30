"""The model store: real architectures on meta, import/verify/list of a fake official folder, bad cases."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from musetalk_fakes import (
    MUSETALK_UNET_CONFIG,
    SD_VAE_CONFIG,
    TAESD_CONFIG,
    UNET_TINY,
    WHISPER_TINY_CONFIG,
    write_official_and_taesd,
    write_official_models,
    write_unet,
)

from studio.cli import main as cli_main
from studio.core.engines import weights
from studio.core.errors import ModelError


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    """One fake official models/ folder (v1.5 + v1.0 UNets, sd-vae, whisper) and a TAESD folder."""
    return write_official_and_taesd(tmp_path_factory.mktemp("official"), v10=True)


@pytest.fixture
def copy_of(official, tmp_path):
    """A private copy of the fake folder that a test may damage."""
    dst = tmp_path / "models"
    shutil.copytree(official[0], dst)
    return dst


# --- the real architectures, on meta ------------------------------------------------------------


def test_real_musetalk_unet_has_686_tensors_with_the_spec_shapes():
    shapes = weights.expected_shapes("unet", MUSETALK_UNET_CONFIG)
    assert len(shapes) == 686
    assert shapes["conv_in.weight"] == (320, 8, 3, 3)
    assert shapes["conv_out.weight"] == (4, 320, 3, 3)
    to_k = {k: v for k, v in shapes.items() if k.endswith("attn2.to_k.weight")}
    assert len(to_k) == 16 and {v[1] for v in to_k.values()} == {384}
    assert shapes["down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight"] == (320, 384)
    assert shapes["mid_block.attentions.0.transformer_blocks.0.attn2.to_v.weight"] == (1280, 384)
    assert sum(_numel(s) for s in shapes.values()) == 849_947_844  # spec: ~849.95 M


def test_real_vae_whisper_and_taesd_configs_build_on_meta():
    vae = weights.expected_shapes("vae", SD_VAE_CONFIG)
    assert vae["encoder.conv_in.weight"] == (128, 3, 3, 3) and vae["quant_conv.weight"] == (8, 8, 1, 1)
    assert vae["decoder.mid_block.attentions.0.to_q.weight"] == (512, 512)
    whisper = weights.expected_shapes("whisper", WHISPER_TINY_CONFIG)
    assert whisper["conv1.weight"] == (384, 80, 3) and whisper["embed_positions.weight"] == (1500, 384)
    assert len(whisper) == 67
    taesd = weights.expected_shapes("taesd", TAESD_CONFIG)
    assert taesd["encoder.layers.0.weight"] == (64, 3, 3, 3)
    assert weights.config_facts("vae", SD_VAE_CONFIG)["scaling_factor"] == 0.18215


def test_old_sd_vae_attention_names_map_onto_the_module():
    expected = weights.expected_shapes("vae", SD_VAE_CONFIG)
    old = {}
    for k, v in expected.items():
        for new, legacy in (
            (".to_q.", ".query."),
            (".to_k.", ".key."),
            (".to_v.", ".value."),
            (".to_out.0.", ".proj_attn."),
        ):
            k = k.replace(new, legacy)
        old[k] = v + (1, 1) if k.endswith("query.weight") else v  # some checkpoints store 1x1 convs
    assert "decoder.mid_block.attentions.0.proj_attn.weight" in old
    assert weights.normalize_keys("vae", old) == expected


# --- import / list / verify ----------------------------------------------------------------------


def test_import_stores_hard_links_and_records_sha256_and_size(official, studio_home):
    folder, taesd = official
    records = weights.import_models(folder, taesd=taesd)
    assert {r["label"] for r in records} == {"v1.5 UNet", "v1.0 UNet", "sd-vae", "whisper-tiny", "taesd"}
    manifest = json.loads((studio_home / "models" / "manifest.json").read_text())
    rec = manifest["components"]["musetalkV15"]
    src = folder / "musetalkV15" / "unet.pth"
    assert rec["files"]["unet.pth"]["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert rec["files"]["unet.pth"]["size"] == src.stat().st_size
    stored = studio_home / "models" / "musetalkV15" / "unet.pth"
    assert stored.stat().st_ino == src.stat().st_ino  # hard link, same file system
    assert rec["tensors"] == len(weights.expected_shapes("unet", UNET_TINY))
    assert manifest["components"]["whisper"]["files"].keys() == {
        "config.json",
        "pytorch_model.bin",
        "preprocessor_config.json",
    }
    assert str(weights.availability()) == "ready: v1.5 UNet, sd-vae, whisper-tiny, taesd"
    assert set(weights.list_models()) == {"musetalkV15", "musetalk", "sd-vae", "whisper", "taesd"}
    assert all(r["status"] == "ok" for r in weights.verify_store())


def test_copy_mode_copies_and_the_vae_folder_may_be_sd_vae_ft_mse(tmp_path, studio_home):
    folder = write_official_models(tmp_path, vae_folder="sd-vae-ft-mse")
    weights.import_models(folder, link=False)
    stored = studio_home / "models" / "sd-vae" / "diffusion_pytorch_model.bin"
    assert stored.stat().st_ino != (folder / "sd-vae-ft-mse" / "diffusion_pytorch_model.bin").stat().st_ino
    assert str(weights.availability()) == "ready: v1.5 UNet, sd-vae, whisper-tiny, no taesd (decoder sd-vae only)"


def test_verify_detects_truncated_and_changed_files(copy_of, studio_home):
    weights.import_models(copy_of, link=False)
    unet = studio_home / "models" / "musetalkV15" / "unet.pth"
    data = unet.read_bytes()
    unet.write_bytes(data[: len(data) // 2])
    vae = studio_home / "models" / "sd-vae" / "diffusion_pytorch_model.bin"
    raw = bytearray(vae.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    vae.write_bytes(bytes(raw))
    status = {r["file"].split("/models/")[-1]: r["status"] for r in weights.verify_store()}
    assert status["musetalkV15/unet.pth"] == "truncated"
    assert status["sd-vae/diffusion_pytorch_model.bin"] == "changed"
    assert status["whisper/pytorch_model.bin"] == "ok"
    status = weights.availability()
    assert not status.ready and str(status).startswith("unavailable: ") and "unet.pth" in status.reason


def test_empty_or_partial_store_is_unavailable_with_the_fix(official):
    assert str(weights.availability()) == (
        "unavailable: not imported: a MuseTalk UNet (musetalkV15/ or musetalk/), sd-vae/, whisper/; "
        "run studio models import DIR with the official MuseTalk models/ folder"
    )
    weights.import_models(taesd=official[1])
    assert str(weights.availability()).startswith(
        "unavailable: not imported: a MuseTalk UNet (musetalkV15/ or musetalk/), sd-vae/, whisper/;"
    )
    assert list(weights.list_models()) == ["taesd"]


# --- bad folders: one clear line naming the file ----------------------------------------------------


def test_missing_unet_file_names_it(copy_of):
    (copy_of / "musetalkV15" / "unet.pth").unlink()
    with pytest.raises(ModelError, match=r"musetalkV15: missing unet\.pth"):
        weights.import_models(copy_of)


def test_truncated_unet_file_is_reported_as_truncated(copy_of):
    path = copy_of / "musetalkV15" / "unet.pth"
    path.write_bytes(path.read_bytes()[:-4096])
    with pytest.raises(ModelError, match=r"unet\.pth: cannot be read .*truncated or corrupt"):
        weights.import_models(copy_of)


def test_vae_file_where_the_unet_belongs_is_a_mix_up(copy_of):
    shutil.copyfile(copy_of / "sd-vae" / "diffusion_pytorch_model.bin", copy_of / "musetalkV15" / "unet.pth")
    with pytest.raises(ModelError, match=r"unet\.pth: holds an SD VAE .*not a MuseTalk UNet.*mixed up"):
        weights.import_models(copy_of)


def test_weights_of_another_architecture_fail_on_shape(copy_of):
    other = {**UNET_TINY, "cross_attention_dim": 48}
    write_unet(copy_of / "musetalkV15", "unet.pth", config=other)
    (copy_of / "musetalkV15" / "musetalk.json").write_text(json.dumps(UNET_TINY))
    with pytest.raises(
        ModelError,
        match=r"unet\.pth: tensor .*attn2\.to_k\.weight has shape \[32, 48\] but musetalk\.json needs \[32, 32\]",
    ):
        weights.import_models(copy_of)


def test_v10_unet_in_the_v15_folder_is_accepted(copy_of, studio_home):
    shutil.copyfile(copy_of / "musetalk" / "pytorch_model.bin", copy_of / "musetalkV15" / "unet.pth")
    weights.import_models(copy_of)
    assert weights.availability().ready and str(weights.availability()).startswith("ready: v1.5 UNet")


def test_whisper_width_must_match_the_unet(copy_of):
    cfg = json.loads((copy_of / "musetalkV15" / "musetalk.json").read_text())
    write_unet(copy_of / "musetalkV15", "unet.pth", config={**cfg, "cross_attention_dim": 48})
    shutil.rmtree(copy_of / "musetalk")
    with pytest.raises(ModelError, match=r"expects 48-wide audio features but whisper/ gives 32"):
        weights.import_models(copy_of)


def test_legacy_whisper_tiny_pt_is_explained(copy_of):
    for f in (copy_of / "whisper").iterdir():
        f.unlink()
    (copy_of / "whisper" / "tiny.pt").write_bytes(b"x" * 100)
    with pytest.raises(ModelError, match=r"tiny\.pt: the legacy openai-whisper format"):
        weights.import_models(copy_of)


def test_a_failed_import_stores_nothing(copy_of, studio_home):
    (copy_of / "musetalkV15" / "musetalk.json").write_text("{not json")
    with pytest.raises(ModelError, match=r"musetalk\.json: not a readable JSON config"):
        weights.import_models(copy_of)
    assert not (studio_home / "models" / "manifest.json").exists()
    assert weights.list_models() == {}


def test_a_folder_without_model_folders_is_refused(tmp_path):
    with pytest.raises(ModelError, match=r"no MuseTalk model folders found"):
        weights.import_models(tmp_path)


# --- the CLI ----------------------------------------------------------------------------------


def test_cli_import_list_verify_and_a_bad_case(official, capsys, tmp_path):
    folder, taesd = official
    assert cli_main(["models", "import", str(folder), "--taesd", str(taesd)]) == 0
    out = capsys.readouterr().out
    assert "imported v1.5 UNet" in out and "musetalk: ready: v1.5 UNet, sd-vae, whisper-tiny, taesd" in out
    assert cli_main(["models", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["musetalk"].startswith("ready") and "taesd" in listed["components"]
    assert cli_main(["models", "verify"]) == 0
    assert capsys.readouterr().out.count("ok ") == 11  # 2 + 2 UNet, 2 VAE, 3 whisper, 2 TAESD files
    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    (bad / "whisper" / "pytorch_model.bin").write_bytes(b"\0" * 64)
    assert cli_main(["models", "import", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("studio: error: ") and "whisper/pytorch_model.bin" in err[0]


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
