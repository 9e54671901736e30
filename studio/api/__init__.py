"""The HTTP render API: ``studio serve`` puts a FastAPI app on the render service.

    from studio.api.app import create_app
    from studio.api.options import ServeOptions
    app = create_app(options=ServeOptions(token="s3cret"))      # uvicorn.run(app, host=..., port=...)

    from studio.api.client import StudioClient                    # the Qt-free client (CLI, window)
    c = StudioClient("http://127.0.0.1:8321", token=None)
    job = c.submit(avatar="anna", audio="voice.flac")             # uploads, queues, returns the job

Layers: ``api`` uses ``studio.service`` (queue, warm engine pool) and ``studio.core``; it never
imports ``ui`` or ``cli``. FastAPI and uvicorn are imported only by ``app``/``server``; the client
needs only httpx.
"""
