"""Count the import cycles across studio.core's packages (issue 34): ``python tests/import_cycles.py``.

Every import counts, the ones inside function bodies too (grimp reads them all, as import-linter
does). Two figures, both printed, both zero when the core has a floor:

- package cycles: simple cycles of the graph whose nodes are the core's packages and top-level
  modules (``media``, ``store``, ``settings`` ...), an edge wherever one module of a package
  imports a module of another;
- module knots: strongly connected sets of modules (each reaches every other through imports)
  that span more than one of those packages, with their size (issue 34 found one of 14 files).

Exit status 1 when either is not zero. ``--verbose`` lists them.
"""

from __future__ import annotations

import sys
from collections import defaultdict

ROOT = "studio.core"


def package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if module.startswith(ROOT + ".") and len(parts) > 2 else None


def module_graph() -> dict[str, set[str]]:
    """Every direct import between modules of the core (function-level imports included)."""
    import grimp

    graph = grimp.build_graph("studio", cache_dir=None)
    core = {m for m in graph.modules if package_of(m)}
    return {m: {t for t in graph.find_modules_directly_imported_by(m) if t in core} for m in core}


def package_graph(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for m, targets in modules.items():
        a = package_of(m)
        assert a is not None
        out[a]
        out[a] |= {b for t in targets if (b := package_of(t)) and b != a}
    return dict(out)


def simple_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle, each once (started at its smallest node). The package graph has
    about 15 nodes, so a depth-first walk from each node is enough; no library needed."""
    found: list[list[str]] = []
    nodes = sorted(graph)

    def walk(start: str, node: str, path: list[str], on_path: set[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                found.append([*path])
            elif nxt > start and nxt not in on_path:
                on_path.add(nxt)
                walk(start, nxt, [*path, nxt], on_path)
                on_path.discard(nxt)

    for s in nodes:
        walk(s, s, [s], {s})
    return found


def strong_components(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    comps: list[set[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.add(m)
                    if m == node:
                        break
                comps.append(comp)
    return comps


def main(argv: list[str]) -> int:
    modules = module_graph()
    cycles = simple_cycles(package_graph(modules))
    knots = [c for c in strong_components(modules) if len({package_of(m) for m in c}) > 1]
    print(f"{len(modules)} core modules, {len(package_graph(modules))} core packages and top-level modules")
    print(f"package cycles: {len(cycles)}")
    print(f"module knots across packages: {len(knots)}" + (f" (sizes {sorted(map(len, knots))})" if knots else ""))
    if "--verbose" in argv:
        for c in cycles:
            print("  cycle: " + " -> ".join([*c, c[0]]))
        for k in knots:
            print("  knot: " + ", ".join(sorted(m.removeprefix(ROOT + ".") for m in k)))
    return 1 if cycles or knots else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
