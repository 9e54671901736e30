"""The API's routes, one router per resource (each module's ``router``).

``renders`` (``/generate``, ``/v1/renders``), ``avatars``, ``audio``, ``voiceover`` (the waveform and
spoken text the web page uses), ``frames``, ``engines``, ``ops`` (health, readiness, metrics), ``farm``
(the Ray farm of ``studio serve --farm``) ``webhooks`` (a job's redelivery) and ``session`` (the page's media cookie). The routes are thin:
the work is the service's and the core's; they reach the shared state through the ``State``
dependency (``studio.api.state``). A route's ``operationId`` is its function's name
(``operation_id``) and its summary its function's docstring (every router's ``route_class`` is
``studio.api.route.Route``), so no route states either again.
"""


def operation_id(route) -> str:
    """The OpenAPI ``operationId`` of a route: the name of its function (``get_render``, ``list_avatars``)."""
    return route.name


def include_all(app) -> None:
    """Every router on ``app``, in the order their routes are matched. Ordinary imports, so that
    lint-imports and grimp see them (tests/code_rules.py holds that no module is loaded by string)."""
    from studio.api.routers import (
        audio,
        avatars,
        engines,
        farm,
        frames,
        live,
        ops,
        renders,
        session,
        voiceover,
        webhooks,
    )

    for module in (ops, farm, engines, avatars, audio, voiceover, frames, renders, webhooks, session, live):
        app.include_router(module.router, generate_unique_id_function=operation_id)
