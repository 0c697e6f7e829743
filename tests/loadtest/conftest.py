"""Test servers for the load generator: real HTTP on 127.0.0.1, in a thread, stopped after each test
(``support.fakeopenai.FakeServer``)."""

from __future__ import annotations

import pytest

from support.fakeopenai import FakeServer


@pytest.fixture
def fake_server():
    servers: list[FakeServer] = []

    def make(**kw) -> FakeServer:
        s = FakeServer(**kw)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()
