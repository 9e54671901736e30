"""How a route of ``studio.api.routers`` is documented: its OpenAPI ``summary`` is the first paragraph of
its function's docstring, and its ``description`` the paragraphs after it (none where the docstring has
one paragraph), so a route decorator carries only what the route answers (path, status, model, errors)::

    router = APIRouter(tags=["audio"], route_class=Route)

    @router.get("/v1/audio", response_model=VoiceOverList, responses=errors())
    def list_audio(st: State) -> dict:
        \"\"\"The voice-overs uploaded (newest first)\"\"\"

A route that names ``summary=`` or ``description=`` keeps what it names.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from fastapi.routing import APIRoute


def docstring_parts(endpoint: Callable[..., Any]) -> tuple[str | None, str]:
    """``(summary, description)`` of a function's docstring: the first paragraph on one line (None
    without a docstring), and the rest as written."""
    doc = inspect.cleandoc(endpoint.__doc__ or "")
    head, _, rest = doc.partition("\n\n")
    summary = " ".join(line.strip() for line in head.splitlines())
    return summary or None, rest.strip()


class Route(APIRoute):
    """FastAPI's route (its documented ``route_class`` extension point) with the docstring split into
    summary and description."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        summary, description = docstring_parts(endpoint)
        kwargs["summary"] = kwargs.get("summary") or summary
        kwargs["description"] = kwargs.get("description") or description
        super().__init__(path, endpoint, **kwargs)
        self.description = kwargs["description"]  # FastAPI gives an empty one the whole docstring


def repeats_summary(operation: dict) -> bool:
    """Whether an OpenAPI operation's description only says its summary again: FastAPI 0.165 fills an
    included route's empty description with its docstring, which for a one-paragraph docstring is the
    summary (``studio.api.document`` drops such a description)."""
    text = operation.get("description")
    return text is not None and " ".join(line.strip() for line in text.splitlines()) == operation.get("summary")
