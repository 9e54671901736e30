"""``studio models import|list|verify``: the MuseTalk weights in the model store (never downloads);
``studio models import-syncnet FILE``: SyncNet's published weights for ``studio check --lse``."""

from __future__ import annotations


def register(sub) -> None:
    from studio.cli._common import runs

    p = sub.add_parser("models", help="import, list and verify MuseTalk weights (no downloads)")
    cmds = p.add_subparsers(dest="models_command", metavar="ACTION", required=True)

    imp = cmds.add_parser("import", help="check and store an official MuseTalk models/ folder")
    imp.add_argument("folder", nargs="?", help="the MuseTalk models/ folder (musetalkV15/, sd-vae/, whisper/, ...)")
    imp.add_argument("--taesd", metavar="DIR", help="a TAESD folder (diffusers AutoencoderTiny: config.json + weights)")
    imp.add_argument("--copy", action="store_true", help="copy the files instead of hard-linking them")
    runs(imp, run_import)

    runs(cmds.add_parser("list", help="show the imported weights"), run_list)

    runs(cmds.add_parser("verify", help="re-hash the stored files against the manifest"), run_verify)

    sync = cmds.add_parser(
        "import-syncnet",
        help="check and store SyncNet's published weights (syncnet_v2.model) for studio check --lse",
    )
    sync.add_argument("file", help="the syncnet_v2.model file you have (Studio never downloads it)")
    runs(sync, run_import_syncnet)


def run_import(args) -> int:
    from studio.cli._common import emit_json
    from studio.core.engines import weights
    from studio.core.errors import InputError

    if not args.folder and not args.taesd:
        raise InputError("give the MuseTalk models/ folder, --taesd DIR, or both")
    records = weights.import_models(args.folder, taesd=args.taesd, link=not args.copy)
    status = weights.availability()
    if args.json:
        names = [str(f) for f in weights.fast_files()]
        emit_json({"imported": records, "musetalk": str(status), "store": str(weights.models_root()), "fast": names})
        return 0
    for r in records:
        size = sum(f["size"] for f in r["files"].values())
        print(f"imported {r['label']:<13} {r['tensors']:>4} tensors  {_mb(size):>9}  ({r['stored']})")
    fast = weights.fast_files()
    if fast:
        size = sum(f.stat().st_size for f in fast if f.is_file())
        print(f"fast layout: {len(fast)} file(s), {_mb(size)} (fp16 safetensors, memory-mapped at load)")
    print(f"store:    {weights.models_root()}")
    print(f"musetalk: {status}")
    return 0


def run_list(args) -> int:
    from studio.cli._common import emit_json
    from studio.core.engines import weights

    comps = weights.list_models()
    status = weights.availability()
    if args.json:
        emit_json({"store": str(weights.models_root()), "components": comps, "musetalk": str(status)})
        return 0
    if not comps:
        print("no weights imported; run: studio models import DIR (the official MuseTalk models/ folder)")
    for name, r in sorted(comps.items()):
        size = sum(f["size"] for f in r["files"].values())
        wfile = next((f for f in r["files"] if not f.endswith(".json")), "")
        sha = r["files"].get(wfile, {}).get("sha256", "")[:12]
        print(f"{name:<12} {r['label']:<13} {r['tensors']:>4} tensors  {_mb(size):>9}  {wfile} {sha}")
    print(f"musetalk: {status}")
    return 0


def run_verify(args) -> int:
    from studio.cli._common import emit_json
    from studio.core.engines import weights
    from studio.core.errors import ModelError

    rows = weights.verify_store()
    bad = [r for r in rows if r["status"] != "ok"]
    if args.json:
        emit_json({"files": rows, "ok": not bad})
    else:
        for r in rows:
            print(f"{r['status']:<9} {r['file']}{'  ' + r['detail'] if r['detail'] else ''}")
        if not rows:
            print("no weights imported; nothing to verify")
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise ModelError(f"{bad[0]['file']}: {bad[0]['status']}, {bad[0]['detail']}{more}")
    return 0


def run_import_syncnet(args) -> int:
    from studio.cli._common import emit_json
    from studio.core.quality.syncnet import import_syncnet, store_dir

    record = import_syncnet(args.file)
    if args.json:
        emit_json({**record, "store": str(store_dir())})
        return 0
    pinned = "matches the pinned SHA-256" if record["pinned"] else "no published SHA-256 to compare (recorded)"
    print(f"imported {record['file']}  {_mb(record['size'])}  sha256 {record['sha256'][:16]}...  ({pinned})")
    print(f"store:   {store_dir()}")
    print("studio check VIDEO --lse now gives LSE-C and LSE-D")
    return 0


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
