"""The farm's cluster side: joining Ray (bound to 127.0.0.1 for a local cluster) and what travels.

    init_ray("10.0.0.5:6379")     # or "auto" (the cluster `studio farm up` started here), None: a local one
    spec = ship_avatar(assets)    # an avatar's cache files in the object store, once per avatar version
    assets, fetched = local_avatar(spec)   # on a replica: the head's folder when its node shares it, else a copy
    ship_file("voice.wav"); local_file(spec)

Local clusters bind 127.0.0.1 only and run without the dashboard. The avatar cache travels once per
node: a replica fetches its files only when its node holds no copy yet (a shared folder with the same
cache, or an earlier replica on that node, needs no transfer). Model weights are read from each node's
own model store (``studio models import`` there, or a shared ``STUDIO_HOME``).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from studio.core.errors import RenderError
from studio.core.scale.chunks import avatar_reference

log = logging.getLogger(__name__)

NAMESPACE = "studio"


def ray_available() -> tuple[bool, str]:
    """(importable, why not): the farm needs the ``farm`` extra (``pip install 'studio[farm]'``)."""
    try:
        import ray  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return False, f"ray is not installed ({type(exc).__name__}: {exc}); pip install 'studio[farm]'"
    return True, "ray importable"


def init_ray(address: str | None = None, *, num_cpus: int | None = None, num_gpus: int | None = None) -> str:
    """Connect to the cluster at ``address`` ("auto": the one started on this host), or start a
    local one bound to 127.0.0.1 without the dashboard when ``address`` is None."""
    ok, why = ray_available()
    if not ok:
        raise RenderError(f"The render farm needs Ray: {why}.")
    import ray

    if ray.is_initialized():
        return "already connected"
    common: dict[str, Any] = dict(namespace=NAMESPACE, configure_logging=False, log_to_driver=False)
    if address:
        if address == "auto" or address.split(":")[0] in LOOPBACK:
            loopback_only()
        if address != "auto":
            _check_reachable(address)
            _token_auth_as_for_auto()
        try:
            ray.init(address=address, **common)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise RenderError(f"No Ray cluster answers at {address} ({exc}): start one with `studio farm up`.") from exc
        return f"joined {address}"
    loopback_only()
    # "local": a new cluster even where `studio farm up` runs one (or left its address file behind)
    ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, **common)
    return "local cluster on 127.0.0.1"


def _token_auth_as_for_auto() -> None:
    """Send this host's Ray token to a HOST:PORT farm too, as Ray itself does for "auto".

    ``studio farm up`` clusters use Ray's token authentication when a token exists
    (``~/.ray/auth_token``, ``RAY_AUTH_TOKEN[_PATH]``); Ray enables it in the driver only when it
    finds the cluster itself, so a HOST:PORT connection was refused ("InvalidAuthToken").
    """
    from studio.core import env

    if env.other("RAY_AUTH_MODE"):
        return
    if (
        env.other("RAY_AUTH_TOKEN")
        or env.other("RAY_AUTH_TOKEN_PATH")
        or (Path.home() / ".ray" / "auth_token").is_file()
    ):
        env.put("RAY_AUTH_MODE", "token")


LOOPBACK = ("127.0.0.1", "localhost")


def _check_reachable(address: str, timeout: float = 3.0) -> None:
    """Fail in seconds, not after Ray's long connection retries, when nothing listens at ``address``."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            return
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise RenderError(f"No Ray cluster answers at {address} ({reason}): start one with `studio farm up`.") from exc


def loopback_only() -> dict:
    """Make Ray processes started from here use 127.0.0.1 as the node address and listen on it only.

    Ray turns an explicit 127.0.0.1 into the host's public address (so that clusters work), but
    on its loopback setting (the one it uses on macOS/Windows) every server binds 127.0.0.1.
    Returns the environment entry for Ray processes started as commands (``ray start``).
    """
    from studio.core.env import put

    env = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    for name, value in env.items():
        put(name, value)
    with contextlib.suppress(Exception):
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False  # read at call time; the variable covers child processes
    return env


# ------------------------------------------------------------------------------------------------
# What travels: the avatar cache folder and the audio file, once per job through the object store


def ship_avatar(assets) -> dict:
    """An avatar's cache files in the object store, and where the driver has them (``local_avatar``
    on a worker reads the driver's folder when its node shares it, else fetches the files once)."""
    import ray

    folder, name = avatar_reference(assets)
    files = {}
    for p in sorted(Path(folder).rglob("*")):
        if p.is_file() and not p.name.startswith("."):
            files[str(p.relative_to(folder))] = p.read_bytes()
    return dict(key=avatar_key(folder), folder=folder, name=name, files=[ray.put(files)])  # a list: not resolved by Ray


def avatar_key(folder) -> str:
    """An avatar cache version: its meta.json holds every file's size and checksum."""
    return hashlib.sha256((Path(folder) / "meta.json").read_bytes()).hexdigest()[:24]


def ship_file(path) -> dict:
    """A file (the voice-over) in the object store, keyed by its content (``local_file`` on a worker)."""
    import ray

    path = Path(path)
    data = path.read_bytes()
    return dict(key=hashlib.sha256(data).hexdigest()[:24], name=path.name, data=[ray.put(data)])


def local_avatar(spec: dict):
    """``(assets, fetched)``: the shipped avatar on this node: the driver's folder when this node
    shares it, else a node-local copy made once from the object store (``fetched`` = 1 then) and
    reused by every worker and job here."""
    from studio.core.env import sub_dir
    from studio.core.scale.chunks import open_avatar

    src = Path(spec["folder"])
    meta = src / "meta.json"
    if meta.is_file() and avatar_key(src) == spec["key"]:
        return open_avatar((str(src), spec["name"])), 0
    dest = sub_dir("cache/farm/avatars") / spec["key"]
    fetched = 0
    if not (dest / "meta.json").is_file():
        import ray

        fetched = 1
        files = ray.get(spec["files"][0])
        tmp = Path(tempfile.mkdtemp(prefix=".incoming.", dir=dest.parent))
        for rel, data in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)
        try:
            os.replace(tmp, dest)
        except OSError:  # another worker on this node was first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return open_avatar((str(dest), spec["name"])), fetched


def local_file(spec: dict) -> str:
    """The shipped file on this node (fetched once into ``<data>/cache/farm/audio``)."""
    from studio.core.env import sub_dir

    suffix = Path(spec["name"]).suffix
    dest = sub_dir("cache/farm/audio") / f"{spec['key']}{suffix}"
    if not dest.is_file():
        import ray

        from studio.core.store.fsutil import atomic_write_bytes

        atomic_write_bytes(dest, ray.get(spec["data"][0]))
    return str(dest)
