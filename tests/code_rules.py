"""The code rules of issue 45 (beside the layers contract): ``python tests/code_rules.py [--verbose]``.

Each rule reads the source with ``ast`` (or the import graph with grimp) and reports every place
that breaks it as ``file:line: what``. ``tests/test_rules.py`` holds them as tests; this script
prints the counts (and, with ``--verbose``, each place), exit status 1 when a rule has a place
that is not in ``BASELINE``.

1. **private-import**: no private name imported across modules. ``from m import _x``,
   ``from m import _x as y`` and ``import m._x`` (``_x`` not a dunder) anywhere in studio/ and
   tests/. Importing a private *module* from inside its own package is allowed: ``studio.cli._common``
   is the sub-commands' shared module, so ``from studio.cli._common import add_output`` in
   ``studio/cli/render.py`` is fine, the same import in ``studio/api`` is not. A private module of
   another project counts like any private name, but for ``ALLOWED_MODULES`` (each with its reason).
2. **reach-in**: no ``X._attr`` (``_attr`` not a dunder) where ``X`` is anything but ``self``,
   ``cls``, ``super()``, ``type(self)`` or, inside a class, that class's own name. A module's
   private name reached through the module (``audio._hm``) is a reach-in too, and so is one named by a
   string (``getattr(r, "_engine")``, ``monkeypatch.setattr(mod, "_cache", ...)``). ``ALLOWED_ATTRS``
   lists the few public names of other projects that begin with an underscore, each with its
   reason.
3. **cycle**: no file-level import cycle in the ``studio`` package: a strongly connected set of
   more than one module, counting imports in function bodies (grimp reads them all, as
   import-linter does). Imports under ``if TYPE_CHECKING:`` are left out: they never run, so they
   never hand a half-initialised module to anyone, and naming a type across a seam for the type
   checker (a protocol's owner, a collaborator's class) is what they are for. The layers contract
   (lint-imports) still sees them.
4. **string-import**: no ``importlib.import_module(...)``/``__import__(...)`` whose argument names a
   studio module (a string starting ``studio`` or ``.``, or built from ``__name__``/``__package__``),
   anywhere in studio/: a module loaded by string is out of lint-imports' and grimp's sight. And
   every router module in ``studio/api/routers`` is imported by an ordinary import statement of a
   studio.api module.
5. **line cap** (a warning, never a failure): modules over ``LINE_CAP`` lines are printed. The cap
   drives seams (an object that owns its part), not arbitrary splits.

Tests: test files are held to rules 1 and 2 like the code, except ``FIXTURE_FILES`` (each with the
reason it must touch a private name). A narrow, listed file set rather than a per-line marker: a
marker is one comment away from any test, a listed file is a reviewed decision in this one place.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from import_cycles import strong_components  # tests/ is on the path (as a script and under pytest)

ROOT = Path(__file__).resolve().parent.parent
LINE_CAP = 600
RULES = ("private-import", "reach-in", "cycle", "string-import")

# Names of other projects that begin with an underscore, only those Studio uses: (what they are read
# from, as written, or None for any, attribute) -> why it is not a reach-in.
ALLOWED_ATTRS: dict[tuple[str | None, str], str] = {
    ("os", "_exit"): "the documented way to end a process without cleanup (a forked child)",
    ("sys", "_current_frames"): "documented CPython API (a stack sample of every thread)",
    ("sys", "_MEIPASS"): "PyInstaller's documented bundle folder",
    # not public, used knowingly: no public way does the job
    ("atexit", "_run_exitfuncs"): "CPython's only way to run the exit handlers before os._exit (signals.quick_exit; "
    "the interpreter's teardown took 0.4-0.9 s after a cold render); unchanged since Python 2",
    (None, "_initializing"): "importlib's ModuleSpec._initializing, the one sign that a module in sys.modules is "
    "still being imported (faces.import_mediapipe waits for it instead of handing it out half-made)",
    ("pool", "_processes"): "a ProcessPoolExecutor's worker processes (scale.chunks): no public handle to kill the "
    "workers still busy after a cancel",
    ("torch.ops.aten", "_upsample_bicubic2d_aa"): "the antialiased bicubic with explicit scales (canvas.resize of a "
    "crop of the scaled whole): F.interpolate takes a size or a scale, not both; an op of torch's ATen op set",
}

# Private modules of other projects imported knowingly (no public way does the job), each with why.
ALLOWED_MODULES: dict[str, str] = {
    "ray._private.ray_constants": "scale's loopback farm: Ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER once, when "
    "ray_constants is imported; in a process that imported Ray before, only its constant ENABLE_RAY_CLUSTER makes "
    "ray start bind 127.0.0.1 (the variable covers the child processes); Ray has no public setting for it",
    "ray._private.authentication_test_utils": "tests/ray_cluster.py: Ray reads RAY_AUTH_MODE and its token once a "
    "process; Ray's own tests re-read them with reset_auth_token_state, and Ray has no public call for it",
}

# Test files that exist to touch a private name; each with its reason. Empty: no test needs it.
FIXTURE_FILES: dict[str, str] = {}

# Every place that broke a rule when the rules landed (issue 45: 15 private imports, 86 reach-ins,
# 9 cycles, 1 string import), with the helper that removed it; empty since all were removed. The
# rules fail on a place not listed here AND on a listed place that no longer occurs, so this list
# only shrinks: never add an entry; remove one in the commit that removes the place. Keys are ``path: what`` (no
# line numbers, which move); a key listed twice is two places in that file.
BASELINE: dict[str, list[tuple[str, str]]] = {
    "private-import": [],
    "reach-in": [],
    "cycle": [],
    "string-import": [],
}


@dataclass(frozen=True)
class Violation:
    rule: str
    path: str  # relative to the root, with forward slashes
    line: int
    what: str
    detail: str = ""  # shown, not part of the key (a cycle's imports)

    @property
    def key(self) -> str:
        return f"{self.path}: {self.what}"

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}" + (f" [{self.detail}]" if self.detail else "")


def is_private(name: str) -> bool:
    return name.startswith("_") and name != "_" and not (name.startswith("__") and name.endswith("__"))


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_files(root: Path, dirs: Iterable[str]) -> Iterator[Path]:
    for d in dirs:
        base = root / d
        if base.is_dir():
            yield from sorted(p for p in base.rglob("*.py") if ".venv" not in p.parts and "node_modules" not in p.parts)


class Source:
    """One parsed file and where it sits among the modules."""

    def __init__(self, path: Path, root: Path):
        self.path = path
        self.rel = path.relative_to(root).as_posix()
        self.module = module_name(path, root)
        self.is_package = path.name == "__init__.py"
        self.tree = ast.parse(path.read_text(encoding="utf-8"), str(path))

    def resolve(self, node: ast.ImportFrom) -> str:
        """The absolute module a ``from ... import`` names."""
        if not node.level:
            return node.module or ""
        base = self.module.split(".")
        if not self.is_package:
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        return ".".join([*base, node.module] if node.module else base)


def _is_module(root: Path, dotted: str) -> bool:
    p = root.joinpath(*dotted.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _private_module_part(dotted: str) -> str | None:
    """The package holding the first private component of a dotted module name, if any."""
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if is_private(part):
            return ".".join(parts[:i])
    return None


def private_imports(src: Source, root: Path) -> Iterator[Violation]:
    def check_module(dotted: str, line: int, text: str) -> Iterator[Violation]:
        owner = _private_module_part(dotted)
        if any(_inside(dotted, allowed) for allowed in ALLOWED_MODULES):
            return
        if owner is not None and not (owner and _inside(src.module, owner)):
            yield Violation("private-import", src.rel, line, f"{text} (a private module, from outside its package)")

    for node in ast.walk(src.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from check_module(alias.name, node.lineno, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            module = src.resolve(node)
            names = [f"{module}.{a.name}" for a in node.names]
            if not all(any(_inside(n, allowed) for allowed in ALLOWED_MODULES) for n in names):
                yield from check_module(
                    module, node.lineno, f"from {module} import ..."
                )  # allowed: from pkg import mod
            for alias in node.names:
                if not is_private(alias.name):
                    continue
                full = f"{module}.{alias.name}"
                if _is_module(root, full):
                    yield from check_module(full, node.lineno, f"from {module} import {alias.name}")
                else:
                    yield Violation("private-import", src.rel, node.lineno, f"from {module} import {alias.name}")


def _is_call_of(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def reach_ins(src: Source) -> Iterator[Violation]:
    """Every ``X._attr`` whose ``X`` is not the object itself (see the module's docstring)."""

    def own(value: ast.expr, classes: tuple[str, ...]) -> bool:
        if isinstance(value, ast.Name):
            return value.id in ("self", "cls") or value.id in classes
        if _is_call_of(value, "super"):
            return True
        if _is_call_of(value, "type"):
            args = value.args  # type: ignore[attr-defined]
            return len(args) == 1 and isinstance(args[0], ast.Name) and args[0].id == "self"
        return False

    def allowed(node: ast.Attribute) -> bool:
        return (None, node.attr) in ALLOWED_ATTRS or (ast.unparse(node.value), node.attr) in ALLOWED_ATTRS

    def by_name(node: ast.AST) -> tuple[ast.expr, str] | None:
        """``getattr(x, "_a")``, ``setattr``, ``hasattr``, ``delattr`` and ``monkeypatch.setattr(x, "_a", v)``:
        (x, "_a") for a private name given as a string."""
        if not isinstance(node, ast.Call) or len(node.args) < 2:
            return None
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        builtin = isinstance(f, ast.Name) and name in ("getattr", "setattr", "hasattr", "delattr")
        if not (builtin or (isinstance(f, ast.Attribute) and name in ("setattr", "delattr"))):
            return None
        attr = node.args[1]
        if isinstance(attr, ast.Constant) and isinstance(attr.value, str) and is_private(attr.value):
            return node.args[0], attr.value
        return None

    def walk(node: ast.AST, classes: tuple[str, ...]) -> Iterator[Violation]:
        if isinstance(node, ast.ClassDef):
            classes = (*classes, node.name)
        if isinstance(node, ast.Attribute) and is_private(node.attr) and not own(node.value, classes):
            if not allowed(node):
                text = ast.unparse(node)
                yield Violation("reach-in", src.rel, node.lineno, text if len(text) <= 90 else "..." + text[-87:])
        named = by_name(node)
        if named is not None and not own(named[0], classes):
            as_attr = ast.Attribute(value=named[0], attr=named[1], ctx=ast.Load())
            if not allowed(as_attr):
                assert isinstance(node, ast.Call)
                text = f"{ast.unparse(node.func)}({ast.unparse(named[0])}, {named[1]!r})"
                yield Violation("reach-in", src.rel, node.lineno, text if len(text) <= 90 else "..." + text[-87:])
        for child in ast.iter_child_nodes(node):
            yield from walk(child, classes)

    yield from walk(src.tree, ())


def _names_a_studio_module(arg: ast.expr, package: str) -> bool:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value.startswith((package, "."))
    if isinstance(arg, ast.JoinedStr) and arg.values:
        return _names_a_studio_module(arg.values[0], package)
    if isinstance(arg, ast.FormattedValue):
        return _names_a_studio_module(arg.value, package)
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add):
        return _names_a_studio_module(arg.left, package)
    return isinstance(arg, ast.Name) and arg.id in ("__name__", "__package__")


def string_imports(src: Source, package: str) -> Iterator[Violation]:
    for node in ast.walk(src.tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("import_module", "__import__") and _names_a_studio_module(node.args[0], package):
            yield Violation("string-import", src.rel, node.lineno, f"{name}({ast.unparse(node.args[0])})")


def import_graph(package: str) -> dict[str, set[str]]:
    """Every direct import between the package's modules, function bodies included, TYPE_CHECKING
    blocks left out (see the module's docstring)."""
    import grimp

    graph = grimp.build_graph(package, cache_dir=None, exclude_type_checking_imports=True)
    mods = set(graph.modules)
    return {m: {t for t in graph.find_modules_directly_imported_by(m) if t in mods} for m in mods}


def _path_of(root: Path, module: str) -> str:
    p = root.joinpath(*module.split("."))
    return (p / "__init__.py" if p.is_dir() else p.with_suffix(".py")).relative_to(root).as_posix()


def cycles(graph: dict[str, set[str]], root: Path) -> Iterator[Violation]:
    """One violation per strongly connected set of modules, reported at its first module; ``what``
    names every module of the set, the detail the imports that close it."""
    for comp in strong_components(graph):
        if len(comp) < 2:
            continue
        first = min(comp)
        edges = sorted(f"{a} -> {b}" for a in comp for b in graph[a] if b in comp)
        what = "import cycle: " + ", ".join(sorted(comp))
        yield Violation("cycle", _path_of(root, first), 1, what, ", ".join(edges))


def routers_not_imported(graph: dict[str, set[str]], root: Path, package: str) -> Iterator[Violation]:
    routers = f"{package}.api.routers"
    mods = [m for m in graph if m.startswith(routers + ".")]
    for m in sorted(mods):
        importers = [a for a, targets in graph.items() if m in targets and _inside(a, f"{package}.api")]
        if not importers:
            yield Violation(
                "string-import", _path_of(root, m), 1, f"{m} is imported by no studio.api module (loaded by string?)"
            )


@dataclass
class Report:
    violations: dict[str, list[Violation]]
    long_modules: list[tuple[str, int]]
    files: int


def scan(root: Path = ROOT, package: str = "studio", test_dirs: Iterable[str] = ("tests",)) -> Report:
    """Every rule over ``root/package`` (and the test folders for rules 1 and 2). The package must be
    importable (its parent on sys.path) for the graph."""
    found: dict[str, list[Violation]] = {r: [] for r in RULES}
    long_modules: list[tuple[str, int]] = []
    files = 0
    for path in python_files(root, [package, *test_dirs]):
        src = Source(path, root)
        files += 1
        in_package = _inside(src.module, package)
        if src.rel not in FIXTURE_FILES:
            found["private-import"] += private_imports(src, root)
            found["reach-in"] += reach_ins(src)
        if in_package:
            found["string-import"] += string_imports(src, package)
            lines = path.read_text(encoding="utf-8").count("\n")
            if lines > LINE_CAP:
                long_modules.append((src.rel, lines))
    graph = import_graph(package)
    found["cycle"] += cycles(graph, root)
    found["string-import"] += routers_not_imported(graph, root, package)
    return Report(found, sorted(long_modules, key=lambda x: -x[1]), files)


def against_baseline(rule: str, found: list[Violation], baseline: dict[str, list[tuple[str, str]]] | None = None):
    """(new places, listed places that no longer occur), compared as multisets of keys."""
    listed = Counter(key for _, key in (BASELINE if baseline is None else baseline)[rule])
    seen = Counter(v.key for v in found)
    extra = seen - listed
    new: list[Violation] = []
    for v in found:
        if extra[v.key] > 0:
            new.append(v)
            extra[v.key] -= 1
    gone = sorted((listed - seen).elements())
    return new, gone


def prune(gone: dict[str, list[str]], path: Path = Path(__file__)) -> int:
    """Delete the BASELINE entries whose places no longer occur from this file (``--prune``); the
    number deleted. Entries are found with ``ast`` (one line or wrapped by the formatter)."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    drop: list[tuple[int, int]] = []
    for node in ast.parse(text).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "BASELINE":
            assert isinstance(node.value, ast.Dict)
            for k, v in zip(node.value.keys, node.value.values, strict=True):
                rule = ast.literal_eval(k) if k is not None else None
                left = list(gone.get(rule, [])) if isinstance(rule, str) else []
                for elt in v.elts if isinstance(v, ast.List) else ():
                    key = ast.literal_eval(elt)[1]
                    if key in left:
                        left.remove(key)
                        assert elt.end_lineno is not None
                        drop.append((elt.lineno - 1, elt.end_lineno))
    for a, b in sorted(drop, reverse=True):
        del lines[a:b]
    path.write_text(
        re.sub(r"\[\n\s*\]", "[]", "".join(lines)), encoding="utf-8"
    )  # an emptied list as the formatter writes it
    return len(drop)


def owner_of(path: str) -> str:
    """Who removes a baseline entry, by the file owners of issue 45's session (anything else: rules)."""
    name = path.rsplit("/", 1)[-1]
    if path.startswith("studio/ui/") or path.startswith("tests/ui/"):
        return "window"
    if (
        path.startswith("studio/core/scale/")
        or name.startswith("farm_")
        or path in ("studio/cli/farm.py", "studio/api/routers/farm.py")
    ):
        return "farm"
    if path.startswith("studio/service/") and name in ("queue.py", "runner.py", "slots.py", "estimates.py"):
        return "queue"
    if path in ("studio/cli/render.py",) or path.startswith("studio/bench/"):
        return "gpu"
    if path in ("tests/conftest.py",):
        return "suite"
    return "rules"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--verbose", action="store_true", help="list every place")
    ap.add_argument("--root", type=Path, default=ROOT, help="the folder holding the package (and tests/)")
    ap.add_argument("--package", default="studio")
    ap.add_argument("--json", action="store_true", help="every place as JSON (the self-test reads it)")
    ap.add_argument("--baseline", action="store_true", help="print every place as a BASELINE entry")
    ap.add_argument("--prune", action="store_true", help="delete the BASELINE entries that no longer occur")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(args.root))
    report = scan(args.root, args.package)
    if args.json:
        print(json.dumps({r: [str(v) for v in vs] for r, vs in report.violations.items()}))
        return 0
    if args.baseline:
        for rule, vs in report.violations.items():
            print(f"    {rule!r}: [")
            for v in sorted(vs, key=lambda v: (owner_of(v.path), v.key)):
                print(f"        ({owner_of(v.path)!r}, {v.key!r}),")
            print("    ],")
        return 0
    if args.prune:
        gone = {rule: against_baseline(rule, vs)[1] for rule, vs in report.violations.items()}
        print(f"{prune(gone)} BASELINE entries deleted (places that no longer occur)")
        return 0
    failed = False
    print(f"{report.files} files")
    for rule, vs in report.violations.items():
        new, gone = against_baseline(rule, vs) if args.package == "studio" else (vs, [])
        failed |= bool(new or gone)
        print(f"{rule}: {len(vs)} ({len(vs) - len(new)} listed in the baseline, {len(new)} new, {len(gone)} gone)")
        if args.verbose:
            for v in vs:
                print(f"  {'NEW ' if v in new else ''}{v}")
            for key in gone:
                print(f"  GONE (remove from BASELINE) {key}")
    print(f"modules over {LINE_CAP} lines (a warning): {len(report.long_modules)}")
    for rel, n in report.long_modules:
        print(f"  {rel}: {n} lines")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
