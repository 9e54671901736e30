"""What ``studio serve`` was started with (shared by the app, the guard and the uploads)."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, replace
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8321
DEFAULT_MAX_UPLOAD_MB = 200
DEFAULT_MAX_QUEUED = 100


@dataclass(frozen=True)
class ServeOptions:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token: str | None = None  # None: no auth (loopback only)
    # folders under which clients may name files on the server (avatar_path, audio_path, output), real
    # paths once checked; none: clients name no paths
    allow_paths: tuple[str, ...] = ()
    max_upload_mb: float = DEFAULT_MAX_UPLOAD_MB  # per uploaded file
    max_queued: int | None = DEFAULT_MAX_QUEUED  # queued jobs before POST answers 429

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 2**20)

    @property
    def max_body_bytes(self) -> int:
        """A request carries at most an avatar and a voice-over, plus its form fields."""
        return 2 * self.max_upload_bytes + 2**20

    def check(self) -> ServeOptions:
        from studio.core.errors import InputError

        dirs = split_list(self.allow_paths) if isinstance(self.allow_paths, str) else self.allow_paths
        folders = []
        for d in dirs:
            p = Path(os.path.expanduser(d))
            if not p.is_dir():
                raise InputError(f"--allow-paths {d}: no such folder on this machine")
            folders.append(os.path.realpath(p))
        if not 0 < self.port < 65536:
            raise InputError(f"--port {self.port}: give a port between 1 and 65535")
        if self.max_upload_mb <= 0:
            raise InputError("--max-upload-mb must be more than 0")
        if self.max_queued is not None and self.max_queued < 1:
            raise InputError("--max-queued must be at least 1")
        if self.token is not None and len(self.token) < 8:
            raise InputError("--token must be at least 8 characters (use a long random one)")
        if not is_loopback(self.host) and not self.token:
            raise InputError(
                f"--host {self.host} is reachable from other machines: give --token (or set "
                "STUDIO_SERVER_TOKEN) so that only clients with the token can render"
            )
        return replace(self, allow_paths=tuple(folders))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def split_list(text: str | None) -> tuple[str, ...]:
    """``"a, b,,c"`` -> ``("a", "b", "c")`` (an option's comma-separated list)."""
    return tuple(x.strip() for x in (text or "").split(",") if x.strip())
