"""The model store: import, verify and list the MuseTalk weights. Nothing is ever downloaded.

    records = import_models("~/MuseTalk/models", taesd="~/taesd")   # official layout in, checked
    list_models()            # {"musetalkV15": {...}, "sd-vae": {...}, ...} from the manifest
    verify_store()           # re-hash every stored file against the manifest
    paths = resolve()        # ModelSet: where each component's files are (cheap, for the engine)

The official MuseTalk ``models/`` layout (spec §2) is accepted as it is: ``musetalkV15/`` (v1.5 UNet),
``musetalk/`` (v1.0 UNet), ``sd-vae/`` or ``sd-vae-ft-mse/`` (AutoencoderKL), ``whisper/`` (HF
whisper-tiny), plus a TAESD folder in the diffusers ``AutoencoderTiny`` layout. Every weight file is
checked against the architecture its config describes (strict keys and shapes, read on
``torch.device("meta")`` so checking a 3.4 GB UNet costs no memory), hashed, and hard-linked (else
copied) under ``data_dir()/models/<component>/``; ``manifest.json`` there records SHA-256 and size.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from studio.core.engines.weight_files import (
    build_module,
    check_tensors,
    config_facts,
    expected_shapes,
    normalize_keys,
    read_config,
    read_shapes,
    read_state_dict,
    short_reason,
)
from studio.core.env import sub_dir
from studio.core.errors import ModelError
from studio.core.store.fsutil import atomic_path, atomic_write_bytes, file_sha256

if TYPE_CHECKING:
    from studio.core.engines.base import Availability

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1


@dataclass(frozen=True)
class Component:
    """One model folder: where it lives in the official layout and which files make it."""

    name: str  # folder name in the store
    kind: str  # unet | vae | whisper | taesd
    label: str
    folders: tuple[str, ...]  # accepted folder names in a source models/ folder
    config: str
    weights: tuple[str, ...]  # accepted weight files, preferred first
    extras: tuple[str, ...] = ()  # optional files stored when present


COMPONENTS: dict[str, Component] = {
    c.name: c
    for c in (
        Component("musetalkV15", "unet", "v1.5 UNet", ("musetalkV15",), "musetalk.json", ("unet.pth",)),
        Component("musetalk", "unet", "v1.0 UNet", ("musetalk",), "musetalk.json", ("pytorch_model.bin",)),
        Component(
            "sd-vae",
            "vae",
            "sd-vae",
            ("sd-vae", "sd-vae-ft-mse"),
            "config.json",
            ("diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.bin"),
        ),
        Component(
            "whisper",
            "whisper",
            "whisper-tiny",
            ("whisper",),
            "config.json",
            ("model.safetensors", "pytorch_model.bin"),
            ("preprocessor_config.json",),
        ),
        Component(
            "taesd",
            "taesd",
            "taesd",
            ("taesd",),
            "config.json",
            ("diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.bin"),
        ),
    )
}
UNET_VERSIONS = {"v15": "musetalkV15", "v1": "musetalk", "v10": "musetalk"}


@dataclass(frozen=True)
class ModelSet:
    """Resolved component folders (store or official layout); ``None`` where absent."""

    root: Path
    unet: Path | None  # the folder of the UNet that ``version`` picked
    unet_name: str | None
    vae: Path | None
    whisper: Path | None
    taesd: Path | None
    manifest: dict

    def weight_file(self, folder: Path) -> Path:
        comp = COMPONENTS[self.manifest_name(folder)]
        return find_weights(folder, comp)

    def manifest_name(self, folder: Path) -> str:
        for c in COMPONENTS.values():
            if folder.name == c.name or folder.name in c.folders:
                return c.name
        raise ModelError(f"{folder}: not a known model folder")

    def sha256(self, folder: Path) -> str | None:
        """The recorded SHA-256 of a component's weight file (None outside the store)."""
        rec = self.manifest.get("components", {}).get(self.manifest_name(folder))
        if not rec:
            return None
        return rec["files"][self.weight_file(folder).name]["sha256"]


# --------------------------------------------------------------------------------------------
# Public API


