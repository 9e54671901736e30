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
DEFAULT_MAX_RETRIES = 10


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
    read_token: str | None = None  # a second token that may only read (GET): dashboards, metrics
    webhook_secret: str | None = None  # signs webhook bodies (HMAC-SHA256); None: no webhooks
    webhook_allow: tuple[str, ...] = ()  # host (default port), host:port, host:* webhooks may call (none: none)
    keep_renders_s: float | None = None  # retention: renders and uploads older than this go (None: kept)
    max_storage_gb: float | None = None  # retention: the oldest go while the data folder's files hold more
    cors_origins: tuple[str, ...] = ()  # browser origins allowed to call the API (none: CORS off)
    max_retries: int = DEFAULT_MAX_RETRIES  # times one job may be rendered again (POST .../retry), in a chain
    clients_file: str | None = None  # --clients: named clients, their tokens and scopes (TOML)
    clients: tuple = ()  # what check() read from clients_file (``studio.api.clients.Client``)
    allowed_hosts: tuple[str, ...] = ()  # Host names answered beside the server's own (studio.api.sites)
    # the engines, before /v1/ready answers 200: the default settings' and these (``decoder=sd-vae``);
    # warm_engines False: none (a test's app), the runner starts at once
    warm: tuple[str, ...] = ()
    warm_engines: bool = True
    gpus: tuple[str, ...] = ()  # devices jobs are spread over (--gpus); none: each job's own device setting
    jobs_per_device: int = 1  # jobs rendering at once on each device (their frames share batches)
    batching: bool = True  # jobs running at once on one device share the engine's batches
    open_probes: bool | None = None  # /v1/health and /v1/ready without the token (None: on for loopback)
    max_live: int = 8  # live sessions open at once before POST /v1/live answers 429 (--max-live)
    farm: str | None = None  # --farm: jobs render on a Ray cluster's actors ("" the one here; None: off)
    # slow and greedy clients (``studio.api.connections``): a request's head within header_timeout_s, a
    # body's next byte within body_timeout_s, at most max_client_connections open from one address
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_client_connections: int = 64

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
        if self.read_token is not None:
            if len(self.read_token) < 8:
                raise InputError("--read-token must be at least 8 characters (use a long random one)")
            if self.read_token == self.token:
                raise InputError("--read-token must differ from --token (it may only read)")
            if not self.token and not self.clients_file:
                raise InputError("--read-token needs --token: without a token the server is open to every request")
        allow = split_list(self.webhook_allow) if isinstance(self.webhook_allow, str) else self.webhook_allow
        allow = tuple(h.lower().strip() for h in allow)
        if allow and not self.webhook_secret:
            raise InputError(
                "--webhook-allow needs a secret to sign the calls with: give --webhook-secret "
                "(or set STUDIO_WEBHOOK_SECRET)"
            )
        if self.webhook_secret is not None and len(self.webhook_secret) < 16:
            raise InputError("--webhook-secret must be at least 16 characters (use a long random one)")
        self._check_webhook_allow(allow)
        if self.max_retries < 0:
            raise InputError("--max-retries must be 0 or more")
        if self.keep_renders_s is not None and not self.keep_renders_s > 0:
            raise InputError("--keep-renders must be more than 0 (such as 7d)")
        if self.max_storage_gb is not None and not self.max_storage_gb > 0:
            raise InputError("--max-storage-gb must be more than 0")
        origins = split_list(self.cors_origins) if isinstance(self.cors_origins, str) else self.cors_origins
        self._check_cors(origins)
        hosts = self._checked_hosts()
        clients = self._checked_clients()
        if not is_loopback(self.host) and not self.token and not clients:
            raise InputError(
                f"--host {self.host} is reachable from other machines: give --token (or set "
                "STUDIO_SERVER_TOKEN) so that only clients with the token can render"
            )
        if self.jobs_per_device < 1:
            raise InputError("--jobs-per-device must be at least 1")
        self._check_connections()
        if self.farm:
            from studio.service.farm_link import check_address

            try:
                check_address(self.farm)
            except InputError:
                raise InputError(f"--farm {self.farm}: give the farm's HOST:PORT (such as 10.0.0.5:6379)") from None
        if self.farm is not None and self.gpus:
            raise InputError("--farm and --gpus: the farm's actors use every GPU of its nodes; give one of them")
        probes = is_loopback(self.host) if self.open_probes is None else self.open_probes
        checked = replace(
            self,
            allow_paths=tuple(folders),
            webhook_allow=allow,
            cors_origins=tuple(origins),
            allowed_hosts=hosts,
            clients=tuple(clients),
            open_probes=probes,
        )
        checked.retention  # noqa: B018 - a bad STUDIO_KEEP_RENDERS is one sentence now, not at the first job
        return checked

    def _check_cors(self, origins) -> None:
        from studio.core.errors import InputError

        for o in origins:
            if o != "*" and not o.startswith(("http://", "https://")):
                raise InputError(f"--cors-origin {o}: give an origin such as https://dashboard.example (or *)")
            if o != "*" and "*" in o:
                raise InputError(
                    f"--cors-origin {o}: an origin is matched exactly (no wildcards in it); list each one, "
                    "such as https://a.example,https://b.example"
                )
        if "*" in origins and not self.token and not self.clients_file:
            raise InputError(
                "--cors-origin '*' lets any web page call this server: give --token (or --clients) too, "
                "or list the origins allowed"
            )

    def _check_connections(self) -> None:
        from studio.core.errors import InputError

        if not (0 < self.header_timeout_s <= 3600 and 0 < self.body_timeout_s <= 3600):
            raise InputError("--header-timeout and --body-timeout take 0 < SECONDS <= 3600")
        if self.max_client_connections < 1:
            raise InputError("--max-client-connections must be at least 1")

    def _check_webhook_allow(self, allow: tuple[str, ...]) -> None:
        from studio.core.errors import InputError

        for h in allow:
            host, port = webhook_rule(h)  # one sentence for a bad entry
            if isinstance(port, int) and port == self.port and (is_loopback(host) or host in (self.host, "0.0.0.0")):
                raise InputError(f"--webhook-allow {h} is this server's own address; a webhook may never call it")

    def _checked_hosts(self) -> tuple[str, ...]:
        """``--allowed-hosts``, lower case (``studio.api.sites``)."""
        from studio.core.errors import InputError

        hosts = split_list(self.allowed_hosts) if isinstance(self.allowed_hosts, str) else self.allowed_hosts
        for h in hosts:
            if h != "*" and ("/" in h or (":" in h.strip("[]") and not is_ip(h.strip("[]"))) or " " in h):
                raise InputError(
                    f"--allowed-hosts {h}: give host names such as studio.example (no scheme, port or path)"
                )
        return tuple(h.lower().strip("[]") for h in hosts)

    def _checked_clients(self) -> tuple:
        """The named clients of ``--clients`` (``studio.api.clients``), none of them with a server token."""
        from studio.core.errors import InputError

        if not self.clients_file:
            return self.clients
        from studio.api.clients import digest, load_clients

        clients = load_clients(os.path.expanduser(self.clients_file))
        for c in clients:
            if any(t and digest(t) == c.digest for t in (self.token, self.read_token)):
                raise InputError(
                    f"--clients: client {c.name} has this server's --token or --read-token; give it its own"
                )
        return clients

    @property
    def retention(self):
        """The queue's retention: this server's options, else the environment's (``STUDIO_KEEP_RENDERS``)."""
        from studio.service.retention import Retention, gb

        base = Retention.from_env()
        return Retention(
            self.keep_renders_s if self.keep_renders_s is not None else base.keep_s,
            gb(self.max_storage_gb) if self.max_storage_gb is not None else base.max_bytes,
        )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def is_ip(text: str) -> bool:
    """Whether the text is an IPv4 or IPv6 address (not a host name)."""
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def webhook_rule(entry: str) -> tuple[str, int | str | None]:
    """A ``--webhook-allow`` entry -> ``(host, port)``: ``hooks.example`` -> port None (the scheme's
    default port only), ``hooks.example:8443`` -> 8443, ``hooks.example:*`` -> ``"*"`` (any port);
    IPv6 as ``[::1]:9000`` (a bare address is one host). ``InputError`` for anything else."""
    from studio.core.errors import InputError

    e = entry.strip().lower()
    bad = InputError(
        f"--webhook-allow {entry}: give host, host:port or host:* (such as hooks.example:8443; no scheme or path)"
    )
    if e.startswith("["):
        host, _, rest = e[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise bad
        port = rest[1:] if rest else ""
    elif e.count(":") == 1:
        host, port = e.split(":")
    else:
        host, port = e, ""
    if not host or any(c in host for c in "/@?#[] "):
        raise bad
    if port == "":
        return host, None
    if port == "*":
        return host, "*"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise bad
    return host, int(port)


def split_list(text: str | None) -> tuple[str, ...]:
    """``"a, b,,c"`` -> ``("a", "b", "c")`` (an option's comma-separated list)."""
    return tuple(x.strip() for x in (text or "").split(",") if x.strip())
