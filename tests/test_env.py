"""Every STUDIO_* environment variable is listed, with its default and meaning, in studio/core/env.py."""

from __future__ import annotations

import re
from pathlib import Path

from studio.core import env

ROOT = Path(__file__).resolve().parent.parent
NAME = re.compile(r"\bSTUDIO_[A-Z][A-Z0-9_]*\b")


def test_every_studio_variable_in_the_code_is_listed():
    seen: dict[str, str] = {}
    files = list((ROOT / "studio").rglob("*.py")) + list((ROOT / "packaging").rglob("*")) + [ROOT / "dev"]
    for path in files:
        if not path.is_file() or path.suffix in (".pyc", ".png", ".svg"):
            continue
        for name in NAME.findall(path.read_text(errors="replace")):
            seen.setdefault(name, str(path.relative_to(ROOT)))
    missing = {n: where for n, where in seen.items() if n not in env.KNOBS}
    assert not missing, f"list these in studio/core/env.py: {missing}"
    assert len(seen) >= 10  # the scan really looked


def test_values_defaults_and_flags(monkeypatch):
    monkeypatch.delenv("STUDIO_X264_NICE", raising=False)
    assert env.get("STUDIO_X264_NICE") == "5" and env.get_int("STUDIO_X264_NICE") == 5
    monkeypatch.setenv("STUDIO_X264_WORKERS", "many")
    assert env.get_int("STUDIO_X264_WORKERS", 3) == 3
    monkeypatch.setenv("STUDIO_VIDEO_HINTS", "off")
    assert not env.flag("STUDIO_VIDEO_HINTS")
    monkeypatch.delenv("STUDIO_VIDEO_HINTS")
    assert env.flag("STUDIO_VIDEO_HINTS")
    try:
        env.get("STUDIO_NOT_A_KNOB")
    except KeyError as exc:
        assert "studio/core/env.py" in str(exc)
    else:
        raise AssertionError("an unknown name must be refused")
    assert "| `STUDIO_HOME` |" in env.table()


def test_the_environment_page_holds_the_table():
    """docs/environment.md shows every variable as ``env.table()`` writes it (regenerate it from there)."""
    page = (ROOT / "docs" / "environment.md").read_text()
    fix = "regenerate the table: python -m studio.core.env docs/environment.md"
    assert env.table().strip() in page, fix
    assert all(f"| `{name}` |" in page for name in env.KNOBS), fix


def test_only_env_py_touches_the_environment():
    """``os.environ``, ``os.getenv`` and ``os.putenv`` appear in studio/core/env.py only: every other
    module reads a variable through its helpers (``get``, ``flag``, ``other``, ``child`` ...)."""
    import ast

    found: dict[str, list[int]] = {}
    for path in sorted((ROOT / "studio").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel == "studio/core/env.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv", "unsetenv"):
                if isinstance(node.value, ast.Name) and node.value.id == "os":
                    found.setdefault(rel, []).append(node.lineno)
            elif isinstance(node, ast.ImportFrom) and node.module == "os":
                if any(a.name in ("environ", "getenv", "putenv") for a in node.names):
                    found.setdefault(rel, []).append(node.lineno)
    assert not found, f"read these through studio/core/env.py: {found}"


def test_the_environment_helpers(monkeypatch):
    monkeypatch.setenv("STUDIO_BACKGROUND_LOAD", "")
    assert env.flag("STUDIO_BACKGROUND_LOAD")  # empty is unset: the default ("1")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert env.other("OMP_NUM_THREADS") == "3" and env.other("NOT_SET_ANYWHERE_X", "d") == "d"
    try:
        env.other("STUDIO_HOME")
    except KeyError as exc:
        assert "env.get" in str(exc)
    else:
        raise AssertionError("a STUDIO_ name goes through env.get")
    kid = env.child(STUDIO_TRACE="t.json", OMP_NUM_THREADS=None)
    assert kid["STUDIO_TRACE"] == "t.json" and "OMP_NUM_THREADS" not in kid and kid.get("PATH") == env.other("PATH")
    monkeypatch.delenv("STUDIO_TRACE", raising=False)
    with env.scoped("STUDIO_TRACE", "x"):
        assert env.get("STUDIO_TRACE") == "x"
    assert env.get("STUDIO_TRACE") == ""
