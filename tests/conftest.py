"""Fixtures shared by every test folder: a network file with free loopback ports, a
:class:`hil.testing.Stack` of real processes and sockets (`mms drive`, `mms serve`, a sim/state publisher,
collectors), stopped at teardown, a Qt platform plugin whose system library is missing, and the device logic
behind `mms emulate` (the Python device or the rig's C firmware, built once per session). A folder's own
conftest.py may define its own ``network`` (tests/hil_record does)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hil.testing import Stack, write_network

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def network(tmp_path) -> Path:
    return write_network(tmp_path / "network.toml")


@pytest.fixture(scope="session")
def firmware_program(tmp_path_factory) -> Path:
    """The rig's C firmware, host port (docs/firmware.md), compiled once for the whole session."""
    from firmware_interface.c_firmware import build

    return build(tmp_path_factory.mktemp("rig_host"))


@pytest.fixture(params=["python", "c"])
def emulate_device(request) -> list[str]:
    """`mms emulate` options choosing the device logic behind the pty: the Python emulator's (none) or the rig's
    C firmware's (``--firmware PROGRAM``). A test taking it runs against both: the host cannot tell them apart."""
    return [] if request.param == "python" else ["--firmware", str(request.getfixturevalue("firmware_program"))]


@pytest.fixture
def stack(tmp_path, network):
    made = Stack(tmp_path, network, ROOT)
    yield made
    made.close()


#: the shared object the fake plugin needs and nobody has: a name no package ships
MISSING_LIBRARY = "libmms-missing-for-test.so.0"


@pytest.fixture
def broken_qt_plugin(tmp_path) -> Path:
    """A real shared library, built with gcc, linked against :data:`MISSING_LIBRARY`, which is then deleted: what
    Qt's xcb plugin is on a machine without its X libraries (``ldd`` says ``not found``)."""
    folder = tmp_path / "plugin"
    folder.mkdir()
    (folder / "dependency.c").write_text("int mms_missing(void) { return 1; }\n")
    (folder / "plugin.c").write_text("int mms_missing(void);\nint mms_plugin(void) { return mms_missing(); }\n")
    dependency = folder / MISSING_LIBRARY
    subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{MISSING_LIBRARY}", "-o", str(dependency),
                    str(folder / "dependency.c")], check=True)
    plugin = folder / "libqxcb.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(plugin), str(folder / "plugin.c"), str(dependency)],
                   check=True)
    dependency.unlink()
    return plugin
