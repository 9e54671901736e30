"""Who is calling ``studio serve``: named clients with their own tokens and scopes, and whose jobs they see.

    clients = load_clients("clients.toml")      # --clients: InputError (one sentence) for a bad file
    who = identify(presented_token, opts, clients)   # the Client, or None (401)
    with acting_as(who): ...                   # the request's client (the Guard sets it)
    current()                                  # the client of the request being handled
    sees(job)                                  # whether that client may see and change the job

The file (TOML)::

    [clients.newsroom]
    token_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"  # sha256 of the token
    scopes = ["submit", "read"]

    [clients.ops]
    token = "a-long-random-token-of-at-least-16-characters"   # or the token itself
    scopes = ["admin"]
    weight = 2                  # its share of the device against the others' (1 by default)

Scopes: ``read`` (GET and HEAD: its jobs, their events and videos, avatars, audio), ``submit``
(everything else on its jobs: render, upload, cancel, retry, purge, frames, redeliveries), ``admin``
(every client's jobs, removing avatars from the shared library, ``/metrics``; implies the other
two). A client sees and changes only the jobs it submitted (``jobs.client`` in ``jobs.sqlite``):
another client's job is 404, as if it did not exist. ``--token`` is the admin (named ``""``, like
the jobs the window and ``studio queue`` add); ``--read-token`` reads every job (a dashboard).
Tokens are kept as their SHA-256 only and compared in constant time, each one against every
client, so the time taken does not tell which part of which token matched.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

SCOPES = ("read", "submit", "admin")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MIN_TOKEN = 16


@dataclass(frozen=True)
class Client:
    name: str  # what ``jobs.client`` records ("" for the server's own --token)
    scopes: frozenset[str]
    every_job: bool = False  # sees every client's jobs (admin, the read token)
    digest: bytes = b""  # SHA-256 of its token
    weight: float = 1.0  # its share of the device against other clients' (``studio.service.scheduler``)

    def may(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    @property
    def owner(self) -> str | None:
        """The ``client`` a job list is narrowed to (None: every job)."""
        return None if self.every_job else self.name


ADMIN = Client("", frozenset(SCOPES), every_job=True)  # --token, and a server without any token
READER = Client("", frozenset({"read"}), every_job=True)  # --read-token

_current: contextvars.ContextVar[Client] = contextvars.ContextVar("studio_api_client", default=ADMIN)


def digest(token: str | bytes) -> bytes:
    return hashlib.sha256(token if isinstance(token, bytes) else token.encode()).digest()


def load_clients(path: str | Path) -> tuple[Client, ...]:
    """The clients of a ``--clients`` TOML file; ``InputError`` (one sentence) for anything wrong."""
    from studio.core.errors import InputError
    from studio.core.store.small_files import read_small_text

    where = f"--clients {path}"
    text = read_small_text(path, where)  # a regular file of at most 1 MB: /dev/zero, a FIFO are one sentence
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{where} is not TOML ({str(exc)[:120]}); see docs/server.md for the format") from None
    table = data.get("clients")
    if not isinstance(table, dict) or not table:
        raise InputError(f"{where} names no clients: give [clients.NAME] tables with a token and scopes")
    out: list[Client] = []
    seen: dict[bytes, str] = {}
    for name, entry in table.items():
        if not NAME_RE.match(name):
            raise InputError(f"{where}: client name {name[:64]!r}: use 1-64 letters, digits, '.', '_' or '-'")
        if not isinstance(entry, dict):
            raise InputError(f"{where}: [clients.{name}] must be a table with a token and scopes")
        unknown = sorted(set(entry) - {"token", "token_sha256", "scopes", "weight"})
        if unknown:
            raise InputError(f"{where}: [clients.{name}] has unknown keys ({', '.join(unknown)})")
        token, hashed = entry.get("token"), entry.get("token_sha256")
        if (token is None) == (hashed is None):
            raise InputError(f"{where}: [clients.{name}] needs exactly one of token_sha256 (preferred) or token")
        if token is not None:
            if not isinstance(token, str) or len(token) < MIN_TOKEN:
                raise InputError(f"{where}: [clients.{name}] token must be at least {MIN_TOKEN} characters")
            d = digest(token)
        else:
            if not isinstance(hashed, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", hashed):
                raise InputError(
                    f"{where}: [clients.{name}] token_sha256 must be 64 hex digits (sha256sum of the token)"
                )
            d = bytes.fromhex(hashed)
        scopes = entry.get("scopes")
        if not isinstance(scopes, list) or not scopes or not all(s in SCOPES for s in scopes):
            raise InputError(f"{where}: [clients.{name}] scopes must be a list of {', '.join(SCOPES)}")
        if d in seen:
            raise InputError(f"{where}: clients {seen[d]} and {name} have the same token; give each its own")
        seen[d] = name
        weight = entry.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight <= 1000:
            raise InputError(
                f"{where}: [clients.{name}] weight must be a number more than 0 (1 by default), at most 1000"
            )
        out.append(Client(name, frozenset(scopes), every_job="admin" in scopes, digest=d, weight=float(weight)))
    return tuple(out)


def identify(presented: bytes, token: str | None, read_token: str | None, clients: tuple[Client, ...]):
    """The client a bearer token belongs to, or None. Every known token is compared (in constant
    time, as SHA-256 digests) whatever matched first."""
    got = digest(presented)
    found = None
    for candidate, who in ((token, ADMIN), (read_token, READER)):
        if candidate is not None and hmac.compare_digest(got, digest(candidate)) and found is None:
            found = who
    for c in clients:
        if hmac.compare_digest(got, c.digest) and found is None:
            found = c
    return found


@contextlib.contextmanager
def acting_as(client: Client):
    token = _current.set(client)
    try:
        yield client
    finally:
        _current.reset(token)


def current() -> Client:
    """The client of the request being handled (the admin outside a request: the server's own work)."""
    return _current.get()


def sees(job) -> bool:
    who = current()
    return who.every_job or getattr(job, "client", "") == who.name