def models_root(models_dir: str | os.PathLike | None = None) -> Path:
    return Path(models_dir).expanduser() if models_dir else sub_dir("models")


def read_manifest(models_dir=None) -> dict:
    path = models_root(models_dir) / MANIFEST
    if not path.is_file():
        return {"format": MANIFEST_FORMAT, "components": {}}
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path}: unreadable model manifest ({exc}); re-run studio models import DIR") from None
    data.setdefault("components", {})
    return data


def list_models(models_dir=None) -> dict[str, dict]:
    """Component name -> its manifest record (kind, label, files with sha256 and size, source)."""
    return dict(read_manifest(models_dir)["components"])


def resolve(models_dir=None, version: str = "v15") -> ModelSet:
    """Locate the components in the store (or in an official ``models/`` folder). No hashing."""
    root = models_root(models_dir)
    manifest = read_manifest(models_dir)

    def folder(name: str) -> Path | None:
        for candidate in (COMPONENTS[name].name, *COMPONENTS[name].folders):
            p = root / candidate
            if p.is_dir() and (p / COMPONENTS[name].config).is_file():
                return p
        return None

    want = UNET_VERSIONS.get(version)
    if want is None:
        raise ModelError(f"unknown MuseTalk version {version!r}; use v15 or v1")
    order = [want] + [n for n in ("musetalkV15", "musetalk") if n != want]
    unet_name = next((n for n in order if folder(n)), None)
    if unet_name and unet_name != want:
        log.warning("MuseTalk %s UNet not imported; using %s", version, COMPONENTS[unet_name].label)
    return ModelSet(
        root,
        folder(unet_name) if unet_name else None,
        unet_name,
        folder("sd-vae"),
        folder("whisper"),
        folder("taesd"),
        manifest,
    )


def import_models(source=None, taesd=None, models_dir=None, link: bool = True, fast: bool = True) -> list[dict]:
    """Check every component found in ``source`` (official layout) and ``taesd``, then store them,
    and (``fast``) write the store's fast layout (``fast_layout``).

    Everything is verified before anything is stored, so a bad folder leaves the store unchanged.
    Raises ``ModelError`` naming the file and what is wrong.
    """
    found: list[tuple[Component, Path]] = []
    if source is not None:
        src = Path(source).expanduser()
        if not src.is_dir():
            raise ModelError(f"{src}: no such folder; give the MuseTalk models/ folder")
        for comp in COMPONENTS.values():
            for name in comp.folders:
                if (src / name).is_dir():
                    found.append((comp, src / name))
                    break
        if not found:
            raise ModelError(
                f"{src}: no MuseTalk model folders found; expected musetalkV15/, musetalk/, sd-vae/, "
                "whisper/ or taesd/ inside (the official MuseTalk models/ folder)"
            )
    if taesd is not None:
        t = Path(taesd).expanduser()
        if not t.is_dir():
            raise ModelError(f"{t}: no such folder; give the TAESD folder (config.json + diffusion_pytorch_model.*)")
        found = [(c, p) for c, p in found if c.name != "taesd"] + [(COMPONENTS["taesd"], t)]
    if not found:
        raise ModelError("nothing to import; give the MuseTalk models/ folder or --taesd DIR")

    records = [check_component(comp, folder) for comp, folder in found]
    _cross_check(records, list_models(models_dir))
    root = models_root(models_dir)
    root.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(models_dir)
    for rec, (comp, folder) in zip(records, found):
        rec["stored"] = _store(folder, root / comp.name, list(rec["files"]), link)
        rec["source"] = str(folder.resolve())
        rec["imported"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        manifest["components"][comp.name] = rec
        log.info("imported %s from %s (%s)", comp.label, folder, rec["stored"])
    manifest["format"] = MANIFEST_FORMAT
    atomic_write_bytes(root / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
    if fast:
        fast_layout(models_dir, records)
    return records


def fast_layout(models_dir=None, records: list[dict] | None = None) -> list[Path]:
    """Write the fast layout of a store's GPU networks (``write_fast_copies``: fp16 safetensors,
    memory-mapped at load) once, after an import: a cold command then maps half the bytes and
    converts nothing, instead of reading the official fp32 pickles. A failure (a full disk) only
    costs speed: the official files still load; it is logged and recorded as ``fast: []``."""
    import torch

    t0 = time.perf_counter()
    try:
        paths = write_fast_copies(models_dir, torch.float16)
    except (OSError, ModelError) as exc:
        log.warning("the fast layout was not written (%s); the official files load instead", exc)
        paths = []
    seconds = time.perf_counter() - t0
    if records is not None:
        for r in records:
            r["fast"] = [str(p) for p in paths if p.name.startswith(_component_of(r) + ".")]
    log.info("fast layout: %d file(s) in %.1f s", len(paths), seconds)
    return paths


def fast_files(models_dir=None) -> list[Path]:
    """The fast layout's files of a store (``fast_layout``)."""
    return sorted((models_root(models_dir) / FAST_DIR).glob("*.safetensors"))


def _component_of(record: dict) -> str:
    return next((c.name for c in COMPONENTS.values() if c.label == record.get("label")), "")


def verify_store(models_dir=None) -> list[dict]:
    """Re-hash every stored file: one ``{component, file, status, detail}`` per file.

    ``status`` is ``ok``, ``missing``, ``truncated`` (shorter than recorded), ``changed``.
    """
    root = models_root(models_dir)
    out = []
    for name, rec in sorted(list_models(models_dir).items()):
        for fname, info in sorted(rec["files"].items()):
            path = root / name / fname
            row = {"component": name, "file": str(path), "status": "ok", "detail": ""}
            if not path.is_file():
                row.update(status="missing", detail="the file is gone; re-import the models folder")
            elif (size := path.stat().st_size) != info["size"]:
                kind = "truncated" if size < info["size"] else "changed"
                row.update(status=kind, detail=f"{size} bytes, {info['size']} recorded; re-import the models folder")
            elif file_sha256(path) != info["sha256"]:
                row.update(status="changed", detail="SHA-256 differs from the import; re-import the models folder")
            out.append(row)
    return out


def check_component(comp: Component | str, folder: str | os.PathLike) -> dict:
    """Verify one component folder against its architecture; return its manifest record.

    The record holds ``kind``, ``label``, ``tensors``, ``params``, ``config`` facts and ``files``
    (name -> sha256, size). Raises ``ModelError`` for a missing, truncated or mismatched file.
    """
    comp = COMPONENTS[comp] if isinstance(comp, str) else comp
    folder = Path(folder)
    cfg_path = folder / comp.config
    if comp.kind == "whisper" and (folder / "tiny.pt").is_file() and not cfg_path.is_file():
        raise ModelError(
            f"{folder / 'tiny.pt'}: the legacy openai-whisper format is not supported; put the Hugging Face "
            "openai/whisper-tiny folder (config.json, pytorch_model.bin, preprocessor_config.json) there"
        )
    if not cfg_path.is_file():
        raise ModelError(f"{cfg_path}: missing; the {comp.label} folder needs its {comp.config}")
    weights = find_weights(folder, comp)
    config = read_config(cfg_path)
    expected = expected_shapes(comp.kind, config, cfg_path)
    raw = read_shapes(weights)
    check_tensors(comp.kind, weights, cfg_path, normalize_keys(comp.kind, raw), expected, raw)
    files = [comp.config, weights.name] + [e for e in comp.extras if (folder / e).is_file()]
    return {
        "kind": comp.kind,
        "label": comp.label,
        "tensors": len(expected),
        "params": int(sum(_numel(s) for s in expected.values())),
        "config": config_facts(comp.kind, config),
        "files": {f: {"sha256": file_sha256(folder / f), "size": (folder / f).stat().st_size} for f in files},
    }


def availability(models_dir=None, version: str = "v15") -> Availability:
    """Whether the imported weights run MuseTalk (``str``: ``ready: ...`` or ``unavailable: <why,
    with the fix>``). Cheap: reads the manifest, stats files."""
    from studio.core.engines.base import Availability

    def no(why: str) -> Availability:
        return Availability("musetalk", False, why)

    try:
        comps = list_models(models_dir)
    except ModelError as exc:
        return no(str(exc))
    root = models_root(models_dir)
    have = []
    for name, rec in comps.items():
        for fname, info in rec.get("files", {}).items():
            p = root / name / fname
            if not p.is_file() or p.stat().st_size != info["size"]:
                return no(f"{p} is missing or changed; run studio models verify, then re-import")
        have.append(name)
    unets = [n for n in (UNET_VERSIONS.get(version, "musetalkV15"), "musetalkV15", "musetalk") if n in have]
    missing = [
        label
        for label, ok in (
            ("a MuseTalk UNet (musetalkV15/ or musetalk/)", unets),
            ("sd-vae/", "sd-vae" in have),
            ("whisper/", "whisper" in have),
        )
        if not ok
    ]
    if missing:
        return no(
            "not imported: " + ", ".join(missing) + "; run studio models import DIR "
            "with the official MuseTalk models/ folder"
        )
    parts = [COMPONENTS[unets[0]].label, "sd-vae", "whisper-tiny"]
    parts.append("taesd" if "taesd" in have else "no taesd (decoder sd-vae only)")
    return Availability("musetalk", True, ", ".join(parts))


FAST_DIR = ".fast"  # beside the component folders: half-precision copies that load straight to the GPU


def fast_copy_path(folder: Path, weights: Path, dtype) -> Path:
    """Where ``write_fast_copy`` puts ``weights`` in ``dtype`` (safetensors, module key names)."""
    name = str(dtype).replace("torch.", "")
    return Path(folder).parent / FAST_DIR / f"{Path(folder).name}.{Path(weights).name}.{name}.safetensors"


def _source_key(weights: Path) -> str:
    st = Path(weights).stat()  # through a store link: the original file
    return f"{st.st_size}:{st.st_mtime_ns}"


def write_fast_copy(kind: str, folder: Path, weights: Path, dtype) -> Path:
    """Store ``weights`` converted to ``dtype`` as safetensors, keyed by the source file's size and
    time: ``load_module`` then maps it and copies it to the GPU as is (no fp32 read, no
    conversion on the CPU). Loaded and checked like any load first; written atomically."""
    from safetensors.torch import save_file

    module = load_module(kind, folder, weights, "cpu", dtype, fast=False)
    state = {k: v.detach().contiguous() for k, v in module.state_dict().items()}
    target = fast_copy_path(folder, weights, dtype)
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        save_file(state, str(tmp), metadata={"source": _source_key(weights), "kind": kind})
    return target


def write_fast_copies(models_dir=None, dtype=None, decoders=("taesd", "sd-vae")) -> list[Path]:
    """Half-precision fast copies of the MuseTalk UNet and decoders of a store (``write_fast_copy``)."""
    import torch

    dtype = dtype or torch.float16
    p = resolve(models_dir)
    todo = [("unet", p.unet), ("vae", p.vae)] + ([("taesd", p.taesd)] if "taesd" in decoders and p.taesd else [])
    return [write_fast_copy(kind, folder, p.weight_file(folder), dtype) for kind, folder in todo if folder]


def load_fast_copy(kind: str, folder: Path, weights: Path, device, dtype):
    """The module from its fast copy, tensors created on ``device``; None without a current copy."""
    path = fast_copy_path(folder, weights, dtype)
    try:
        if not path.is_file():
            return None
        from safetensors import safe_open
        from safetensors.torch import load_file

        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
        if meta.get("source") != _source_key(weights) or meta.get("kind") != kind:
            log.info("%s: out of date, loading %s instead", path, weights)
            return None
        comp = next(c for c in COMPONENTS.values() if c.kind == kind)
        cfg_path = Path(folder) / comp.config
        module = build_module(kind, read_config(cfg_path), cfg_path)
        expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
        state = load_file(str(path), device=str(device))
        if {k: tuple(v.shape) for k, v in state.items()} != expected or any(v.dtype != dtype for v in state.values()):
            log.warning("%s does not match %s: loading %s instead", path, cfg_path, weights)
            return None
        module.load_state_dict(state, strict=True, assign=True)
        return module.eval().requires_grad_(False)
    except Exception as exc:  # noqa: BLE001 - the original weights still load
        log.warning("fast copy %s unusable (%s): loading %s", path, short_reason(exc), weights)
        return None


def load_module(kind: str, folder: Path, weights: Path, device="cpu", dtype=None, fast: bool = True):
    """Build ``kind`` from ``folder``'s config and load ``weights`` strictly; eval mode.

    Half precision on a GPU loads the fast layout (``write_fast_copy``, written by ``studio models
    import``) when there is a current copy: half the bytes of the official fp32 files, mapped and
    copied to the GPU as they are, no pickle and no conversion. ``STUDIO_FAST_COPIES=0`` loads the
    official files instead (to compare). With a warm page cache the UNet loaded about as fast
    either way on the H200 (0.73 s against 0.74 s, 2026-12-01); a cold cache reads 1.7 GB instead
    of 3.4 GB.
    """
    from studio.core import env

    if (
        fast
        and env.flag("STUDIO_FAST_COPIES")
        and dtype is not None
        and str(dtype) in ("torch.float16", "torch.bfloat16")
    ):
        module = load_fast_copy(kind, folder, weights, device, dtype)
        if module is not None:
            return module
    comp = next(c for c in COMPONENTS.values() if c.kind == kind)
    cfg_path = Path(folder) / comp.config
    module = build_module(kind, read_config(cfg_path), cfg_path)
    state = normalize_keys(kind, read_state_dict(weights))
    expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    check_tensors(kind, Path(weights), cfg_path, {k: tuple(v.shape) for k, v in state.items()}, expected, state)
    module.load_state_dict(state, strict=True, assign=True)
    module.eval().requires_grad_(False)
    import torch

    # nn.Module.to, not diffusers' override: it warns about fp32-pinned modules that these lack.
    return torch.nn.Module.to(module, device=device, dtype=dtype)


# --------------------------------------------------------------------------------------------
# Helpers


def find_weights(folder: Path, comp: Component) -> Path:
    """The weight file of ``comp`` in ``folder`` (the first of its known names); one sentence when
    it is missing or empty."""
    for name in comp.weights:
        p = folder / name
        if p.is_file():
            if p.stat().st_size == 0:
                raise ModelError(f"{p}: the file is empty (0 bytes); copy it again from the original download")
            return p
    raise ModelError(f"{folder}: missing {' or '.join(comp.weights)}; the {comp.label} weights must be in that folder")


def _cross_check(records: list[dict], stored: dict[str, dict]) -> None:
    """The UNet's conditioning width must match whisper's, and its input the VAE's latents."""
    facts = {r["kind"]: r["config"] for r in records}
    for rec in stored.values():
        facts.setdefault(rec["kind"], rec.get("config", {}))
    unet, whisper, vae = facts.get("unet"), facts.get("whisper"), facts.get("vae")
    if unet and whisper and unet.get("cross_attention_dim") != whisper.get("d_model"):
        raise ModelError(
            f"the UNet expects {unet.get('cross_attention_dim')}-wide audio features but whisper/ gives "
            f"{whisper.get('d_model')}; whisper/ must hold openai/whisper-tiny"
        )
    if unet and vae and unet.get("in_channels") != 2 * vae.get("latent_channels", 0):
        raise ModelError(
            f"the UNet takes {unet.get('in_channels')} latent channels but the VAE makes "
            f"{vae.get('latent_channels')}; sd-vae/ must hold stabilityai/sd-vae-ft-mse"
        )


def _store(src: Path, dst: Path, files: list[str], link: bool) -> str:
    """Hard-link (same file system) or copy each file into ``dst``; returns how."""
    dst.mkdir(parents=True, exist_ok=True)
    how = "hardlink" if link else "copy"
    for f in files:
        s, d = src / f, dst / f
        if d.exists() and d.samefile(s):
            continue
        with atomic_path(d) as tmp:
            tmp.unlink()
            try:
                if not link:
                    raise OSError("copy requested")
                os.link(s, tmp)
            except OSError:
                shutil.copyfile(s, tmp)
                how = "copy"
    for stale in dst.iterdir():  # a previous import's other weight format
        if stale.is_file() and stale.name not in files:
            stale.unlink()
    return how


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n
