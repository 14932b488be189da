"""The check for Qt's system libraries before the dashboard starts (hil/qt_preflight.py): a real shared library with
a missing dependency (built by gcc, ``ldd`` asked), `mms dash` refusing in one line with the command that fixes it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hil.qt_preflight import PLUGIN_ENV, dashboard_problem, install_command, missing_libraries
from tests.conftest import MISSING_LIBRARY

ROOT = Path(__file__).resolve().parents[2]


def test_a_missing_library_is_named_with_how_to_install_it(broken_qt_plugin):
    assert missing_libraries(broken_qt_plugin, dict(os.environ)) == [MISSING_LIBRARY]
    problem = dashboard_problem({PLUGIN_ENV: str(broken_qt_plugin), "QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0",
                                 "PATH": os.environ["PATH"]})
    assert problem is not None and MISSING_LIBRARY in problem and f"apt-file search {MISSING_LIBRARY}" in problem


def test_the_xcb_libraries_map_to_their_debian_packages():
    assert install_command(["libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxcb-xinerama.so.0"]) == \
        "sudo apt-get install libxcb-icccm4 libxcb-keysyms1 libxcb-xinerama0"
    assert install_command(["libxcb-icccm.so.4", "libunknown.so.9"]) == \
        "sudo apt-get install libxcb-icccm4; apt-file search libunknown.so.9 (to find the package of each)"


def test_no_display_and_headless_platforms(tmp_path):
    fine = tmp_path / "libqxcb.so"   # a plugin whose libraries all load: the C library's own
    libc = ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6",
            "/usr/lib64/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6")
    fine.symlink_to(next(Path(p) for p in libc if Path(p).exists()))
    env = {PLUGIN_ENV: str(fine), "PATH": os.environ["PATH"]}
    assert "DISPLAY is not set" in dashboard_problem({**env, "QT_QPA_PLATFORM": "xcb"})
    assert dashboard_problem({**env, "QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0"}) is None
    assert dashboard_problem({**env, "QT_QPA_PLATFORM": "offscreen"}) is None


def test_mms_dash_refuses_in_one_line_instead_of_qts_abort(broken_qt_plugin):
    env = {**os.environ, "QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0", PLUGIN_ENV: str(broken_qt_plugin)}
    result = subprocess.run([sys.executable, "-m", "hil.cli", "dash"], capture_output=True, text=True, timeout=120,
                            env=env, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().count("\n") == 0 and MISSING_LIBRARY in result.stderr
    assert "Aborted" not in result.stderr and "Traceback" not in result.stderr
