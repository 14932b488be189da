"""An emulator as a child process of the driver (``--emulate``): started, its pty path read, restarted, stopped.

The rig's emulator (``mms emulate --rig RIG``) prints the path of its pseudo-terminal on its first stdout line;
the driver opens that path as the device's port. A link may run children of its own (a two-device rig's
microcontroller emulator, hil/drive/links/composite.py).
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from firmware_interface.plant import PLANT_START_TIMEOUT_S
from hil.drive.links.serial import LinkError
from hil.experiment.supervisor import mms_argv
from sim.processes import die_with_parent

#: how long `mms emulate` has to print its pty path, s: the physics plant's own start-up limit (the emulator prints
#: the path once its plant is built and its kernels compiled or loaded: a cold compile is ~22 s on an idle 2-core
#: machine, several times that under load) plus the emulator's imports, which a busy machine stretches as much. A
#: shorter limit (20 s) killed emulators that were still starting at load 25 and started them again, never up; a
#: child that dies is seen at once (its exit code), the limit is only for one that hangs
EMULATOR_START_S = PLANT_START_TIMEOUT_S + 60.0      # 60 s: its imports (`mms emulate --help` 3 s at load 15)


def emulate_argv(rig_path: str | Path, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """``mms emulate --rig RIG EXTRA...`` as an argv (any kind of rig: `mms emulate` picks the emulator)."""
    return mms_argv("emulate", "--rig", str(rig_path), *extra)


class EmulatorChild:
    """``mms emulate`` as a child process: its pty path from the first stdout line, the rest to our stderr.

    Started without blocking (:meth:`spawn`, then :meth:`poll_path` from the driver's loop), so the driver keeps
    publishing status and serving its control socket while the emulator boots.
    """

    def __init__(self, argv: list[str]):
        self.argv = list(argv)
        self.process: subprocess.Popen | None = None
        self.path: str | None = None
        self.starts = 0
        self._line = b""
        self._deadline = 0.0
        self._stats_dir: tempfile.TemporaryDirectory | None = None

    @property
    def stats_path(self) -> Path:
        """The ``--stats`` file the child rewrites every second (firmware_interface.pty_device.serve): the one
        the user gave in the emulator's arguments, else one in a temporary directory of ours."""
        given = _option_value(self.argv, "--stats")
        if given is not None:
            return Path(given)
        if self._stats_dir is None:
            self._stats_dir = tempfile.TemporaryDirectory(prefix="mms-drive-emulator-")
        return Path(self._stats_dir.name) / "stats.json"

    def read_stats(self) -> dict | None:
        """The child's latest statistics, or None (not written yet, or not JSON: a torn file cannot happen,
        the child replaces it whole, but a foreign one is not trusted)."""
        try:
            stats = json.loads(self.stats_path.read_text())
        except (OSError, ValueError):
            return None
        return stats if isinstance(stats, dict) else None

    def spawn(self, now: float) -> None:
        self.stop()
        stats = [] if _option_value(self.argv, "--stats") is not None else ["--stats", str(self.stats_path)]
        self.stats_path.unlink(missing_ok=True)         # nothing of the last child's is read as this one's
        self.process = subprocess.Popen([*self.argv, *stats], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                        preexec_fn=die_with_parent)
        self.starts += 1
        self.path, self._line, self._deadline = None, b"", now + EMULATOR_START_S

    def poll_path(self, now: float) -> str | None:
        """The pty path once the child has printed it, else None; LinkError if it died or took too long."""
        if self.path is not None:
            return self.path
        assert self.process is not None and self.process.stdout is not None
        fd = self.process.stdout.fileno()
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            self._line += chunk
            if b"\n" in self._line:
                first, rest = self._line.split(b"\n", 1)
                self.path = first.decode(errors="replace").strip()
                if rest:
                    sys.stderr.write("[emulator] " + rest.decode(errors="replace"))
                threading.Thread(target=self._pump, args=(self.process.stdout,), daemon=True).start()
                return self.path
        code = self.process.poll()
        if code is not None or now > self._deadline:
            self.stop()
            raise LinkError(f"`{' '.join(self.argv[2:])}` printed no pty path "
                            f"({'exit code ' + str(code) if code is not None else 'timeout'})")
        return None

    @staticmethod
    def _pump(stream) -> None:
        for raw in stream:
            sys.stderr.write("[emulator] " + raw.decode(errors="replace"))

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def stop(self) -> None:
        self.path = None
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(3.0)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def cleanup(self) -> None:
        """Stop the child and remove its statistics directory (at the driver's exit)."""
        self.stop()
        if self._stats_dir is not None:
            self._stats_dir.cleanup()
            self._stats_dir = None


def _option_value(argv: list[str], option: str) -> str | None:
    """The value of ``option`` in ``argv`` (``--opt VALUE`` or ``--opt=VALUE``; the last one wins), or None."""
    value = None
    for k, arg in enumerate(argv):
        if arg == option and k + 1 < len(argv):
            value = argv[k + 1]
        elif arg.startswith(option + "="):
            value = arg[len(option) + 1:]
    return value
