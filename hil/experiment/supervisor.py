"""A process supervisor for multi-process experiments (`mms demo`).

It starts named child processes, watches their health, stops all of them when one dies (saying which one
and how), stops them in a given order on request, and never leaves orphans: every child is started with
the kernel's parent-death signal set (Linux ``PR_SET_PDEATHSIG``), so even a ``kill -9`` of the supervisor
takes its children down, and every child leads its own process group so its own children (the driver's
emulator) go with it.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable

from sim.processes import die_with_parent, lower_session_priority

#: how long a child gets to exit after SIGINT before SIGTERM, then after SIGTERM before SIGKILL, s
DEFAULT_STOP_GRACE_S = 5.0


@dataclass
class Child:
    """One supervised process: its name, command, log file and the Popen once started."""
    name: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen | None = None
    log_file: IO[bytes] | None = None
    stopping: bool = False
    optional: bool = False     # the experiment goes on without it when it ends (the dashboard)
    stop_grace_s: float = DEFAULT_STOP_GRACE_S     # after SIGINT, then after SIGTERM (:meth:`Supervisor.stop`), s
    first_line: str | None = None
    first_line_ready: threading.Event = field(default_factory=threading.Event)

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()


class ChildDied(RuntimeError):
    """A supervised process ended while the experiment was running."""

    def __init__(self, child: Child, tail: str):
        self.child = child
        code = child.returncode()
        how = f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        message = f"process '{child.name}' (pid {child.pid}) died unexpectedly ({how}); log: {child.log_path}"
        if tail:
            message += "\n  last lines of its log:\n" + "\n".join(f"    {line}" for line in tail.splitlines())
        super().__init__(message)


class Supervisor:
    """Starts, watches and stops named child processes; use as a context manager.

    ``stop_all(order)`` stops the children in ``order`` first (each given ``DEFAULT_STOP_GRACE_S`` to exit after
    SIGINT), then the rest. Leaving the ``with`` block always stops every child that is still running.
    """

    def __init__(self, log_dir: Path, say: Callable[[str], None] | None = None):
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.children: dict[str, Child] = {}
        self.say = say or (lambda text: print(text, file=sys.stderr, flush=True))

    def start(self, name: str, argv: list[str], *, capture_first_line: bool = False,
              env: dict[str, str] | None = None, optional: bool = False,
              stop_grace_s: float = DEFAULT_STOP_GRACE_S, session_nice: int = 0) -> Child:
        """Start ``argv`` as child ``name``; stdout and stderr go to ``<log_dir>/<name>.log``; ``stop_grace_s``: how
        long it gets to exit after each of SIGINT and SIGTERM when it is stopped (:meth:`stop`).

        ``session_nice`` > 0: a process that can wait; its session (the child and whatever it starts) gets that
        nice value in the fair scheduler (:func:`sim.processes.lower_session_priority`), said in one line if the
        kernel does not take it.

        With ``capture_first_line`` the child's first stdout line is kept (``wait_first_line``) and the
        rest of stdout still goes to the log. An ``optional`` child that ends is said, with its log's last lines,
        and the others go on.
        """
        child = Child(name, list(argv), self.log_dir / f"{name}.log", optional=optional, stop_grace_s=stop_grace_s)
        child.log_file = child.log_path.open("wb")
        stdout = subprocess.PIPE if capture_first_line else child.log_file
        child.process = subprocess.Popen(argv, stdout=stdout, stderr=child.log_file, stdin=subprocess.DEVNULL,
                                         preexec_fn=die_with_parent, start_new_session=True,
                                         env={**os.environ, **(env or {})})
        if capture_first_line:
            threading.Thread(target=self._pump_stdout, args=(child,), daemon=True).start()
        self.children[name] = child
        self.say(f"started {name} (pid {child.pid}): {' '.join(argv)}")
        if session_nice and not lower_session_priority(child.pid, session_nice):
            self.say(f"{name}: could not lower its session's priority to nice {session_nice}; it keeps the default")
        return child

    @staticmethod
    def _pump_stdout(child: Child) -> None:
        assert child.process is not None and child.process.stdout is not None and child.log_file is not None
        for raw in child.process.stdout:
            if child.first_line is None:
                child.first_line = raw.decode(errors="replace").strip()
                child.first_line_ready.set()
            child.log_file.write(raw)
            child.log_file.flush()
        child.first_line_ready.set()

    def wait_first_line(self, name: str, timeout_s: float) -> str:
        child = self.children[name]
        if not child.first_line_ready.wait(timeout_s) or child.first_line is None:
            self.check()
            raise TimeoutError(f"process '{name}' printed nothing within {timeout_s:.0f} s; log: {child.log_path}")
        return child.first_line

    def check(self) -> None:
        """Raise :class:`ChildDied` if any child not being stopped has ended (an optional one is said, once)."""
        for child in self.children.values():
            if not child.stopping and child.returncode() is not None:
                if child.optional:
                    child.stopping = True
                    self.say(f"{ChildDied(child, self.log_tail(child.name))}\n  going on without it")
                    continue
                raise ChildDied(child, self.log_tail(child.name))

    def wait(self, seconds: float, poll_s: float = 0.1, until: Callable[[], bool] | None = None) -> bool:
        """Watch the children for ``seconds`` (or until ``until()`` is true); raise if one dies."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.check()
            if until is not None and until():
                return True
            time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
        self.check()
        return until() if until is not None else True

    def stop(self, name: str, grace_s: float | None = None) -> int | None:
        """SIGINT the child, then SIGTERM, then SIGKILL its process group, ``grace_s`` apart (default: the child's
        own, given at :meth:`start`); return its exit code."""
        child = self.children[name]
        grace_s = child.stop_grace_s if grace_s is None else grace_s
        child.stopping = True
        process = child.process
        if process is None:
            return None
        # SIGINT and SIGTERM go to the child alone, so that it can shut its own children down in its own order
        # (the driver ramps the servos to neutral through its emulator before stopping it); SIGKILL and the
        # final sweep take the whole process group
        for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
            if process.poll() is not None:
                break
            try:
                if sig == signal.SIGKILL:
                    os.killpg(process.pid, sig)
                else:
                    process.send_signal(sig)
            except ProcessLookupError:
                break
            try:
                process.wait(wait_s)
            except subprocess.TimeoutExpired:
                self.say(f"{name} did not exit within {wait_s:.0f} s of {sig.name}")
        self._reap_group(process.pid)
        if child.log_file is not None:
            child.log_file.close()
        return process.poll()

    @staticmethod
    def _reap_group(pgid: int) -> None:
        """Kill whatever is left of a child's process group (grandchildren)."""
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def stop_all(self, order: list[str] | None = None) -> None:
        names = [n for n in (order or []) if n in self.children]
        names += [n for n in reversed(list(self.children)) if n not in names]
        for name in names:
            if self.children[name].returncode() is None or not self.children[name].stopping:
                self.stop(name)

    def log_tail(self, name: str, lines: int = 8) -> str:
        try:
            text = self.children[name].log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> "Supervisor":
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()


def mms_argv(*args: str) -> list[str]:
    """The command line of an ``mms`` sub-command run with this interpreter."""
    return [sys.executable, "-m", "hil.cli", *args]
