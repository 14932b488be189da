"""The link factory (hil/drive/links/factory.py) and the Link interface (hil/drive/links/base.py): each kind of rig
file gets its link, every link has what the driver uses, and a port with no device behind it is one line and
exit 2 instead of a driver reconnecting forever."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w

from hil.drive.links.base import Link
from hil.drive.links.composite import CompositeLink
from hil.drive.links.dynamixel import DynamixelLink
from hil.drive.links.factory import connect_rig
from hil.drive.links.serial import SerialLink
from hil.drive.options import DeviceOptions
from sim.config import ConfigError, load_toml

ROOT = Path(__file__).resolve().parents[2]
RIGS = ROOT / "configs" / "rigs"
#: `mms drive` refusing a missing device starts no loop: it returns well within this, s
EXIT_WAIT_S = 60


def bus_only_rig(folder: Path) -> Path:
    doc = load_toml(RIGS / "flapper_dynamixel_rig.toml")
    del doc["microcontroller"]
    path = folder / "bus_only_rig.toml"
    path.write_text(tomli_w.dumps(doc))
    return path


def test_each_kind_of_rig_gets_its_link_and_every_link_is_a_link(tmp_path):
    cases = [(RIGS / "flapper_rig.toml", SerialLink), (bus_only_rig(tmp_path), DynamixelLink),
             (RIGS / "flapper_dynamixel_rig.toml", CompositeLink)]
    for rig, kind in cases:
        connection = connect_rig(rig, DeviceOptions(emulate=True))
        assert type(connection.link) is kind and isinstance(connection.link, Link), rig
        assert connection.port is None and connection.emulator is not None
        assert str(rig.resolve()) in connection.emulator.argv or str(rig) in connection.emulator.argv
    composite = connect_rig(RIGS / "flapper_dynamixel_rig.toml", DeviceOptions(emulate=True)).link
    assert len(composite.emulators()) == 1            # the microcontroller's emulator runs under the link


def test_a_link_without_a_member_of_the_interface_is_not_a_link():
    class NoCounters:
        state, port_name, totals, device_stats, servo_read_ns, last_rx_s, up = "closed", None, None, None, None, \
            None, False

        def open(self, port_name, now_s): ...
        def close(self): ...
        def fileno(self): ...
        def receive(self, now_s): ...
        def handshake_step(self, packets, now_s): ...
        def send(self, message, t_us=0): ...
        def emulators(self): ...

    assert not isinstance(NoCounters(), Link)
    NoCounters.counters = lambda self: {}
    assert isinstance(NoCounters(), Link)


def test_no_device_at_the_port_is_one_line_and_exit_2(tmp_path):
    """The rig file's port, then --port, each a real path where nothing is: the command names the port and the
    two ways out, and exits 2 (it used to print `cannot open ...` and reconnect silently for ever)."""
    missing = tmp_path / "ttyACM7"
    doc = load_toml(RIGS / "flapper_rig.toml")
    doc["serial"]["port"] = str(missing)
    rig = tmp_path / "flapper_rig.toml"
    rig.write_text(tomli_w.dumps(doc))
    for extra in ([], ["--port", str(tmp_path / "ttyUSB3")]):
        run = subprocess.run([sys.executable, "-m", "hil.cli", "drive", "--rig", str(rig), *extra],
                             capture_output=True, text=True, timeout=EXIT_WAIT_S, cwd=ROOT)
        port = extra[-1] if extra else str(missing)
        assert run.returncode == 2, run.stderr
        assert run.stderr.strip().splitlines() == [f"mms drive: error: no device at {port}: use --emulate or --port"]


def test_the_sensor_device_of_a_two_device_rig_is_checked_too(tmp_path):
    message = f"no device at {tmp_path / 'none'}: use --emulate or --sensor-port"
    with pytest.raises(ConfigError, match=re.escape(message)):
        connect_rig(RIGS / "flapper_dynamixel_rig.toml", DeviceOptions(port="/dev/null",
                                                                      sensor_port=str(tmp_path / "none")))
    assert connect_rig(RIGS / "flapper_dynamixel_rig.toml",
                       DeviceOptions(port="/dev/null", sensor_port="/dev/null")).port == "/dev/null"


def test_the_emulator_children_take_the_drivers_real_time_priority_unless_their_arguments_name_one(tmp_path):
    """The emulated firmware and its plant stand in for the rig's hardware and physics: they run at the driver's
    `--rt-priority` (by default one below the server's), `mms drive --rt-priority 0` turns the class off for them
    too, and an emulator argument of its own wins; a one-device rig still refuses sensor-emulator arguments."""
    import argparse

    from hil.drive.options import add_arguments
    from hil.drive.options import options_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)

    def argv(rig: Path, *options: str) -> list[str]:
        device = options_from_args(parser.parse_args(["--rig", str(rig), "--emulate", *options]))[1]
        return connect_rig(rig, device).emulator.argv

    flapper = RIGS / "flapper_rig.toml"
    assert argv(flapper)[-2:] == ["--rt-priority", "9"]
    assert argv(flapper, "--rt-priority", "0", "--emulator-args", "--plant physics")[-4:] == \
        ["--plant", "physics", "--rt-priority", "0"]
    assert argv(flapper, "--emulator-args", "--rt-priority 3")[-2:] == ["--rt-priority", "3"]
    two = connect_rig(RIGS / "flapper_dynamixel_rig.toml",
                      options_from_args(parser.parse_args(["--rig", "flapper-dynamixel", "--emulate"]))[1])
    assert two.emulator.argv[-2:] == ["--rt-priority", "9"]
    assert two.link.emulators()[0].argv[-2:] == ["--rt-priority", "9"]
