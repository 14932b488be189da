"""A pytest plugin: no test leaves a process behind, and a leftover never hangs the run (docs/testing.md).

After each test (its teardown included: the fixtures it was the last user of are finalized by then), every live
descendant of the pytest process is a leftover unless a fixture of a wider scope than the function started it
(during its setup; it is its own until that fixture is finalized) or it is the multiprocessing module's own helper
(the resource tracker, the forkserver), which lives as long as the interpreter. A leftover, stopped ones (state T)
included, is sent SIGCONT and SIGKILL (its whole process group when that group is its own) and the test errors at
teardown naming its command line. Why: a test that SIGSTOPped the emulator's plant child and timed out left it
stopped; SIGTERM never reaches a stopped process, and at interpreter exit multiprocessing joined it forever, so CI
hung after pytest had printed its summary.

The pytest process is made a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``), so that a grandchild orphaned by a
killed child is re-parented to pytest, not to init, and stays a descendant to be found. The tree is read from
``/proc/PID/task/TID/children`` (no scan of every process on the machine). Zombies (state Z) are dead and left to
whoever waits for them: reaping a child here would take its exit status from the Popen that owns it.

Loaded by ``-p hil.process_guard`` (pyproject.toml's addopts). Linux only, like the stack it tests.
"""
from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import sys
import time

import pytest

from hil.testing import Process, read_process

#: prctl option: orphaned descendants are re-parented to this process instead of init (linux/prctl.h)
_PR_SET_CHILD_SUBREAPER = 36
#: how long a killed leftover may take to die (SIGKILL needs only its next scheduling), s
KILL_DEADLINE_S = 10.0
#: how long past its pytest-timeout a test may run before the whole run ends with every thread's stack (the ini
#: option ``hang_grace_s``): the signal method (SIGALRM) cannot interrupt a test blocked in a C call that retries on
#: EINTR without running Python's signal handlers; faulthandler's watchdog is a C thread that needs no GIL, s
HANG_GRACE_S = 60.0
#: how long the interpreter may take to exit once the session is over (joining non-daemonic threads, atexit
#: handlers such as multiprocessing's join of its children), s: past it every thread's stack is dumped and the
#: process exits with status 1
EXIT_DEADLINE_S = 60.0
#: the command lines of multiprocessing's own helper processes, started once and kept until the interpreter exits
INTERPRETER_HELPERS = ("from multiprocessing.resource_tracker import main",
                       "from multiprocessing.forkserver import main")


