"""`mms emulate` refuses the options the rig's kind does not take (it used to ignore them silently): one line that
names the option and what the rig takes instead, exit 2; the options both kinds take still run."""
from __future__ import annotations

from pathlib import Path

import pytest

from hil.cli import main

RIGS = Path(__file__).resolve().parents[2] / "configs" / "rigs"
#: an emulator that wrongly starts stops by itself after this, s (the test then fails on its exit code)
GUARD_S = "0.3"


@pytest.mark.parametrize("rig, option", [
    ("flapper_dynamixel_rig.toml", ["--plant", "physics"]),
    ("flapper_dynamixel_rig.toml", ["--burst-rate", "0.1"]),
    ("flapper_dynamixel_rig.toml", ["--burst-bytes", "4"]),
    ("flapper_dynamixel_rig.toml", ["--rx-byte-error-rate", "0.001"]),
    ("flapper_dynamixel_rig.toml", ["--disconnect-after", "1"]),
    ("flapper_dynamixel_rig.toml", ["--firmware", "rig_host"]),
    ("flapper_rig.toml", ["--missing-ids", "2"]),
    ("flapper_rig.toml", ["--hw-error", "0:1:32"]),
])
def test_an_option_of_the_other_kind_of_rig_is_refused(rig, option, capsys):
    code = main(["emulate", "--rig", str(RIGS / rig), "--duration", GUARD_S, *option])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"mms emulate: error: {RIGS / rig}: {option[0]}: ")
    assert ("Dynamixel bus (no plant" in err[0]) == rig.startswith("flapper_dynamixel")


def test_the_options_both_kinds_take_still_run(capsys):
    code = main(["emulate", "--rig", str(RIGS / "flapper_dynamixel_rig.toml"), "--duration", GUARD_S, "--seed", "3",
                 "--drop-rate", "0.1", "--baud", "1000000"])
    assert code == 0, capsys.readouterr().err
