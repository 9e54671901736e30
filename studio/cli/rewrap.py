"""``studio rewrap``: an MXF delivery re-wrapped by bmx as strict RDD9 (XDCAM HD422) or AS-11 (AVC-Intra)."""

from __future__ import annotations


def register(sub) -> None:
    from studio.cli._common import runs

    p = sub.add_parser(
        "rewrap",
        help="re-wrap an MXF delivery with bmx (bmxtranswrap) as strict RDD9 or AS-11, where a play-out asks for it",
    )
    p.add_argument("input", help="the .mxf Studio wrote (--delivery xdcam-hd422, avc-intra-100 ...)")
    p.add_argument("-o", "--output", required=True, help="the re-wrapped .mxf")
    p.add_argument(
        "--as", dest="kind", choices=("rdd9", "as11", "op1a"), default="rdd9", help="what to make (default rdd9)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    runs(p, run_rewrap)


def run_rewrap(args) -> int:
    from studio.core.media.mxf_rewrap import rewrap

    out = rewrap(args.input, args.output, args.kind, overwrite=args.overwrite)
    if args.json:
        from studio.cli._common import emit_json

        emit_json({"output": str(out), "as": args.kind})
    else:
        print(f"re-wrapped by bmx as {args.kind}: {out}")
    return 0
