"""The process guard (hil/process_guard.py, docs/testing.md) on a real pytest run of a small test file: a test that
leaves a stopped child (SIGSTOP, the state that hung CI at interpreter exit) errors at teardown naming it, the child
is killed, and the run ends; a process a module-scoped fixture keeps for its tests is no leftover."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from hil.testing import process_alive

ROOT = Path(__file__).resolve().parents[2]
#: a whole pytest run of the small file: its start-up and three tests of a few processes each, far below this, s
RUN_DEADLINE_S = 120

SMALL_SUITE = textwrap.dedent('''
    import multiprocessing, os, signal, subprocess, sys, time
    import pytest

    SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]

    def _linger():
        time.sleep(600)

    @pytest.fixture(scope="module")
    def shared_server():
        server = subprocess.Popen(SLEEPER)
        yield server
        server.kill()
        server.wait()

    def test_leaves_a_stopped_daemonic_child(tmp_path):
        child = multiprocessing.get_context("fork").Process(target=_linger, daemon=True)
        child.start()
        os.kill(child.pid, signal.SIGSTOP)
        (tmp_path.parent / "stopped.pid").write_text(str(child.pid))

    def test_uses_the_shared_server(shared_server):
        assert shared_server.poll() is None

    def test_still_sees_the_shared_server(shared_server):
        assert shared_server.poll() is None

    def test_leaves_an_orphaned_grandchild(tmp_path):
        middle = subprocess.Popen([sys.executable, "-c",
            "import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(600)'], stdout=subprocess.DEVNULL).pid)"], stdout=subprocess.PIPE, text=True)
        (tmp_path.parent / "orphan.pid").write_text(middle.communicate()[0].strip())
''')


def test_a_stopped_child_and_an_orphan_are_killed_and_named_and_the_run_ends(tmp_path):
    (tmp_path / "test_small.py").write_text(SMALL_SUITE)
    base = tmp_path / "base"
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "hil.process_guard", "-p", "no:cacheprovider",
                          "--basetemp", str(base), "-q", "-rE", str(tmp_path / "test_small.py")],
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                         timeout=RUN_DEADLINE_S)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "4 passed, 2 errors" in out, out
    assert "ERROR at teardown of test_leaves_a_stopped_daemonic_child" in out, out
    assert "ERROR at teardown of test_leaves_an_orphaned_grandchild" in out, out
    assert "(state T)" in out, out                            # named as stopped, with its command line
    assert "the test left 1 process(es) running, killed" in out, out
    stopped = int((base / "stopped.pid").read_text())
    orphan = int((base / "orphan.pid").read_text())
    assert f"pid {orphan} (state " in out and f"{sys.executable} -c import time; time.sleep(600)" in out, out
    assert not process_alive(stopped) and not process_alive(orphan)      # gone, or zombies


BLOCKED_TEST = textwrap.dedent('''
    import signal, time

    def test_blocked_where_sigalrm_cannot_reach_it():
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])   # what a C call that retries on EINTR amounts to
        time.sleep(600)
''')


def test_a_test_that_its_timeout_cannot_interrupt_ends_the_run_with_the_stacks(tmp_path):
    """pytest-timeout's signal method never reaches a test with SIGALRM blocked; the guard's watchdog ends the run
    ``hang_grace_s`` after the test's timeout (1 s + 1 s here), with every thread's stack and status 1."""
    (tmp_path / "test_blocked.py").write_text(BLOCKED_TEST)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "hil.process_guard", "-p", "no:cacheprovider", "-q",
                          "--timeout", "1", "-o", "hang_grace_s=1", str(tmp_path / "test_blocked.py")],
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                         timeout=RUN_DEADLINE_S)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Timeout (0:00:02)!" in run.stderr and "test_blocked_where_sigalrm_cannot_reach_it" in run.stderr, \
        run.stderr
