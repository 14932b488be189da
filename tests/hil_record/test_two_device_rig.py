"""A two-device rig (configs/rigs/flapper_dynamixel_rig.toml: a Dynamixel servo bus and the sensor
microcontroller of flapper_rig.toml) through the recorder and the validator: ``mms record --rig`` keeps both files,
and the validator pairs the bus servos and the microcontroller's sensors with the model, from the files or from
the recording alone."""
from __future__ import annotations

import signal
from pathlib import Path

from mcap.reader import make_reader

from firmware_interface.rigs.dynamixel import TICKS_PER_RAD, load_dxl_rig
from firmware_interface.rigs.mcu import load_rig
from hil.validation import validate
from firmware_interface.rigs.host import host_rig_from_texts, load_host_rig, sensor_rig_path

RIGS = Path(__file__).resolve().parents[2] / "configs" / "rigs"
DXL_RIG, SENSOR_RIG = RIGS / "flapper_dynamixel_rig.toml", RIGS / "flapper_rig.toml"


def test_the_host_view_of_the_two_device_rig():
    rig, dxl, sensors = load_host_rig(DXL_RIG), load_dxl_rig(DXL_RIG), load_rig(SENSOR_RIG)
    # servos: the bus's, in goal ticks, with its joint map and command rate
    assert rig.servo_names == [s.name for s in dxl.servos] and all(s.unit == "ticks" for s in rig.servos)
    assert [s.gain for s in rig.servos] == [TICKS_PER_RAD] * len(dxl.servos)
    assert rig.joints == dxl.joints and rig.command_hz == dxl.command_hz
    # sensors: the microcontroller's channels, rates and emulator truth (what the validator pairs with the model)
    assert rig.strain == sensors.strain and rig.load == sensors.load
    assert (rig.telemetry_hz, rig.samples_per_frame) == (sensors.telemetry_hz, sensors.samples_per_frame)
    assert rig.emulator == sensors.emulator and rig.emulator.physics is not None
    assert sensor_rig_path(DXL_RIG) == SENSOR_RIG.resolve() and sensor_rig_path(SENSOR_RIG) is None
    # a one-device rig is itself
    assert load_host_rig(SENSOR_RIG) == sensors


def test_a_rig_stored_as_two_texts_loads_as_the_files_do():
    stored = host_rig_from_texts(DXL_RIG.read_text(), str(DXL_RIG), SENSOR_RIG.read_text())
    direct = load_host_rig(DXL_RIG)
    for key in ("name", "servos", "joints", "strain", "load", "telemetry_hz", "samples_per_frame", "heartbeat_hz",
                "command_hz"):
        assert getattr(stored, key) == getattr(direct, key), key
    # the sensors' truth (the plant's robot file is named relative to the rig file, which a recording cannot keep)
    assert stored.emulator.physics.sensors == direct.emulator.physics.sensors
    assert (stored.emulator.sensors, stored.emulator.kinematic) == (direct.emulator.sensors, direct.emulator.kinematic)
    # without the microcontroller's text the stored file names a file that is not there: one-line error
    try:
        host_rig_from_texts(DXL_RIG.read_text(), str(DXL_RIG))
    except validate.ConfigError as exc:
        assert "microcontroller.rig" in str(exc) and "\n" not in str(exc)
    else:
        raise AssertionError("a Dynamixel rig without its microcontroller's file loaded")


def test_default_pairs_of_the_two_device_rig():
    """Servos against the simulated stroke joints (through the bus's joint map), gauges and tether sensor against
    the model's signals named by the microcontroller's physics plant, with its scales."""
    rig = load_host_rig(DXL_RIG)
    criteria = validate._criteria(validate.DEFAULT_PASS, None, "pass")
    pairs = {p.name: p for p in validate.pairs_from_rig(rig, validate.Tables({}, 0, {}), criteria)}
    for jm in rig.joints:
        pair = pairs[f"{jm.servo} vs q[{jm.joint}]"]
        assert pair.measured.key == "servo_rad" and pair.scale == jm.direction * jm.gain
    sources = rig.emulator.physics.sensors
    for channel in rig.strain:
        source = sources[channel.name]
        pair = pairs[f"{channel.name} vs {source.signal}[{source.joint}]"]
        assert pair.measured.key == "strain" and pair.scale == source.scale
    assert {p.measured.element for p in pairs.values() if p.measured.key == "load"} == {c.name for c in rig.load}


def test_the_recorder_keeps_both_files_of_a_two_device_rig(tmp_path, network, kit):
    out = tmp_path / "run.mcap"
    with kit.Publisher(network, rate_hz=200):
        proc = kit.mms("record", "--network", network["path"], "--out", str(out), "--rig", str(DXL_RIG))
        try:
            kit.status_when(network["rec"], lambda r: r.get("recording") and r["topics"].get("sim/state"),
                            "sim/state recorded")
        finally:
            _, stderr = kit.stop_process(proc, signal.SIGINT)
    assert proc.returncode == 0, stderr
    with open(out, "rb") as handle:
        metadata = {m.name: m.metadata for m in make_reader(handle).iter_metadata()}
    assert metadata["rig_config"] == {"path": str(DXL_RIG), "text": DXL_RIG.read_text()}
    assert metadata["sensor_rig_config"] == {"path": str(SENSOR_RIG.resolve()), "text": SENSOR_RIG.read_text()}
    # and the validator rebuilds the same rig from the recording alone
    stored = host_rig_from_texts(metadata["rig_config"]["text"], metadata["rig_config"]["path"],
                                 metadata["sensor_rig_config"]["text"])
    assert stored.strain == load_host_rig(DXL_RIG).strain


def test_a_bad_rig_file_is_one_line_before_recording(tmp_path, network, kit):
    bad = tmp_path / "bad_rig.toml"
    bad.write_text('[rig]\nkind = "dynamixel"\nname = "x"\n')
    done = kit.mms_run("record", "--network", network["path"], "--out", str(tmp_path / "x.mcap"), "--rig", str(bad))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and str(bad) in done.stderr, done.stderr
    assert not (tmp_path / "x.mcap").exists()
