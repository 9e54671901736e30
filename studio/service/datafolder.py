"""The data folder checked before a long-running front end starts (``studio serve``)."""

from __future__ import annotations


def check_data_folder() -> None:
    """The data folder must be writable and its job queue readable, else one sentence (exit 2): a
    read-only folder says read-only, a damaged, cut or foreign ``jobs.sqlite`` says so and is left
    as it is. A good queue is only opened (as the server will open it)."""
    from studio.core.env import data_dir, is_read_only, read_only_error
    from studio.core.store.jobs import JobStore

    home = data_dir()
    if is_read_only(home):
        raise read_only_error(home)
    JobStore()
