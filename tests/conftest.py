"""Fixtures shared by every test folder: a network file with free loopback ports, and a
:class:`hil.testing.Stack` of real processes and sockets (`mms drive`, `mms serve`, a sim/state publisher,
collectors), stopped at teardown. A folder's own conftest.py may define its own ``network`` (tests/hil_record
does)."""
from __future__ import annotations

from pathlib import Path

import pytest

from hil.testing import Stack, write_network

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def network(tmp_path) -> Path:
    return write_network(tmp_path / "network.toml")


@pytest.fixture
def stack(tmp_path, network):
    made = Stack(tmp_path, network, ROOT)
    yield made
    made.close()
