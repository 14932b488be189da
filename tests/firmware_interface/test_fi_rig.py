"""Rig files (firmware_interface/rigs/mcu.py, docs/rigs.md): the shipped rigs load, bad files fail in one line."""
from __future__ import annotations

import math
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from firmware_interface import protocol as p
from firmware_interface.rigs.mcu import RIG_KIND, load_rig
from sim.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
# Rig files of this loader's kind (other kinds, e.g. "dynamixel" bus rigs, have their own loaders and tests).
RIGS = sorted(r for r in (ROOT / "configs" / "rigs").glob("*.toml")
              if tomllib.loads(r.read_text()).get("rig", {}).get("kind", RIG_KIND) == RIG_KIND)
FLAPPER = ROOT / "configs" / "rigs" / "flapper_rig.toml"


def test_both_rigs_ship():
    assert {r.name for r in RIGS} >= {"flapper_rig.toml", "raybot_rig.toml"}


@pytest.mark.parametrize("path", RIGS, ids=lambda r: r.stem)
def test_shipped_rig_is_consistent(path):
    rig = load_rig(path)
    assert rig.protocol_version == p.PROTOCOL_VERSION
    for s in rig.servos:
        for angle in (s.min_rad, s.neutral_rad, s.max_rad):
            assert s.min_raw <= s.to_raw(angle) <= s.max_raw
            assert math.isclose(s.to_rad(s.to_raw(angle)), angle, abs_tol=1e-12)
    for jm in rig.joints:
        assert math.isclose(jm.joint_angle(jm.servo_angle(0.3)), 0.3)
    # the configured telemetry fits the link: frame bytes per second below the UART's byte rate
    per_frame = (p.HEADER_BYTES + 5 + p.CRC_BYTES + rig.samples_per_frame
                 * p.telemetry_sample_bytes(len(rig.servos), len(rig.strain), len(rig.load)))
    wire_bytes_s = (per_frame + 2 + math.ceil(per_frame / 254)) * rig.telemetry_hz / rig.samples_per_frame
    assert wire_bytes_s < 0.8 * rig.baud / 10
    for sensor in rig.sensors:
        assert math.isclose(sensor.to_value(sensor.to_counts(0.01)), 0.01)


def _mutate(tmp_path: Path, old: str, new: str) -> Path:
    text = FLAPPER.read_text()
    assert old in text
    bad = tmp_path / "bad_rig.toml"
    bad.write_text(text.replace(old, new, 1))
    return bad


BAD = [
    ("baud = 921600", "baud = \"fast\"", "serial.baud"),
    ("direction = -1", "direction = 0", "servos[1].direction"),
    ("neutral_rad = 0.0        # neutral", "neutral_rad = 3.0        # neutral", "servos[0].neutral_rad"),
    ("servo = \"stroke_left\"", "servo = \"stroke_middle\"", "joints[1].servo"),
    ("samples_per_frame = 8", "samples_per_frame = 10", "rates.samples_per_frame"),
    ("protocol_version = 1", "protocol_version = 2", "rig.protocol_version"),
    ("plant = \"kinematic\"", "plant = \"magic\"", "emulator.plant"),
    ("servos = { stroke_left = 1e-4 }", "servos = { stroke_centre = 1e-4 }", "emulator.kinematic.root_bend_l"),
    ("timeout_s = 0.1", "timeout_s = -1.0", "watchdog.timeout_s"),
    ("setpoints = \"interpolate\"", "setpoints = \"smooth\"", "rates.setpoints"),
    ("[[servos]]\nname = \"stroke_left\"", "[[servos]]\nname = \"stroke_right\"", "servos[1].name"),
]


@pytest.mark.parametrize("old,new,key", BAD, ids=[b[2] for b in BAD])
def test_bad_rig_names_file_and_key(tmp_path, old, new, key):
    bad = _mutate(tmp_path, old, new)
    with pytest.raises(ConfigError) as info:
        load_rig(bad)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{bad}: {key}")


def test_bad_rig_is_one_line_from_the_command(tmp_path):
    bad = _mutate(tmp_path, "gain = 636.62", "gain = -636.62")
    result = subprocess.run([sys.executable, "-m", "hil.cli", "emulate", "--rig", str(bad)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert re.match(rf"mms emulate: error: {re.escape(str(bad))}: servos\[0\]\.gain: got -636.62, expected a "
                    r"number in \(0, 16777216\] raw units per rad$", lines[0])
    assert result.stdout == ""


def test_another_kind_of_rig_is_refused_in_one_line(tmp_path):
    bad = _mutate(tmp_path, 'kind = "mcu"', 'kind = "dynamixel"')
    with pytest.raises(ConfigError, match=r'rig\.kind: got "dynamixel", expected "mcu"'):
        load_rig(bad)


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_rig(tmp_path / "nope.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[rig\nname = 1")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_rig(broken)
