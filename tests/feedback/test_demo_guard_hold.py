"""`mms demo --closed-loop` tells a hold of the loop's guard while the rig ran (the run cut short: said, INVALID)
from the stale hold that follows the demo's own stop (the driver deactivated sends no more telemetry), from a real
MCAP file of sim/status, hw/status and hw/command as the server and the driver publish them; and where the driver's
stop is (the end of the closed loop's comparison)."""
from __future__ import annotations

import msgpack

from hil.experiment.closed_loop import driver_stopped_ns
from hil.experiment.demo import GuardHold, guard_hold
from hil.recording.mcap_io import RecordingWriter, read_recording
from sim.messages import TOPIC_HW_COMMAND, TOPIC_HW_STATUS, TOPIC_SIM_STATUS

#: ns: the host clock of the synthetic run's first message
ORIGIN_NS = 1_800_000_000_000_000_000
STALE = "feedback stale: no usable hw/telemetry for 0.201 s (stale_s 0.2 s; the newest frame received by the driver " \
        "0.203 s ago); the driver's watchdog holds the servos"


def _recording(tmp_path, events: list[tuple[float, str, dict]]):
    """A recording of ``events`` (wall s from the origin, topic, payload keys) read back as the demo reads it."""
    path = tmp_path / "run.mcap"
    writer = RecordingWriter(path, overwrite=True)
    for seq, (wall_s, topic, keys) in enumerate(events):
        stamp = ORIGIN_NS + round(wall_s * 1e9)
        writer.add(topic, msgpack.packb({"v": 1, "seq": seq, "stamp_ns": stamp, **keys}), stamp, stamp, seq)
    writer.close()
    return read_recording(path, topics={TOPIC_SIM_STATUS, TOPIC_HW_STATUS, TOPIC_HW_COMMAND})


def _driver(wall_s: float, lifecycle: str) -> tuple[float, str, dict]:
    return wall_s, TOPIC_HW_STATUS, {"lifecycle": lifecycle}


def _command(wall_s: float, lifecycle: str, mode: str) -> tuple[float, str, dict]:
    return wall_s, TOPIC_HW_COMMAND, {"lifecycle": lifecycle, "mode": mode}


def _sim(wall_s: float, t: float, state: str = "running", reason: str = "") -> tuple[float, str, dict]:
    return wall_s, TOPIC_SIM_STATUS, {"t": t, "state": state, **({"reason": reason} if reason else {})}


def test_a_hold_while_the_driver_is_active_is_mid_run_and_one_after_the_demos_stop_is_not(tmp_path):
    start = [_driver(0.0, "inactive"), _driver(1.0, "active"), _sim(1.5, 0.0)]
    mid_run = _recording(tmp_path, [*start, _sim(3.0, 1.4, "paused", STALE), _driver(4.0, "active"),
                                    _driver(6.5, "inactive")])
    assert guard_hold(mid_run) == GuardHold(1.4, STALE, mid_run=True)
    at_stop = _recording(tmp_path, [*start, _driver(6.5, "inactive"), _sim(6.7, 5.1, "paused", STALE)])
    assert guard_hold(at_stop) == GuardHold(5.1, STALE, mid_run=False)
    # the instability guard is a guard's hold too; an operator's pause is not
    unstable = "feedback unstable: fed-back wrench |F| 2 N, |M| 0 N m beyond [feedback.guard] max_force_n 1 N"
    assert guard_hold(_recording(tmp_path, [*start, _sim(2.0, 0.5, "paused", unstable)])).reason == unstable
    assert guard_hold(_recording(tmp_path, [*start, _sim(2.0, 0.5, "paused", "pause requested"),
                                            _driver(6.5, "inactive")])) is None


def test_the_drivers_stop_is_its_first_ramp_command_when_that_comes_before_the_status(tmp_path):
    # the driver sends the tick's ramp command, then the status that says "inactive" (40-70 us later idle, measured);
    # a state published in between (a preempted driver) is after the stop: CI once compared one inside the ramp
    run = [_driver(1.0, "active"), _command(1.001, "active", "track"), _command(6.8, "inactive", "ramp"),
           _driver(6.803, "inactive")]
    assert driver_stopped_ns(_recording(tmp_path, run)) == ORIGIN_NS + round(6.8e9)
    # the status first (or no command after the stop): the status's stamp
    assert driver_stopped_ns(_recording(tmp_path, [*run[:2], _driver(6.7, "inactive"), run[2]])) == \
        ORIGIN_NS + round(6.7e9)
    assert driver_stopped_ns(_recording(tmp_path, [*run[:2], _driver(6.7, "inactive")])) == ORIGIN_NS + round(6.7e9)
    # inactive before the first active (the start-up) is not a stop, and a run that never stopped has none
    assert driver_stopped_ns(_recording(tmp_path, [_command(0.5, "inactive", "neutral"), *run[:2]])) is None
