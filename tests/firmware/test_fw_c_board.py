"""The board port of the rig firmware (firmware_interface/firmware/rig/board/: the HAL on board support, the main
loop, a 16 KiB transmit ring) against the stub board: every shipped microcontroller rig's generated table
(python -m firmware_interface.c_firmware) compiles with it under the firmware's warnings, is accepted by the core
at power-up, and the loop runs a bounded number of passes."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from firmware_interface.c_firmware import FIRMWARE, RIG_DIR, compile_c, config_c_source
from firmware_interface.rigs.mcu import load_rig

RIGS = Path(__file__).resolve().parents[2] / "configs" / "rigs"
BOARD = RIG_DIR / "board"
PASSES = 20_000


def board_program(table_source: str, folder: Path, passes: int) -> Path:
    """The board port on the stub board with the given rig table, running ``passes`` loop passes."""
    table = folder / "rig_table.c"
    table.write_text(table_source)
    return compile_c([BOARD / "rig_board.c", BOARD / "bsp_stub.c", table, RIG_DIR / "rig_fw.c",
                      FIRMWARE / "mms_proto.c"], folder / "rig_board", "-O2", f"-DRIG_BOARD_STEPS={passes}")


@pytest.mark.parametrize("rig_file", ["flapper_rig.toml", "raybot_rig.toml"])
def test_the_board_port_builds_and_runs_on_the_stub_board_with_each_rig_table(rig_file, tmp_path):
    rig = load_rig(RIGS / rig_file)
    exe = board_program(config_c_source(rig), tmp_path, PASSES)
    # exit 0: rig_init took the table (it refuses one it cannot honour with 1) and the loop ran its passes
    assert subprocess.run([str(exe)], capture_output=True, timeout=60).returncode == 0


def test_a_table_the_firmware_cannot_honour_stops_the_board_at_power_up(tmp_path):
    rig = load_rig(RIGS / "raybot_rig.toml")
    rates = f"    {rig.telemetry_hz}, {rig.samples_per_frame}, "
    source = config_c_source(rig).replace(rates, f"    {rig.telemetry_hz}, 200, ")   # more than fit a frame
    assert source != config_c_source(rig)
    exe = board_program(source, tmp_path, 10)
    assert subprocess.run([str(exe)], capture_output=True, timeout=60).returncode == 1
