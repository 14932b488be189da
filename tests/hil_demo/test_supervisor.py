"""The demo supervisor: a dead child is named, the others are stopped, and nothing is left behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from hil.experiment.supervisor import ChildDied, Supervisor
from hil.testing import process_alive, wait_for

SLEEPER = [sys.executable, "-c", "import time\nprint('ready', flush=True)\nwhile True: time.sleep(0.05)"]
DEADLINE_S = 15.0


def _wait_dead(pids, deadline_s=DEADLINE_S):
    return wait_for(lambda: not any(process_alive(pid) for pid in pids), deadline_s, 0.05, f"processes {pids} dead")


def test_dead_child_is_named_and_the_others_are_stopped(tmp_path):
    with Supervisor(tmp_path, say=lambda _: None) as supervisor:
        for name in ("serve", "drive", "record"):
            supervisor.start(name, SLEEPER, capture_first_line=True)
            assert supervisor.wait_first_line(name, DEADLINE_S) == "ready"
        pids = [child.pid for child in supervisor.children.values()]
        os.kill(supervisor.children["drive"].pid, signal.SIGKILL)
        with pytest.raises(ChildDied) as died:
            supervisor.wait(DEADLINE_S)
        assert "'drive'" in str(died.value) and "SIGKILL" in str(died.value)
    assert _wait_dead(pids)


def test_an_optional_child_that_dies_is_said_and_the_others_go_on(tmp_path):
    said = []
    with Supervisor(tmp_path, say=said.append) as supervisor:
        supervisor.start("serve", SLEEPER, capture_first_line=True)
        failing = "import sys; print('no display', file=sys.stderr); sys.exit(1)"
        supervisor.start("dash", [sys.executable, "-c", failing], optional=True)
        assert supervisor.wait(DEADLINE_S, until=lambda: supervisor.children["dash"].returncode() is not None)
        supervisor.wait(0.2)       # the next checks: the dead optional child is said once, nothing raised
        assert supervisor.children["serve"].returncode() is None
        died = [line for line in said if "'dash'" in line]
        assert len(died) == 1 and "exit code 1" in died[0] and "no display" in died[0]
        assert "going on without it" in died[0]


def test_stop_order_is_respected(tmp_path):
    stopped = []
    script = textwrap.dedent("""
        import signal, sys, time
        name = sys.argv[1]
        def on_int(*_):
            with open(sys.argv[2], 'a') as log:
                log.write(name + '\\n')
            sys.exit(0)
        signal.signal(signal.SIGINT, on_int)
        print('ready', flush=True)
        while True:
            time.sleep(0.05)
    """)
    order_file = tmp_path / "order.txt"
    with Supervisor(tmp_path / "logs", say=lambda _: None) as supervisor:
        for name in ("serve", "record", "drive"):
            supervisor.start(name, [sys.executable, "-c", script, name, str(order_file)], capture_first_line=True)
            supervisor.wait_first_line(name, DEADLINE_S)
        supervisor.stop_all(["drive", "serve"])
        stopped = order_file.read_text().split()
    assert stopped == ["drive", "serve", "record"]


def test_no_orphans_when_the_supervisor_is_killed(tmp_path):
    """kill -9 of the supervisor: the kernel's parent-death signal takes every child down."""
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from hil.experiment.supervisor import Supervisor
        supervisor = Supervisor(Path({str(tmp_path)!r}), say=lambda _: None)
        for name in ("a", "b"):
            supervisor.start(name, {SLEEPER!r}, capture_first_line=True)
            supervisor.wait_first_line(name, 15)
        print(" ".join(str(c.pid) for c in supervisor.children.values()), flush=True)
        supervisor.wait(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pids = [int(pid) for pid in parent.stdout.readline().split()]
    assert len(pids) == 2 and all(process_alive(pid) for pid in pids)
    parent.kill()
    parent.wait()
    assert _wait_dead(pids)


def test_the_demo_runs_everything_but_the_server_one_real_time_priority_below_it():
    """The driver's start-up at the server's own FIFO priority held the server off a core (docs/headroom.md): the
    driver and the stand-ins run one below; the normal scheduler (0) stays normal, and 1 cannot go lower."""
    from sim.cli_options import SERVER_RT_PRIORITY, below_server_priority

    assert below_server_priority(SERVER_RT_PRIORITY) == SERVER_RT_PRIORITY - 1
    assert below_server_priority(0) == 0 and below_server_priority(1) == 1


def _child_of(pid: int, deadline_s: float = DEADLINE_S) -> int:
    """The pid of the first child process of ``pid`` (waits for it to start)."""
    def first_child() -> int | None:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as handle:
                        if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                            return int(entry)
                except (OSError, IndexError, ValueError):
                    continue
        return None

    return wait_for(first_child, deadline_s, poll_s=0.05, what=f"a child process of {pid}")


def test_a_process_that_can_wait_and_what_it_starts_run_at_a_lower_weight_than_the_server(tmp_path):
    """`mms demo --background-nice N` starts the recorder and the driver (which starts the emulator) in sessions of
    nice N (docs/headroom.md): read back from /proc on the process and on the child it started; the server's session
    keeps nice 0. Raising a nice value needs no permission."""
    from sim.processes import BACKGROUND_NICE, session_nice

    starts_a_child = [sys.executable, "-c", "import subprocess, sys, time\n"
                      "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\ntime.sleep(60)"]
    with Supervisor(tmp_path, say=lambda text: None) as supervisor:
        server = supervisor.start("server", SLEEPER)
        waiter = supervisor.start("waiter", starts_a_child, session_nice=BACKGROUND_NICE)
        grandchild = _child_of(waiter.pid)
        assert session_nice(waiter.pid) == BACKGROUND_NICE
        assert session_nice(grandchild) == BACKGROUND_NICE
        assert session_nice(server.pid) == 0