def children_of(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (a thread other than the main one may have started some)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found.extend(int(child) for child in handle.read().split())
        except FileNotFoundError:
            continue
    return found


def descendants(root: int) -> dict[int, Process]:
    """Every live descendant of ``root`` (zombies left out), by pid."""
    found: dict[int, Process] = {}
    pending = children_of(root)
    while pending:
        pid = pending.pop()
        process = read_process(pid)
        if process is None or pid in found:
            continue
        if process.state != "Z":
            found[pid] = process
        pending.extend(children_of(pid))
    return found


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip() or "?"
    except FileNotFoundError:
        return "(gone)"


def is_interpreter_helper(pid: int) -> bool:
    line = command_line(pid)
    return any(helper in line for helper in INTERPRETER_HELPERS)


def kill_leftovers(leftovers: list[Process], kept_groups: set[int]) -> None:
    """SIGCONT then SIGKILL to each leftover: to its process group unless that is one of ``kept_groups`` (pytest's
    own, which a child started without a session of its own is in, and those of the processes kept), else to it
    alone; then wait until each is dead (a zombie or gone)."""
    for process in leftovers:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                if process.pgid in kept_groups:
                    os.kill(process.pid, sig)
                else:
                    os.killpg(process.pgid, sig)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + KILL_DEADLINE_S
    for process in leftovers:
        while (now := read_process(process.pid)) is not None and now.key == process.key and now.state != "Z":
            if time.monotonic() > deadline:
                raise RuntimeError(f"process {process.pid} still alive {KILL_DEADLINE_S} s after SIGKILL")
            time.sleep(0.01)


def timeout_of(item) -> float:
    """The test's pytest-timeout, s (0: none): its ``timeout`` marker's first argument, else ``--timeout``, else the
    ini file's ``timeout``."""
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("timeout")
        if value is not None:
            return float(value)
    option = item.config.getoption("timeout", None)
    return float(option if option is not None else item.config.getini("timeout") or 0)


class ProcessGuard:
    """The plugin's state: the processes the wider-scoped fixtures own, and the cost of the checks."""

    def __init__(self, stderr_fd: int):
        self.root = os.getpid()
        #: the terminal's stderr, taken before any test: while a test runs, fd 2 is pytest's capture file, which
        #: faulthandler's exit would leave unread
        self.stderr_fd = stderr_fd
        self.owned: dict[object, set[tuple[int, int]]] = {}   # fixture definition -> keys of the processes it started
        self.checks = 0
        self.check_s = 0.0

    def live(self) -> dict[int, Process]:
        return descendants(self.root)

    def exempt(self, tree: dict[int, Process]) -> set[int]:
        """The pids a wider-scoped fixture owns, and everything they started."""
        owned = set().union(*self.owned.values()) if self.owned else set()
        exempt: set[int] = set()
        for pid, process in tree.items():
            walk = process
            while walk is not None:
                if walk.key in owned:
                    exempt.add(pid)
                    break
                walk = tree.get(walk.ppid)
        return exempt

    def leftovers(self) -> tuple[list[Process], set[int]]:
        """The leftovers now, and the process groups not to be killed whole (pytest's, and the kept processes')."""
        started = time.perf_counter()
        tree = self.live()
        keep = self.exempt(tree) | {pid for pid in tree if is_interpreter_helper(pid)}
        leftovers = [process for pid, process in tree.items() if pid not in keep]
        self.checks += 1
        self.check_s += time.perf_counter() - started
        return leftovers, {tree[pid].pgid for pid in keep} | {os.getpgrp()}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        timeout_s = timeout_of(item)
        if timeout_s > 0:
            grace_s = float(item.config.getini("hang_grace_s"))
            faulthandler.dump_traceback_later(timeout_s + grace_s, exit=True, file=self.stderr_fd)
        try:
            return (yield)
        finally:
            if timeout_s > 0:
                faulthandler.cancel_dump_traceback_later()

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        if fixturedef.scope == "function":
            return (yield)
        before = {p.key for p in self.live().values()}
        try:
            return (yield)
        finally:
            started = {p.key for p in self.live().values()} - before
            if started:
                self.owned.setdefault(fixturedef, set()).update(started)

    @pytest.hookimpl
    def pytest_fixture_post_finalizer(self, fixturedef, request):
        self.owned.pop(fixturedef, None)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item, nextitem):
        try:
            return (yield)
        finally:
            leftovers, kept_groups = self.leftovers()
            if leftovers:
                described = "; ".join(f"pid {p.pid} (state {p.state}): {command_line(p.pid)}" for p in leftovers)
                kill_leftovers(leftovers, kept_groups)
                pytest.fail(f"the test left {len(leftovers)} process(es) running, killed: {described}",
                            pytrace=False)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        """What outlived the last teardown (a session fixture, an interrupted run) is killed before the interpreter
        exits, where multiprocessing would join a stopped child forever; the run then fails."""
        leftovers, kept_groups = self.leftovers()
        if leftovers:
            for process in leftovers:
                print(f"\nprocess guard: killed a leftover at the end of the session: pid {process.pid} "
                      f"(state {process.state}): {command_line(process.pid)}")
            kill_leftovers(leftovers, kept_groups)
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if self.checks:
            terminalreporter.write_line(f"process guard: {self.checks} checks, {1e3 * self.check_s / self.checks:.2f}"
                                        f" ms each on average")


def pytest_addoption(parser):
    parser.addini("hang_grace_s", "s past a test's pytest-timeout after which the run ends with every thread's "
                  "stack (a test blocked where SIGALRM cannot reach it)", default=str(HANG_GRACE_S))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """The last watchdog: an exit that hangs (a thread or a child a test left, which the guard did not see) ends
    with the stacks on stderr instead of holding CI until its job limit."""
    faulthandler.dump_traceback_later(EXIT_DEADLINE_S, exit=True, file=sys.__stderr__)


def pytest_configure(config):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # pytest's capture is suspended while plug-ins are configured: fd 2 is the terminal's stderr here
    config.pluginmanager.register(ProcessGuard(os.dup(sys.stderr.fileno())), "process-guard")
