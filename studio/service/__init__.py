"""The render service, Qt-free: what every front end (window, command line, HTTP server) runs on.

    request.RenderRequest / Placement   what to render, with which settings, which frames, and where
    driver.Render                       one driver for every placement: run() -> Progress ..., cancel(), result
    pool.EnginePool / default_pool      warm engines keyed by everything that picks one; scrub frames
    queue.QueueService                  the job queue over jobs.sqlite: add, cancel, retry, hold, move, run
    preflight.preflight                 everything a render would refuse later, refused before it is queued

Layers: ``ui``, ``cli`` and ``api`` import this package's modules; it imports ``core``; ``core``
imports neither (``tests/test_architecture.py`` checks it). Each name is imported from its module
(``from studio.service.queue import QueueService``), so ``import studio.service`` loads nothing and
the import checkers see every edge (no module ``__getattr__``).
"""
