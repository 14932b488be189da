"""Every ``mms`` command reads its arguments before its heavy imports: ``--help`` and a bad argument answer at once,
in a fresh interpreter, with none of :data:`HEAVY_MODULES` imported by the time the parser prints or fails
(hil/cli.py imports a command's module only after its parser, from the light ``parser`` module, has parsed).
The start-up times are benchmarks/bench_cli_start.py's."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hil.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]

#: top-level packages a parser must not import: the simulator's compiled kernels (numba), scipy, numpy, the
#: messaging (zmq, msgpack), recordings (mcap, h5py), plots and Qt, the study cluster (dask) and the references
HEAVY_MODULES = ("numba", "scipy", "numpy", "zmq", "msgpack", "mcap", "h5py", "matplotlib", "PyQt5", "pyqtgraph",
                 "OpenGL", "dask", "distributed", "pinocchio", "elastica", "tqdm")

#: one argument each command refuses, and what its error line says
BAD_ARGUMENTS: dict[str, list[str]] = {
    "sim": ["flapper", "--duration", "soon"],
    "check": ["flapper", "--seed", "x"],
    "sweep": ["flapper", "--frequencies", "fast"],
    "serve": ["pendulum", "--rate", "-5"],
    "emulate": ["--rig", "flapper", "--baud", "fast"],
    "drive": ["--rig", "flapper", "--hold", "long"],
    "dash": ["--fps", "-1"],
    "record": ["--max-backlog", "lots"],
    "export": ["run.mcap", "--to", "xls"],
    "validate": ["run.mcap", "--plots", "some"],
    "identify": ["run.mcap", "--params", "aero.rho_air", "--stride", "every"],
    "keys": ["--dri", "keys"],
    "bridge": ["--foxglove", "70000"],
    "urdf": ["zeppelin"],
    "demo": ["--duration", "long"],
}

#: runs ``hil.cli.main(argv[2:])`` and prints, as it exits, the heavy modules (argv[1], comma-separated) it holds
PROBE = """
import atexit, sys
heavy = set(sys.argv[1].split(","))
atexit.register(lambda: print("heavy imported:", sorted({name.split(".")[0] for name in sys.modules} & heavy)))
from hil.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _mms(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE, ",".join(HEAVY_MODULES), *argv], cwd=ROOT, text=True,
                          capture_output=True, timeout=120)


def test_every_command_has_a_bad_argument():
    assert set(BAD_ARGUMENTS) == set(COMMANDS)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_prints_before_the_heavy_imports(command):
    done = _mms(command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: mms {command} "), done.stdout
    assert done.stdout.splitlines()[-1] == "heavy imported: []", done.stdout


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_bad_argument_is_one_line_before_the_heavy_imports(command):
    done = _mms(command, *BAD_ARGUMENTS[command])
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"mms {command}: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == "heavy imported: []\n", done.stdout


def test_the_demo_parser_names_the_demos_set_ups():
    """``mms demo --rig``'s set-up names (hil/experiment/demo_args.py) are the demo's own, each on its rig."""
    from hil.experiment.demo import RIGS
    from hil.experiment.demo_args import SETUP_RIGS, demo_rig_path

    assert list(SETUP_RIGS) == list(RIGS)
    for name, setup in RIGS.items():
        assert demo_rig_path(name).samefile(setup.rig), name
