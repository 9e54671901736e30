"""``Idempotency-Key`` on every POST that creates something: a retried request answers the first result.

    async with Idempotent(st, request, form, response) as once:   # a replay sets Idempotent-Replayed
        if once.replayed is not None:
            return answer_for(once.replayed)              # {"job_id": 7} or {"answer": {...}}
        job = await submit(...)
        once.done(job_id=job.id)                          # or once.done(answer={...})

The key (1-255 printable ASCII characters) is kept with a fingerprint of the request: every form
field's value and the SHA-256 of every uploaded file (not the raw body: a multipart boundary differs
between two sends of the same form). The same key with the same request answers what the first one
made (the same job id; ``Idempotent-Replayed: true``); with another request it is 422; while the
first is still being handled it is 409. A request that fails frees its key (a retry does the work),
so an error is never replayed. Keys are kept 24 hours, in the job store (they hold across restarts
and between servers on one data folder).
"""

from __future__ import annotations

import hashlib
import json
import re

from fastapi import UploadFile
from starlette.concurrency import run_in_threadpool

from studio.api.errors import ApiError

HEADER = "Idempotency-Key"
TTL_S = 24 * 3600.0
KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")
DOC = {
    "name": HEADER,
    "in": "header",
    "required": False,
    "description": "send the same key when retrying: the first request's result is answered (kept 24 h)",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]{1,255}$"},
}


async def fingerprint(form) -> str:
    """SHA-256 over the form's fields (uploads by their content's SHA-256)."""
    h = hashlib.sha256()
    values = dict(form) if form is not None else {}
    for name in sorted(values):
        v = values[name]
        if isinstance(v, UploadFile):
            fh = hashlib.sha256()
            await v.seek(0)
            while block := await v.read(1 << 20):
                fh.update(block)
            await v.seek(0)
            v = {"file": fh.hexdigest()}
        h.update(json.dumps([name, v], sort_keys=True, default=str).encode())
    return h.hexdigest()


class Idempotent:
    """``dead(replayed)``: the first request's work came to nothing after its key was kept (``/generate``:
    its client went away and the job was cancelled); the key is then taken again, as if it was free."""

    def __init__(self, st, request, form, response=None, scope: str | None = None, dead=None):
        self.st = st
        self.key = request.headers.get(HEADER)
        from studio.api.clients import current

        named = current().name  # a key is a client's own: another client's same key is another request
        self.scope = (scope or f"{request.method} {request.url.path}") + (f" as {named}" if named else "")
        self.form = form
        self.response = response  # a replayed answer says so in its headers (``Idempotent-Replayed: true``)
        self.replayed: dict | None = None
        self._claimed = False
        self._finished = False
        self._dead = dead
        if self.key is not None and not KEY_RE.match(self.key):
            raise ApiError(422, f"{HEADER} must be 1 to 255 printable ASCII characters (a UUID is a good key)")

    async def __aenter__(self) -> Idempotent:
        if self.key is None:
            return self
        fp = await fingerprint(self.form)
        got = await run_in_threadpool(self.st.queue.claim_key, self.scope, self.key, fp, TTL_S)
        if got is not None and not got["busy"] and got["fingerprint"] == fp and self._dead and self._dead(got):
            await self.release()  # the first request failed after all: its key is free again
            got = await run_in_threadpool(self.st.queue.claim_key, self.scope, self.key, fp, TTL_S)
        if got is None:
            self._claimed = True
            return self
        if got["fingerprint"] != fp:
            raise ApiError(
                422,
                f"{HEADER} {self.key[:64]!r} was used for another request to {self.scope.split(' ', 1)[1]} "
                "in the last 24 hours; use a new key for a new request",
            )
        if got["busy"]:
            raise ApiError(
                409,
                f"the first request with {HEADER} {self.key[:64]!r} is still being handled; retry in a moment",
                {"Retry-After": "2"},
            )
        self.replayed = {"job_id": got["job_id"], "answer": got["answer"]}
        if self.response is not None:
            self.response.headers["Idempotent-Replayed"] = "true"
        return self

    def done(self, job_id: int | None = None, answer: dict | None = None) -> None:
        if self._claimed:
            self.st.queue.finish_key(self.scope, self.key, job_id, answer)
            self._finished = True

    async def release(self) -> None:
        """Free the key: what the first request made came to nothing (a retry does the work again)."""
        if self.key is not None:
            await run_in_threadpool(self.st.queue.release_key, self.scope, self.key)

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if self._claimed and not self._finished:  # it failed (or was never finished): the key is free again
            await run_in_threadpool(self.st.queue.release_key, self.scope, self.key)
