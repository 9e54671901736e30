"""Half-precision fast copies of the weights (issue 16, cold start): same tensors, refused when stale."""

from __future__ import annotations

import os
import time

import pytest
import torch
from musetalk_fakes import write_official_and_taesd

from studio.core.engines import weights


@pytest.fixture
def store(tmp_path):
    official, taesd = write_official_and_taesd(tmp_path / "official")
    weights.import_models(official, taesd=taesd)
    return weights.models_root()


def test_fast_copies_hold_the_same_half_precision_tensors_and_go_stale_with_their_source(store):
    paths = weights.write_fast_copies(store, torch.float16)
    assert len(paths) == 3 and all(p.parent.name == weights.FAST_DIR and p.suffix == ".safetensors" for p in paths)
    p = weights.resolve(store)
    for kind, folder in (("unet", p.unet), ("vae", p.vae), ("taesd", p.taesd)):
        wfile = p.weight_file(folder)
        fast = weights.load_fast_copy(kind, folder, wfile, "cpu", torch.float16)
        assert fast is not None
        ref = weights.load_module(kind, folder, wfile, "cpu", torch.float16)
        got, want = fast.state_dict(), ref.state_dict()
        assert got.keys() == want.keys()
        assert all(got[k].dtype == torch.float16 and torch.equal(got[k], want[k]) for k in want)
        assert weights.load_fast_copy(kind, folder, wfile, "cpu", torch.bfloat16) is None  # no bf16 copy
    # a changed source file makes its copy stale: the original weights load again
    wfile = p.weight_file(p.taesd)
    st = wfile.stat()
    os.utime(wfile, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert weights.load_fast_copy("taesd", p.taesd, wfile, "cpu", torch.float16) is None
    # a damaged copy is refused (with a warning), never loaded
    paths[0].write_bytes(b"not a safetensors file")
    assert weights.load_fast_copy("unet", p.unet, p.weight_file(p.unet), "cpu", torch.float16) is None


def test_import_writes_the_fast_layout_and_half_precision_loads_never_unpickle(store, monkeypatch):
    """`studio models import` converts the official files once; a half-precision load then maps
    the safetensors copy (no ``torch.load`` of the fp32 pickles), unless STUDIO_FAST_COPIES=0."""
    fast = sorted((store / weights.FAST_DIR).glob("*.float16.safetensors"))
    assert [f.name.split(".")[0] for f in fast] == ["musetalkV15", "sd-vae", "taesd"]
    p = weights.resolve(store)

    def no_pickles(*a, **kw):
        raise AssertionError("the official pickle was read")

    monkeypatch.setattr(torch, "load", no_pickles)
    for kind, folder in (("unet", p.unet), ("vae", p.vae), ("taesd", p.taesd)):
        m = weights.load_module(kind, folder, p.weight_file(folder), "cpu", torch.float16)
        assert all(t.dtype == torch.float16 for t in m.state_dict().values())
    monkeypatch.setenv("STUDIO_FAST_COPIES", "0")
    with pytest.raises(weights.ModelError):  # the switch reads the official .pth again (here: refused)
        weights.load_module("unet", p.unet, p.weight_file(p.unet), "cpu", torch.float16)


def test_the_import_command_says_what_it_wrote(tmp_path):
    import json
    import subprocess
    import sys

    from musetalk_fakes import write_official_and_taesd

    official, taesd = write_official_and_taesd(tmp_path / "src")
    env = dict(os.environ, STUDIO_HOME=str(tmp_path / "home"))
    r = subprocess.run(
        [sys.executable, "-m", "studio", "models", "import", str(official), "--taesd", str(taesd)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert "fast layout: 3 file(s)" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "studio", "models", "import", str(official), "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["fast"]) == 3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_fast_copy_loads_straight_to_the_gpu_and_its_unet_captures_a_cuda_graph(store, monkeypatch):
    """STUDIO_FAST_COPIES=1 only: on the H200 the capture failed after a fast load (2026-12-01)."""
    from studio.core.engines import runtime_torch as rt

    monkeypatch.setenv("STUDIO_FAST_COPIES", "1")
    weights.write_fast_copies(store, torch.float16)
    p = weights.resolve(store)
    t0 = time.perf_counter()
    m = weights.load_module("unet", p.unet, p.weight_file(p.unet), "cuda", torch.float16)
    assert all(t.is_cuda and t.dtype == torch.float16 for t in m.state_dict().values())
    ref = weights.load_module("unet", p.unet, p.weight_file(p.unet), "cuda", torch.float16, fast=False)
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), ref.state_dict().values()))
    assert time.perf_counter() - t0 < 60
    rt.fold_time_embedding(m)
    c = m.config
    t0_ = torch.zeros(1, dtype=torch.long, device="cuda")
    run = rt.GraphRunner(lambda lat, aud: m(lat, t0_, encoder_hidden_states=aud, return_dict=False)[0], "cuda")
    lat = torch.randn(2, c.in_channels, 32, 32, device="cuda", dtype=torch.float16)
    aud = torch.randn(2, 50, c.cross_attention_dim, device="cuda", dtype=torch.float16)
    with torch.inference_mode():
        run.warm_up(lat, aud)
    assert run.captured() and all(run.captured().values())  # captured, not run eagerly
