"""``studio render --server URL``: the same render on a running ``studio serve``.

``studio render`` builds the same ``RenderRequest`` as for a local render, with the service's
"server" placement (``studio.service.remote``, the client the window's queue uses too): the voice-over
is uploaded once (by content), the avatar is a library name on the server or a local image/video
(uploaded), the job goes into the server's queue, the progress bar follows its events, and the
finished MP4 is downloaded to ``-o`` (written beside it, renamed when complete). Ctrl-C cancels the
job on the server. The last line (or ``--json``) is what a local render prints.
"""

from __future__ import annotations


def register(sub) -> None:
    """No sub-command of its own: ``studio render`` takes ``--server`` (``add_option``)."""


def add_option(p) -> None:
    p.add_argument(
        "--server",
        metavar="URL",
        help="render on a running `studio serve` (http://HOST:PORT; token from $STUDIO_SERVER_TOKEN)",
    )


def check_server_args(args) -> None:
    """What ``--server`` refuses before any upload: options that pick where or on which device it
    renders (the server decides), a voice-over that does not decode, a missing serve extra."""
    import importlib.util

    from studio.core.errors import InputError
    from studio.core.media.audio import probe

    elsewhere = (
        getattr(args, "farm", None) is not None,
        bool(getattr(args, "chunks", 0)),
        bool(getattr(args, "gpus", None)),
    )
    if any(elsewhere):
        raise InputError("--server renders where the server runs: leave out --farm, --chunks and --gpus")
    if getattr(args, "device", None):
        raise InputError("--server picks the device on the server: leave out --device")
    for module in ("httpx", "httpx_sse"):
        if importlib.util.find_spec(module) is None:
            raise InputError(f"--server needs the serve extra ({module} is missing): pip install 'studio[serve]'")
    probe(args.audio)  # bad audio fails here, before any upload
