"""The render settings as HTTP parameters, made from the one schema (``studio.core.settings``).

    params = setting_params(Form)                 # inspect.Parameter per setting, typed for OpenAPI
    params = setting_params(Query, groups=("engine", "silence"))   # what a scrub frame needs

Each setting becomes a form (or query) field with its type, default, choices (``Literal``), range
(``ge``/``le``) and help as the description, so the OpenAPI document and the checker say what the
command line and the window say. Hand-written because FastAPI has no way to turn a dataclass's
metadata into form fields mixed with file uploads (a Pydantic form model cannot sit beside ``File``
parameters in one route).
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any, Literal


def setting_annotation(spec, where) -> Any:
    """``Annotated[type, where(...)]`` for one ``Spec``."""
    kind: Any = spec.kind
    if spec.choices:
        kind = Literal[spec.choices]
    if spec.optional:
        kind = kind | None
    kw: dict[str, Any] = {"description": spec.help}
    if spec.minimum is not None:
        kw["ge"] = spec.minimum
    if spec.maximum is not None:
        kw["le"] = spec.maximum
    return Annotated[kind, where(**kw)]


def setting_params(where, groups: tuple[str, ...] | None = None) -> list[inspect.Parameter]:
    from studio.core.settings import specs

    return [
        inspect.Parameter(
            s.name, inspect.Parameter.KEYWORD_ONLY, default=s.default, annotation=setting_annotation(s, where)
        )
        for s in specs("http", groups)
    ]


def with_settings(func, where, groups: tuple[str, ...] | None = None):
    """``func`` (taking ``**settings``) with the settings' parameters added to its signature, so
    FastAPI reads, types and documents them; they reach ``func`` as keyword arguments."""
    import typing

    sig = inspect.signature(func)
    hints = typing.get_type_hints(func, include_extras=True)  # resolved: FastAPI may not see func's globals
    own = [
        p.replace(annotation=hints.get(p.name, p.annotation))
        for p in sig.parameters.values()
        if p.kind != inspect.Parameter.VAR_KEYWORD
    ]
    func.__signature__ = sig.replace(parameters=own + setting_params(where, groups))
    return func
