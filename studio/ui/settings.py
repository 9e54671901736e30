"""Versioned QSettings in the data folder: one group per component, migrated at start-up.

    s = settings()                       # <data>/settings.ini (tests get their own STUDIO_HOME)
    s.beginGroup("render"); s.setValue("crf", 20); s.endGroup()

Every key the app writes is listed in ``DEFAULTS``; ``migrate`` drops keys from an older layout.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings

from studio.core.settings import specs

VERSION = 1

#: every allowed key (group/key) and its default
DEFAULTS: dict[str, object] = {
    "window/geometry": None,
    "window/state": None,
    "window/splitter": None,
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
    "render/pattern": "{avatar}_{script}_{engine}_crf{crf}.mp4",
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
    stored = int(s.value("version", 0) or 0)
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
