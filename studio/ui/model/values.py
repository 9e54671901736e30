"""The editor's values, Qt-free: every render setting the window shows, the output and placement keys
and the voice-over's marks, with which render settings the editor set (they win over the delivery's)
and what choosing a delivery changes. The ``EditorSession`` owns one (``session.settings``) and makes
each change one of its events and undo steps:

    values = SettingValues()
    values.get("crf") -> 20;  values.check("crf", "18") -> 18 (one sentence when not allowed)
    values.delivery_writes("broadcast-hd") -> [("delivery", "broadcast-hd"), ("canvas", "1920x1080"), ...]
    values.state() -> DeliveryState(...)            # one undo step of a delivery's choice
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from studio.core.errors import InputError
from studio.core.settings import SCHEMA, specs
from studio.ui.model.marks import MARK_KEYS
from studio.ui.model.output import OUTPUT_KEYS, PLACEMENT_KEYS

LABELS = {
    "folder": "Output folder",
    "pattern": "Output name",
    "overwrite": "Overwrite",
    "range_only": "Range only",
    "target": "Render on",
    "farm": "Farm address",
    "server": "Server",
    "range": "In/out",
    "markers": "Markers",
}


@dataclass(frozen=True)
class DeliveryState:
    """The delivery chosen, the render settings and which of them the editor set: the before and after
    of choosing a delivery (one undo step)."""

    name: str
    values: tuple[tuple[str, Any], ...]
    explicit: frozenset[str]


def setting_keys() -> list[str]:
    """The render settings the window shows, in the schema's order (new ones appear by themselves)."""
    return [s.name for s in specs("ui")]


def _default(key: str) -> Any:
    spec = SCHEMA[key]
    return spec.ui_default if spec.ui_default is not None else spec.default


class SettingValues:
    """The values by key, and the render settings the editor set (``explicit``)."""

    def __init__(self):
        self.data: dict[str, Any] = {spec.name: _default(spec.name) for spec in specs("ui")}
        self.data.update(OUTPUT_KEYS)
        self.data.update(PLACEMENT_KEYS)
        self.data.update(MARK_KEYS)
        self.explicit: set[str] = set()

    def get(self, key: str) -> Any:
        """The value of ``key`` (None for a setting this window does not show)."""
        return self.data.get(key)

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def keys(self) -> list[str]:
        return list(self.data)

    def values(self, keys: Iterable[str] | None = None) -> dict[str, Any]:
        return {k: self.data[k] for k in (keys if keys is not None else self.data)}

    @staticmethod
    def label(key: str) -> str:
        return SCHEMA[key].label if key in SCHEMA else LABELS.get(key, key)

    @staticmethod
    def is_setting(key: str) -> bool:
        """A render setting of the schema (the marks' "markers" is the timeline's, not the text setting)."""
        return key in SCHEMA and key not in MARK_KEYS

    @staticmethod
    def check(key: str, value: Any) -> Any:
        """``value`` of the render setting ``key`` parsed as the schema says; one sentence when not allowed."""
        spec = SCHEMA[key]
        value = spec.parse(value)
        msg = spec.problem(value)
        if msg:
            raise InputError(msg)
        return value

    def set_explicit(self, names: Iterable[str]) -> None:
        """Which settings the editor set (saved settings being loaded)."""
        self.explicit = {n for n in names if n in SCHEMA and n != "delivery"}

    # ---- the delivery ------------------------------------------------------------------------

    def delivery_writes(self, name: Any) -> list[tuple[str, Any]]:
        """What choosing the delivery ``name`` (its key or title, "" for none) writes, in order: the
        delivery's key, the settings the delivery before it set back to their default (those the editor
        did not set), the new delivery's values. One sentence when there is no such delivery."""
        from studio.core.delivery import resolve as find
        from studio.core.settings import delivery_values

        text = str(name or "").strip()
        key = find(text).name if text else ""
        try:
            old = delivery_values(self.data["delivery"])
        except InputError:  # removed meanwhile: nothing of it to take back
            old = {}
        new = delivery_values(key)
        writes: list[tuple[str, Any]] = [("delivery", key)]
        writes += [(k, _default(k)) for k in old if k not in new and k not in self.explicit and k in self.data]
        writes += [(k, v) for k, v in new.items() if k in self.data]
        return writes

    def fill_writes(self) -> list[tuple[str, Any]]:
        """The chosen delivery's values for the settings the editor did not set."""
        from studio.core.settings import delivery_values

        return [
            (k, v)
            for k, v in delivery_values(self.data["delivery"]).items()
            if k in self.data and k not in self.explicit
        ]

    def state(self) -> DeliveryState:
        """The delivery and every render setting with which of them the editor set: one undo step's value."""
        return DeliveryState(
            self.data["delivery"],
            tuple((k, self.data[k]) for k in setting_keys() if k != "delivery"),
            frozenset(self.explicit),
        )


def delivery_title(name: str) -> str:
    """A delivery's full name ("Broadcast HD") from its key; "" for none."""
    if not name:
        return ""
    from studio.core.delivery import resolve as find

    try:
        return find(name).title
    except InputError:
        return str(name)
