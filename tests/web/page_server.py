"""The ``studio serve`` the page's HTTP tests talk to (``test_web_api``, ``test_web_workspace_api``):
one real server process per test module that imports these fixtures by name
(``from page_server import AUTH, READ, TOKEN, client, server, upload``), the demo avatar in its home,
a full-access token and a read-only one."""

from __future__ import annotations

import pytest
from conftest import prepare_demo_avatar
from served import Server

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

TOKEN = "page-token-0123456789"
READ = "page-read-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("page_home")
    prepare_demo_avatar(home, "astro")
    s = Server(home, "--token", TOKEN, "--read-token", READ, token=TOKEN)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as c:
        yield c


def upload(client, wav) -> dict:
    """The voice-over ``wav`` uploaded under its own file name: the server's answer (its analysis)."""
    with open(wav, "rb") as fh:
        r = client.post("/v1/audio", files={"file": (wav.name, fh)})
    assert r.status_code == 201, r.text
    return r.json()
