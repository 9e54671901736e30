"""The client of ``studio serve`` lives in the service (``studio.service.client``): the window's
queue renders on a server through it, and the service never imports the API. Kept here so that
``from studio.api.client import StudioClient`` goes on working."""

from studio.service.client import FINAL_STATES, ServerError, StudioClient  # noqa: F401
