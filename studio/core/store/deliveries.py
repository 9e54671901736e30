"""Saving the user's own deliveries (``studio delivery save``): checked against the settings and
written atomically into ``<data>/deliveries``. Kept apart from ``core/delivery.py`` (the shipped
presets, the lookup and the checkers that ``settings`` calls), which sits below the settings."""

from __future__ import annotations

import json
from typing import Any

from studio.core.delivery import BUILTIN, Delivery, key_of, user_dir
from studio.core.errors import InputError


def save(name: str, settings: dict[str, Any], description: str = "", *, overwrite: bool = False) -> Delivery:
    """Save the user's delivery ``name`` (checked: every value must be a valid setting)."""
    from studio.core.settings import SCHEMA, check_alias, from_dict
    from studio.core.store.fsutil import atomic_path

    path = user_path(name)
    values = check_alias({k: v for k, v in dict(settings).items() if k != "delivery"})
    if not values:
        raise InputError("a delivery needs at least one setting (such as --canvas 1920x1080 or --codec prores)")
    checked = from_dict(values, strict=True)  # one sentence for an unknown or bad setting
    values = {k: getattr(checked, k) for k in values if k in SCHEMA}
    if path.exists() and not overwrite:
        raise InputError(f"a delivery named {path.stem!r} exists; give --overwrite to replace it")
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps({"name": name, "description": description, "settings": values}, indent=2))
    return Delivery(path.stem, name, description, values, builtin=False)


def delivery_values(settings) -> dict[str, Any]:
    """The ``DELIVERY_KEYS`` of ``settings`` (a ``RenderSettings``, its delivery applied) that are not
    at their default: what the window's "Save as delivery" saves."""
    from studio.core.delivery import DELIVERY_KEYS
    from studio.core.settings import SCHEMA

    return {k: getattr(settings, k) for k in DELIVERY_KEYS if getattr(settings, k) != SCHEMA[k].default}


def user_path(name: str):
    """Where the user's delivery ``name`` is (or would be) saved; one sentence for a shipped name."""
    key = key_of(name)
    if not key or len(key) > 64:
        raise InputError("a delivery needs a name of 1 to 64 letters, digits or dashes")
    if key in BUILTIN:
        raise InputError(f"{name!r} is a delivery shipped with Studio; save yours under another name")
    return user_dir() / f"{key}.json"


def remove(name: str) -> str:
    """Remove the user's delivery ``name``; its key. One sentence for a shipped or unknown one."""
    key = key_of(name)
    if key in BUILTIN:
        raise InputError(f"{name!r} is shipped with Studio and cannot be removed")
    path = user_dir() / f"{key}.json"
    if not key or not path.is_file():
        raise InputError(f"you have no delivery named {name!r} (studio delivery list)")
    path.unlink()
    return key


def load_file(path) -> tuple[str, str, dict[str, Any]]:
    """A delivery file someone wrote by hand: (name, description, settings); one sentence if it is not one."""
    from pathlib import Path

    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(
            f"{p}: not a delivery file ({type(exc).__name__}); write JSON with name and settings"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("settings"), dict):
        raise InputError(f"{p}: a delivery file is a JSON object with 'name' and a 'settings' object")
    return str(data.get("name") or p.stem), str(data.get("description") or ""), data["settings"]
