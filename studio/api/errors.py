"""Every error answers ``{"error": "one sentence"}`` with its status code.

Core ``StudioError`` sentences are kept as they are (they are written for users); paths of files
the server stored are replaced by what the client called them, so no server path leaks.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An HTTP error with one sentence (raised by the API's own code)."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


def error_response(status: int, message: str, headers: dict | None = None):
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=status, headers=headers)


def studio_error_status(exc) -> int:
    """The HTTP status for a core/service error."""
    from studio.core.errors import Cancelled, InputError

    name = type(exc).__name__
    if name in ("OutsideClip", "NoSuchFace"):  # a frame past the clip's end, a 3rd face of two: not there
        return 404
    if name == "QueueFull":
        return 429
    if isinstance(exc, Cancelled):
        return 409
    if isinstance(exc, InputError):
        return 422
    return 503 if name in ("ModelError",) else 500 if name == "RenderError" else 422


def install(app) -> None:
    """Register the handlers on a FastAPI app: ours, core's, HTTP's (404/405 ...), validation, bugs."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    from studio.core.errors import StudioError

    def public(request, text: str) -> str:
        st = getattr(request.app.state, "studio", None)
        return st.public_text(text) if st is not None else text

    @app.exception_handler(ApiError)
    async def _api(request, exc: ApiError):
        return error_response(exc.status, public(request, exc.message), exc.headers)

    @app.exception_handler(StudioError)
    async def _studio(request, exc: StudioError):
        return error_response(studio_error_status(exc), public(request, str(exc)))

    @app.exception_handler(HTTPException)
    async def _http(request, exc: HTTPException):
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:  # Starlette names the methods of the first route only; a path has them all
            headers = {
                **(headers or {}),
                "Allow": ", ".join(allowed_methods(request)) or (headers or {}).get("Allow", ""),
            }
        return error_response(exc.status_code, _http_sentence(exc, request), headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request, exc: RequestValidationError):
        path = request.url.path
        if path in request.app.openapi().get("paths", {}) and request.method not in (
            allowed := allowed_methods(request)
        ):
            # GET /v1/audio/speech reached GET /v1/audio/{audio_id} (Starlette takes the first route whose
            # path and method fit); the document's path takes POST only: 405, as for any other method
            sentence = f"{request.method} is not allowed on {path}; see /docs"
            return error_response(405, sentence, {"Allow": ", ".join(allowed)})
        return error_response(422, validation_sentence(exc.errors()))

    @app.exception_handler(OSError)
    async def _os(request, exc: OSError):
        import errno

        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return error_response(507, "the server's disk is full; try again once its operator has made room")
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and exc.filename:
            return error_response(507, "the server cannot write its data folder (read-only or not its own)")
        return await _bug(request, exc)

    @app.exception_handler(OverflowError)
    async def _overflow(request, exc: OverflowError):
        return error_response(422, "a number in the request is too large (ids and counts fit in 64 bits)")

    @app.exception_handler(Exception)
    async def _bug(request, exc: Exception):
        rid = getattr(request.state, "request_id", "-")
        log.error("internal error on %s %s (request_id=%s)", request.method, request.url.path, rid, exc_info=exc)
        return error_response(500, f"internal error ({type(exc).__name__}); the traceback is in the server's log")


def allowed_methods(request) -> list[str]:
    """Every method the request's path takes, from the API's document (FastAPI makes one route per
    method, and Starlette's 405 names only the first route's): GET brings HEAD."""
    import re

    methods: set[str] = set()
    paths = request.app.openapi().get("paths", {})
    path = request.url.path
    # a path of the document itself is only that one (/v1/audio/speech is not an /v1/audio/{audio_id})
    matched = (
        [paths[path]]
        if path in paths
        else [item for template, item in paths.items() if re.fullmatch(re.sub(r"\{[^/}]+\}", "[^/]+", template), path)]
    )
    for item in matched:
        methods |= {m.upper() for m in item if m in ("get", "post", "put", "patch", "delete")}
    if "GET" in methods:
        methods.add("HEAD")
    order = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
    return sorted(methods, key=order.index)


def validation_sentence(errors) -> str:
    """FastAPI's list of validation errors as one sentence about the first one."""
    if not errors:
        return "the request is not valid"
    unknown = [str(e["loc"][-1]) for e in errors if e.get("type") == "extra_forbidden" and e.get("loc")]
    if unknown:
        fields = "field" if len(unknown) == 1 else "fields"
        return f"unknown {fields} {', '.join(repr(u) for u in unknown)}: see /docs for the fields this endpoint takes"
    e = errors[0]
    loc = [str(p) for p in e.get("loc", ()) if p not in ("body", "query", "path", "header", "form")]
    where = ".".join(loc) or "the request"
    msg = str(e.get("msg", "is not valid"))
    if e.get("type") == "missing":
        return f"'{where}' is required"
    if where == "text" and e.get("type") == "string_pattern_mismatch":  # the script to speak: the CLI's sentence
        return "the script text is empty; type what the presenter says"
    if where == "text" and e.get("type") == "string_too_long":
        most = (e.get("ctx") or {}).get("max_length", "")
        return f"the script text is {len(str(e.get('input', '')))} characters; speak at most {most} at a time"
    if e.get("type") == "string_pattern_mismatch":
        pattern = (e.get("ctx") or {}).get("pattern", "")
        from studio.core.avatars.assets import NAME_PATTERN

        if where == "name" and pattern == NAME_PATTERN:  # an avatar's name: the sentence the library says
            return (
                f"'{str(e.get('input', ''))[:64]}' is not a valid avatar name; "
                "use up to 64 letters, digits, '.', '_' or '-'"
            )
        return f"'{where}' {str(e.get('input', ''))[:64]!r} is not valid: it must match {pattern}"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"'{where}': {msg[0].lower() + msg[1:] if msg else msg}{more}"


def _http_sentence(exc, request) -> str:
    detail = exc.detail if isinstance(exc.detail, str) else ""
    if exc.status_code == 404 and detail in ("", "Not Found"):
        return f"no such endpoint: {request.url.path}; see /docs"
    if exc.status_code == 405:
        return f"{request.method} is not allowed on {request.url.path}; see /docs"
    return detail or f"HTTP {exc.status_code}"
