"""What ``studio serve`` was started with (shared by the app, the guard and the uploads)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8321
DEFAULT_MAX_UPLOAD_MB = 200
DEFAULT_MAX_QUEUED = 100


@dataclass(frozen=True)
class ServeOptions:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token: str | None = None  # None: no auth (loopback only)
    allow_paths: bool = False  # let clients name files on the server (avatar_path, audio_path, output)
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
        return self


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything
