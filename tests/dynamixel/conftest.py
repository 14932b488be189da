"""Fixtures for the Dynamixel tests: a network file with free ports and a :class:`hil.testing.Stack` of real
processes and sockets (`mms drive`, `mms serve`, a sim/state publisher), stopped at teardown."""
from __future__ import annotations

from pathlib import Path

import pytest

from hil.testing import Stack, write_network

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def network(tmp_path) -> Path:
    return write_network(tmp_path / "network.toml")


@pytest.fixture
def stack(tmp_path, network):
    made = Stack(tmp_path, network, ROOT)
    yield made
    made.close()
