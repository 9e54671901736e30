"""The render settings as Pydantic models, made from the one schema (``studio.core.settings``).

    Fields = settings_fields("http")                         # name -> (annotation, FieldInfo)
    Form = settings_model("RenderForm", "http", base=Inputs) # a form model: the inputs + every setting
    Query = settings_model("FrameQuery", "http", groups=("engine", "silence"), base=FrameInputs)
    Out = settings_model("RenderSettings", "job", strict=False)    # what a job's answer carries

Each setting becomes a field with its type, default, choices (``Literal``), range (``ge``/``le``),
label (``title``) and help (``description``), so the OpenAPI document, the generated clients and the
checker say what the command line and the window say. A setting added to ``RenderSettings`` shows up
in every model here, and so in the form, the scrub frame's query, the job answers and the document,
without a line changed in the API. Input models forbid unknown fields (a misspelt setting is 422
naming it); the values are then checked again by the core's own checker (``settings.from_dict``),
the one every face uses.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # what SQLite, JSON clients and the core store: never more


def setting_field(spec, *, defaults: bool = True) -> tuple[Any, Any]:
    """``(annotation, Field)`` for one ``Spec``. A number's range sits on the number itself (an
    optional one's auto label, ``loudness=off``, is another choice beside it)."""
    bounds: dict[str, Any] = {}
    if spec.minimum is not None:
        bounds["ge"] = spec.minimum
    if spec.maximum is not None:
        bounds["le"] = spec.maximum
    if spec.kind is int:  # a whole number past 64 bits is refused (422), never carried into SQLite
        bounds.setdefault("ge", INT64_MIN)
        bounds.setdefault("le", INT64_MAX)
    if spec.kind is float:
        bounds["allow_inf_nan"] = False  # JSON has neither; 'inf' in a form is 422, not a render
    kind: Any = Annotated[spec.kind, Field(**bounds)] if bounds else spec.kind
    if spec.choices:
        kind = Literal[spec.choices]
    if spec.optional:
        kind = kind | None
        if spec.auto_label and spec.kind is not str:  # loudness=off: how a face says None
            kind = kind | Literal[spec.auto_label]
    kw: dict[str, Any] = {"description": spec.help, "title": spec.label}
    # for the web page's form: the group (engine, silence, encode, output), what None is called, the UI default
    extra: dict[str, Any] = {"x-group": spec.group}
    if spec.auto_label:
        extra["x-auto-label"] = spec.auto_label
    if spec.ui_default is not None:
        extra["x-ui-default"] = spec.ui_default
    if spec.pattern is not None:  # the document's only (the core's checker judges, in one sentence)
        extra["pattern"] = spec.pattern() if callable(spec.pattern) else spec.pattern
    kw["json_schema_extra"] = extra
    example = spec.default if spec.default is not None else (spec.auto_label or None)
    if example is not None:
        kw["examples"] = [example]
    return kind, Field(spec.default if defaults else None, **kw)


def field_name(setting: str) -> str:
    """The model's attribute for a setting: its name, or ``name_`` (aliased to the name) where the
    name is one of ``BaseModel``'s own attributes (``copy``, ``json``, ``schema`` ...)."""
    return f"{setting}_" if hasattr(BaseModel, setting) else setting


def settings_fields(
    face: str, groups: tuple[str, ...] | None = None, also: tuple[str, ...] = ()
) -> dict[str, tuple[Any, Any]]:
    """Every setting ``face`` shows (optionally only ``groups``, plus the settings named in ``also``),
    as Pydantic field definitions."""
    from studio.core.settings import specs

    out = {}
    for s in specs(face, groups) + [s for s in specs(face) if s.name in also]:
        kind, info = setting_field(s)
        if field_name(s.name) != s.name:
            info.alias = info.validation_alias = info.serialization_alias = s.name
        out[field_name(s.name)] = (kind, info)
    return out


def settings_model(
    name: str,
    face: str,
    groups: tuple[str, ...] | None = None,
    *,
    base: type[BaseModel] | None = None,
    strict: bool = True,
    doc: str = "",
    also: tuple[str, ...] = (),
) -> type[BaseModel]:
    """A Pydantic model of the settings (on ``base``'s fields): ``strict`` forbids unknown fields
    (an input), else they are kept (an answer: a job stored by a newer Studio)."""
    config = ConfigDict(extra="forbid" if strict else "allow")
    fields = settings_fields(face, groups, also)
    if base is not None:
        clash = set(fields) & set(base.model_fields)
        if clash:
            raise TypeError(f"{name}: settings {sorted(clash)} clash with the fields of {base.__name__}")
        model = create_model(name, __base__=base, __doc__=doc or base.__doc__, **fields)  # type: ignore[call-overload]
        model.model_config.update(config)
        model.model_rebuild(force=True)
        return model
    return create_model(name, __config__=config, __doc__=doc, **fields)  # type: ignore[call-overload]


def settings_of(model: BaseModel, groups: tuple[str, ...] | None = None, face: str = "http") -> dict[str, Any]:
    """The settings' values of a parsed form/query model (those of ``groups``, and any other it has),
    for ``render.resolve`` / ``settings.from_dict``."""
    from studio.api.paths import client_path
    from studio.core.settings import specs

    shown = [
        s for s in specs(face) if groups is None or s.group in groups or field_name(s.name) in type(model).model_fields
    ]
    values = {s.name: getattr(model, field_name(s.name)) for s in shown}
    for s in shown:  # a setting naming a file on the server: the one path check, first
        if s.names_file is not None and isinstance(values[s.name], str) and s.names_file(values[s.name]):
            values[s.name] = str(client_path(values[s.name], s.name))
    return values


def sent_settings(model: BaseModel, groups: tuple[str, ...] | None = None, face: str = "http") -> set[str]:
    """The settings the client sent (its explicit ones: they win over a delivery's values, even at
    their default), of a parsed form/query model."""
    from studio.core.settings import specs

    sent = model.model_fields_set
    return {s.name for s in specs(face, groups) if field_name(s.name) in sent}
