"""A job's webhook: ``POST /v1/renders/{id}/webhook/redeliver`` asks for its calls again (the calls
themselves, their signature and their order: ``studio.api.webhooks``)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from studio.api.errors import ApiError
from studio.api.models import Job, JobId, errors
from studio.api.route import Route
from studio.api.state import State

router = APIRouter(tags=["renders"], route_class=Route)

EventQuery = Literal["done", "failed", "cancelled", "interrupted", "expired", "checked"]


@router.post(
    "/v1/renders/{job_id}/webhook/redeliver", status_code=202, response_model=Job, responses=errors(403, 404, 409, 422)
)
def redeliver_webhook(
    st: State,
    job_id: JobId,
    event: Annotated[
        EventQuery | None,
        Query(description="only this call: the job's final state, or `checked` (default: every call the job makes)"),
    ] = None,
) -> dict:
    """Call the job's webhook again (another round of tries, the same X-Studio-Delivery ids)"""
    from studio.api.webhooks import redeliver

    job = st.job(job_id)
    if st.webhooks is None:
        raise ApiError(409, "this server sends no webhooks (start it with --webhook-secret and --webhook-allow)")
    redeliver(st, job, event)
    return st.job_json(st.job(job_id))
