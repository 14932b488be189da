"""The config mistakes that used to pass silently or end in a traceback, each refused in one line that names the
file, the key and what was expected; files of the wrong kind named as such; plug-in force models contributing
their own schema."""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from firmware_interface.rigs.dynamixel import load_dxl_rig
from firmware_interface.rigs.mcu import load_rig
from firmware_interface.rigs.schema import MAX_LINK_LOSS_S
from sim.config import ConfigError, load_toml
from sim.robots import KINDS, check_robot, load_robot
from sim.robots.cosserat import build_example
from sim.robots.schema import check_robot_config
from sim.control import ControlError
from sim.server_control import with_value

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


def _edited(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """A copy of a shipped config with ``old`` replaced by ``new`` (once), beside copies of the files it names."""
    text = (CONFIGS / name).read_text()
    assert old in text, old
    for sub in ("robots", "rigs"):
        (tmp_path / sub).mkdir(exist_ok=True)
    for companion in ("robots/flapper.toml", "robots/raybot.toml", "rigs/flapper_rig.toml"):
        (tmp_path / companion).write_text((CONFIGS / companion).read_text())
    target = tmp_path / name.replace(".toml", "_edited.toml")
    target.write_text(text.replace(old, new, 1))
    return target


def _one_line(load, path: Path, key: str, says: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: {key}: "), message
    assert says in message, message
    return message


@pytest.mark.parametrize("old,new,key,says", [
    ("added_mass = true", "added_mas = false", "aero.added_mas", 'did you mean "added_mass"?'),
    ("frequency_hz = 25.0", "frequency_hz = 1.8e19", "stroke.frequency_hz", "expected a frequency in (0, 1000] Hz"),
    ("sections = 4", "sections = 4.0", "wing.sections", "expected an integer"),
    ("rho_air = 1.22", "rho_air = inf", "aero.rho_air", "got inf"),
    ("[thorax]", "[thorx]", "thorx", 'did you mean "thorax"?'),
])
def test_flapper_file_mistakes(tmp_path, old, new, key, says):
    _one_line(load_robot, _edited(tmp_path, "robots/flapper.toml", old, new), key, says)


def test_a_misspelt_joint_of_a_urdf_robot_gets_the_closest_name(tmp_path):
    path = _edited(tmp_path, "robots/pendulum.toml", "[joints.elbow]", "[joints.elbw]")
    (tmp_path / "robots" / "pendulum.urdf").write_text((CONFIGS / "robots/pendulum.urdf").read_text())
    _one_line(load_robot, path, "joints.elbw", 'did you mean "elbow"?')


@pytest.mark.parametrize("old,new,key,says", [
    ("heartbeat_hz = 10 ", "heartbeat_hzz = 10 ", "rates.heartbeat_hzz", 'did you mean "heartbeat_hz"?'),
    ("heartbeat_hz = 10 ", "heartbeat_hz = 0.001 ", "rates.heartbeat_hz",
     f"missed heartbeats must show a lost link within {MAX_LINK_LOSS_S:g} s"),
    ("telemetry_hz = 1000", "telemetry_hz = 65535", "rates.telemetry_hz", "the firmware's highest sample rate"),
    ("telemetry_hz = 1000", "telemetry_hz = 20001", "rates.telemetry_hz", "an integer from 1 to 20000"),
    # within the device's cap, but 12 channels at 20 kHz need 1 MB/s of a 92 kB/s link
    ("telemetry_hz = 1000", "telemetry_hz = 20000", "rates.telemetry_hz", "bytes/s on a link of 92160 bytes/s"),
    ("command_hz = 500", "command_hz = 1e9", "rates.command_hz", "expected a rate in (0, 20000] Hz"),
    ("command_hz = 500", "command_hz = 10", "rates.command_hz", "expected at least 20 Hz (2 setpoints per watchdog"),
    ("max_rate_rad_s = 25.0", "max_rate_rad_s = 1e308", "servos[0].max_rate_rad_s", "expected a rate in (0, 100]"),
    ("[emulator.physics.overrides.wing]\nsections = 2", "[emulator.physics.overrides.wing]\nsectionz = 2",
     "emulator.physics.overrides.wing.sectionz", 'did you mean "sections"? (robot flapper.toml)'),
    ("[emulator.sensors.root_bend_l]", "[emulator.sensors.root_bend_k]", "emulator.sensors.root_bend_k",
     'did you mean "root_bend_r" or "root_bend_l"?'),
])
def test_rig_file_mistakes(tmp_path, old, new, key, says):
    _one_line(load_rig, _edited(tmp_path, "rigs/flapper_rig.toml", old, new), key, says)


@pytest.mark.parametrize("old,new,key,says", [
    # two servos at 1 Mbit/s: one sync write + sync read cycle takes 0.82 ms on the bus
    ("command_hz = 200", "command_hz = 5000", "rates.command_hz", "one cycle (sync write + sync read of 2 servos) "
                                                                   "takes 0.82 ms at 1000000 bit/s"),
    ("max_rate_rad_s = 4.0", "max_rate_rad_s = 1e308", "servos[0].max_rate_rad_s", "expected a rate in (0, 100]"),
    ("damping_n_m_s = 0.06", "dampng_n_m_s = 0.06", "emulator.servo.stroke_left.dampng_n_m_s",
     'did you mean "damping_n_m_s"?'),
])
def test_dynamixel_rig_file_mistakes(tmp_path, old, new, key, says):
    _one_line(load_dxl_rig, _edited(tmp_path, "rigs/flapper_dynamixel_rig.toml", old, new), key, says)


def test_the_link_loss_bound_is_the_drivers_link_timeout():
    from hil.drive.options import DEFAULT_LINK_TIMEOUT_S
    assert MAX_LINK_LOSS_S == DEFAULT_LINK_TIMEOUT_S


@pytest.mark.parametrize("load", [load_robot, load_rig, load_dxl_rig])
def test_binary_and_non_utf8_files_are_named_as_such(tmp_path, load):
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"[robot]\nkind = \"flapper\"\n\x00\x01\x02\xff")
    with pytest.raises(ConfigError, match=r"^.*binary\.toml: binary file \(NUL byte at offset 25\), expected a "
                                          r"TOML text file$"):
        load(binary)
    latin = tmp_path / "latin.toml"
    latin.write_bytes('[rig]\nname = "bänk"\n'.encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin\.toml: not UTF-8 text \(byte 0xe4 at offset 15\), expected a "
                                          r"TOML file in UTF-8$"):
        load(latin)


@pytest.mark.parametrize("load,name,says", [
    (load_robot, "rigs/flapper_rig.toml", 'this is a rig file ([rig] kind "mcu"), not a robot file: `mms sim` and '
                                          "`mms serve` take a robot such as flapper (configs/robots/flapper.toml)"),
    (load_robot, "network.toml", "this is a network file ([sim]), not a robot file: `mms sim` and `mms serve` take "
                                 "a robot"),
    (load_rig, "robots/raybot.toml", 'this is a robot file ([robot] kind "raybot"), not a rig file: `mms drive` and '
                                     "`mms emulate` take a rig such as flapper (configs/rigs/flapper_rig.toml)"),
    (load_dxl_rig, "robots/flapper.toml", 'this is a robot file ([robot] kind "flapper"), not a rig file'),
    (load_rig, "network.toml", "this is a network file ([sim]), not a rig file: `mms drive` and `mms emulate` take "
                               "a rig"),
])
def test_a_file_of_another_kind_is_named(load, name, says):
    with pytest.raises(ConfigError) as caught:
        load(CONFIGS / name)
    assert str(caught.value).startswith(f"{CONFIGS / name}: {says}")


@pytest.mark.parametrize("command,path,says", [
    (["sim"], "configs/rigs/flapper_rig.toml", "this is a rig file"),
    (["emulate", "--rig"], "configs/robots/flapper.toml", "this is a robot file"),
])
def test_commands_name_a_file_of_another_kind_in_one_line(command, path, says):
    result = subprocess.run([sys.executable, "-m", "hil.cli", *command, path], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr


@pytest.mark.parametrize("key,value,says", [
    ("stroke.frequency_hz", 1.8e19, "stroke.frequency_hz: got 1.8e+19, expected a frequency in (0, 1000] Hz"),
    ("aero.added_mass", "no", "aero.added_mass: got \"no\", expected true or false"),
    ("wing.sections", 0, "wing.sections: got 0, expected an integer in [1, 50]"),
])
def test_serve_set_is_checked_by_the_robot_schema(key, value, says):
    config = load_toml(CONFIGS / "robots/flapper.toml")
    with pytest.raises(ControlError) as caught:
        with_value(config, key, value)
    assert says in str(caught.value)
    changed, previous = with_value(config, "stroke.frequency_hz", 30.0)
    assert previous == 25.0 and changed["stroke"]["frequency_hz"] == 30.0


PLUGIN = textwrap.dedent('''
    from sim.forces import ForceModel

    class Declared(ForceModel):
        CONFIG_SCHEMA = {"properties": {"coefficient": {"type": "number", "minimum": 0, "maximum": 10}},
                         "required": ["coefficient"]}

        def __init__(self, coefficient):
            self.coefficient = coefficient

        def apply(self, model, data, t):
            pass

    class Undeclared(ForceModel):
        def __init__(self, strength, *, reach=1.0):
            self.strength, self.reach = strength, reach

        def apply(self, model, data, t):
            pass
''')


@pytest.mark.parametrize("entry,key,says", [
    ('type = "mmsplugin:Declared"\ncoeficient = 1.0', "forces[0].coeficient", 'did you mean "coefficient"?'),
    ('type = "mmsplugin:Declared"\ncoefficient = 11.0', "forces[0].coefficient", "got 11.0, expected a number in "
                                                                                 "[0, 10]"),
    ('type = "mmsplugin:Undeclared"\nstrength = 1.0\nreech = 2.0', "forces[0].reech", 'did you mean "reach"?'),
    ('type = "mmsplugin:Undeclared"\nreach = 2.0', "forces[0].strength", "missing"),
    ('type = "gravity"\ng = [0, 0, -1e6]', "forces[0].g[2]", "expected a number in [-250, 250]"),
    ('type = "gravty"', "forces[0].type", 'expected "gravity" or "module:Class"'),
])
def test_force_plugins_contribute_their_schema(tmp_path, monkeypatch, entry, key, says):
    (tmp_path / "mmsplugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "pendulum.urdf").write_text((CONFIGS / "robots/pendulum.urdf").read_text())
    robot = tmp_path / "robot.toml"
    robot.write_text((CONFIGS / "robots/pendulum.toml").read_text() + f"\n[[forces]]\n{entry}\n")
    _one_line(load_robot, robot, key, says)
    robot.write_text((CONFIGS / "robots/pendulum.toml").read_text()
                     + '\n[[forces]]\ntype = "mmsplugin:Declared"\ncoefficient = 1.0\n'
                     + '\n[[forces]]\ntype = "mmsplugin:Undeclared"\nstrength = 1.0\n')
    assert [type(f).__name__ for f in load_robot(robot).force_models] == ["Declared", "Undeclared"]


def test_every_shipped_config_loads():
    for path in sorted((CONFIGS / "robots").glob("*.toml")):
        if 'kind = "cosserat"' in path.read_text():      # a rod is no rigid tree: its own engine builds it
            config = load_toml(path)
            check_robot(config, path)
            build_example(config, path)
            continue
        if hasattr(check_robot_config(load_toml(path), path, KINDS), "simulate_offline"):   # a TMT system: no tree
            continue
        load_robot(path)
    for path in sorted((CONFIGS / "rigs").glob("*.toml")):
        (load_dxl_rig if re.search(r'kind = "dynamixel"', path.read_text()) else load_rig)(path)
