"""``studio delivery list|show|save|remove``: the named deliveries (shipped, and the user's own)."""

from __future__ import annotations


def register(sub) -> None:
    from studio.cli._common import runs

    p = sub.add_parser("delivery", help="list, show, save or remove named deliveries (--delivery NAME)")
    dsub = p.add_subparsers(dest="delivery_command", metavar="ACTION", required=True)
    runs(dsub.add_parser("list", help="the deliveries: shipped with Studio, then yours"), run_list)
    sh = dsub.add_parser("show", help="the settings one delivery sets")
    sh.add_argument("name")
    runs(sh, run_show)
    sv = dsub.add_parser("save", help="save your own delivery: from a JSON file, or from render options")
    sv.add_argument("name")
    sv.add_argument("--from-file", metavar="FILE.json", help='{"name": ..., "description": ..., "settings": {...}}')
    sv.add_argument("--description", default="", help="one line saying what it is for")
    sv.add_argument("--overwrite", action="store_true", help="replace your delivery of that name")
    from studio.cli.render import render_options

    render_options(sv)
    sv.set_defaults(func=run_save)
    rm = dsub.add_parser("remove", help="remove one of your deliveries")
    rm.add_argument("name")
    rm.set_defaults(func=run_remove)


def run_list(args) -> int:
    from studio.cli._common import emit_json
    from studio.core.delivery import all_deliveries

    found = all_deliveries()
    if args.json:
        emit_json(
            {
                "deliveries": [
                    {
                        "name": d.name,
                        "title": d.title,
                        "description": d.description,
                        "builtin": d.builtin,
                        "settings": d.settings,
                    }  # fmt: skip
                    for d in found.values()
                ]
            }
        )
        return 0
    for d in found.values():
        print(f"{d.name:20s} {d.title + ('' if d.builtin else ' (yours)'):28s} {d.description}")
    return 0


def run_show(args) -> int:
    from studio.cli._common import emit_json
    from studio.core.delivery import resolve

    d = resolve(args.name)
    if args.json:
        emit_json({"name": d.name, "title": d.title, "description": d.description, "settings": d.settings})
    else:
        print(f"{d.title}: {d.description}")
        for k, v in d.settings.items():
            print(f"  --{k.replace('_', '-')} {v}")
    return 0


def run_save(args) -> int:
    from studio.core.errors import InputError
    from studio.core.settings import SCHEMA
    from studio.core.store import deliveries

    if args.from_file:
        _, description, values = deliveries.load_file(args.from_file)
        description = args.description or description
    else:
        description = args.description
        values = {n: getattr(args, n) for n in SCHEMA if getattr(args, n, None) is not None}
    if not values:
        raise InputError(
            "give the delivery's settings as options (--canvas 1920x1080 --codec prores ...) or --from-file"
        )
    d = deliveries.save(args.name, values, description, overwrite=args.overwrite)
    print(f"saved delivery {d.name}: {', '.join(f'{k}={v}' for k, v in d.settings.items())}")
    return 0


def run_remove(args) -> int:
    from studio.core.store import deliveries

    print(f"removed delivery {deliveries.remove(args.name)}")
    return 0
