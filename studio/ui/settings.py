"""Versioned QSettings in the data folder: one group per component, migrated at start-up.

    s = settings()                       # <data>/settings.ini (tests get their own STUDIO_HOME)
    s.beginGroup("render"); s.setValue("crf", 20); s.endGroup()

Every key the app writes is listed in ``DEFAULTS``; ``migrate`` drops keys from an older layout.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings

from studio.core.settings import specs
from studio.ui.model.output import DEFAULT_PATTERN

VERSION = 1

#: every allowed key (group/key) and its default
DEFAULTS: dict[str, object] = {
    "window/geometry": None,
    "window/state": None,
    "window/splitter": None,
    "window/screen": "",  # the available screen area the layout was left on ("1600x868")
    "folders/avatar": "",
    "folders/audio": "",
    "folders/output": "",
    "library/scripts": [],
    "library/selected_avatar": "",
    "library/selected_script": "",
    # every render setting the window shows, with the schema's default (studio.core.settings)
    **{
        f"render/{sp.name}": (
            sp.ui_default if sp.ui_default is not None else sp.auto_label if sp.default is None else sp.default
        )
        for sp in specs("ui")
    },
    "render/pattern": DEFAULT_PATTERN,
    "render/overwrite": False,  # False: a taken output name gets a number (_002)
    "queue/on_start": "ask",  # queued jobs when the window opens: ask | start | wait
    "render/target": "local",  # "local" (this computer), "gpus", "farm" (a Ray farm) or "server" (studio serve)
    "render/farm_address": "",
    "render/server_url": "",  # a `studio serve` URL for "Studio server"  # empty: the farm `studio farm up` started here; else HOST:PORT
}


def settings() -> QSettings:
    from studio.core.env import data_dir

    s = QSettings(str(data_dir() / "settings.ini"), QSettings.Format.IniFormat)
    migrate(s)
    return s


def migrate(s: QSettings) -> None:
    """Bring an older settings file to ``VERSION``: unknown keys are dropped, known ones kept."""
    try:
        stored = int(str(s.value("version", 0) or 0).strip())
    except (TypeError, ValueError):  # version=abc (a hand-edited file): read as an old file, migrated
        stored = -1
    if stored == VERSION:
        return
    for key in s.allKeys():
        if key != "version" and key not in DEFAULTS and not key.startswith("library/text/"):
            s.remove(key)
    s.setValue("version", VERSION)


def value(s: QSettings, key: str, kind=None):
    """Read ``key`` with its default from ``DEFAULTS``, converted to ``kind`` (INI stores strings)."""
    default = DEFAULTS.get(key)
    v = s.value(key, default)
    if v is None:
        return default
    kind = kind or (type(default) if default is not None else None)
    try:
        if kind is list:
            return v if isinstance(v, list) else ([v] if v else [])
        if kind is bool:
            return v in (True, "true", "1", 1)
        if kind in (int, float, str):
            return kind(v)
    except (TypeError, ValueError):
        return default
    return v


#: the session's keys that are not render settings -> their QSettings key (settings: "render/<name>")
SESSION_KEYS = {
    "folder": "folders/output",
    "pattern": "render/pattern",
    "overwrite": "render/overwrite",
    "target": "render/target",
    "farm": "render/farm_address",
    "server": "render/server_url",
}


def load_session(session, s: QSettings | None = None) -> None:
    """The saved render settings, output and placement into ``session`` (no undo steps); a value a
    hand-edited file got wrong keeps the default."""
    from studio.core.errors import InputError

    s = s or settings()
    values: dict = {}
    for spec in specs("ui"):
        raw = value(s, f"render/{spec.name}", spec.kind)
        try:
            v = spec.parse(raw)
        except InputError:
            continue
        if spec.problem(v) is None:
            values[spec.name] = v
    for key, qkey in SESSION_KEYS.items():
        values[key] = value(s, qkey)
    if not values.get("folder"):
        from studio.core.env import sub_dir

        values["folder"] = str(sub_dir("renders"))
    session.update(values)
    # which settings the editor set (over the chosen delivery's values): saved with them
    if s.contains("render/explicit"):
        session.set_explicit(n for n in str(value(s, "render/explicit") or "").split(",") if n)
    else:  # saved by an earlier Studio: the values away from their default were set, the delivery fills the rest
        from studio.core.settings import explicit_of

        session.set_explicit(explicit_of(session.render_settings()))
        session.fill_delivery()


def save_session(session, s: QSettings | None = None) -> None:
    s = s or settings()
    for spec in specs("ui"):
        v = session.value(spec.name)
        s.setValue(f"render/{spec.name}", spec.auto_label if v is None else v)
    for key, qkey in SESSION_KEYS.items():
        s.setValue(qkey, session.value(key))
    s.setValue("render/explicit", ",".join(sorted(session.explicit)))
