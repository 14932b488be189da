"""`mms demo` end to end: every process real, the recording complete, the report written, nothing left running."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest
from mcap.reader import make_reader

from hil.qt_preflight import PLUGIN_ENV
from hil.testing import how_the_servos_were_left, wait_for
from sim import messages
from sim.processes import session_nice
from tests.conftest import MISSING_LIBRARY
from tests.hil_demo.test_supervisor import _child_of

#: a cold numba cache on a fresh machine makes the first start slow; the run itself is 10 s
DEMO_TIMEOUT_S = 600
#: pytest's limit on a demo test (pyproject.toml's 300 s is an ordinary test's, and cut these tests' own
#: DEMO_TIMEOUT_S short): the demo, and what follows it (the identification here), each bounded by DEMO_TIMEOUT_S.
#: Measured at load 16-17 (2 runs of 2): 70 s until the driver was active, the 20 s run, 90 s of report and replay, then the
#: identification; past 300 s both times
DEMO_TEST_TIMEOUT_S = 2 * DEMO_TIMEOUT_S
DEMO_TOPICS = {messages.TOPIC_SIM_STATE, messages.TOPIC_SIM_STATUS, messages.TOPIC_HW_COMMAND,
               messages.TOPIC_HW_TELEMETRY, messages.TOPIC_HW_STATUS}
#: rad: how close to the neutral posture the last setpoint must be
NEUTRAL_TOLERANCE_RAD = 1e-6
#: The figures the README states, with bands from their measured spread, over runs on this project's 2-core machine
#: that the run health called VALID. Root bending ratio: six idle 20 s demos 0.777-0.793 (2026-11-23,
#: benchmarks/bench_demo_load.py), two beside five busy worker processes 0.767 and 0.772 (stroke ratios 0.947 and
#: 0.938: the servos undershoot more on a busy host and the bending follows, ratio over stroke ratio 0.815-0.818),
#: one in a clean-clone CI run 0.746: range 0.746-0.793, centre 0.770, half-range 0.024, band 0.04. Stroke lag
#: 30.9-33.9 deg over the eight measured (mean 31.8). Replay bending ratio 0.825-0.847 (five idle), 0.813 and 0.820
#: (busy): centre 0.830, half-range 0.017, band 0.035. Replay strain lag -7.2 to -3.3 deg (mean -5.7, spread 3.9).
#: With the flapper rig's setpoints interpolated on the device ([rates] setpoints, 2026-11-28, two 20 s runs at load
#: 13-15, VALID): stroke lag 30.6 and 31.5 deg, bending ratio 0.788 and 0.780, replay 0.831 and 0.824, replay strain
#: lag -3.7 and -2.1 deg: inside every band below. With the driver's smooth simulated clock as well (main 9fcd0ad,
#: 2026-11-28, benchmarks/bench_demo_load.py, five idle 20 s runs and five beside a CPU hog, all VALID): stroke lag
#: 29.9-31.9 deg, root bending ratio 0.776-0.792, replay 0.820-0.836: inside their bands; the replay strain lag moved
#: to -1.13 to 0.92 deg (one CI run 2.55, failing the old band -5.7 +/- 8): the replayed strains now in phase with
#: the measured ones, as the demo's narrative expects (0 within 10 deg). Four more 20 s runs beside four helper
#: sessions (load 4.6-10): 5.62, -9.6, -0.58, -2.1 deg (their identified root stiffness -1.0 to 0.0 % off the truth,
#: servo.lag_s -1.3 to -1.4 ms). Range of the fifteen -9.6 to 5.62 (idle and one hog: -1.13 to 2.55); band: centre
#: 0, 10 deg, the narrative's own.
DEMO_DURATION_S = 20
#: s: shorter than any numba compile of the flapper's kernels (22 s cold, 0.2 s from the cache as measured)
COMPILE_STALL_S = 1.0
ROOT_BENDING_RATIO, ROOT_BENDING_BAND = 0.770, 0.04
STROKE_LAG_DEG, STROKE_LAG_BAND_DEG = 31.8, 6.0
REPLAY_BENDING_RATIO, REPLAY_BENDING_BAND = 0.830, 0.035
REPLAY_STRAIN_LAG_DEG, REPLAY_STRAIN_LAG_BAND_DEG = 0.0, 10.0


def _demo(out: Path, duration: float, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hil.cli", "demo", "--duration", str(duration), "--out", str(out),
                             *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "QT_QPA_PLATFORM": "offscreen", **(env or {})})


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().split(")")[-1].split()[0]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if text in cmdline and state != "Z":
            found.append(cmdline)
    return found


def _wait_no_processes(text: str, deadline_s: float = 20.0) -> None:
    """Until no process's command line mentions ``text`` (AssertionError after ``deadline_s``)."""
    wait_for(lambda: not _processes_mentioning(text), deadline_s, 0.1, f"no process mentioning {text} left")


def _read_recording(path: Path, encoding: str = "msgpack") -> dict[str, list[dict]]:
    """The recording's payloads per topic, of the channels in ``encoding`` (msgpack: the project's topics; json:
    the Foxglove channels beside them)."""
    decode = (lambda data: msgpack.unpackb(data, raw=False)) if encoding == "msgpack" else json.loads
    by_topic: dict[str, list[dict]] = {}
    with path.open("rb") as handle:
        for _schema, channel, message in make_reader(handle).iter_messages():
            if channel.message_encoding == encoding:
                by_topic.setdefault(channel.topic, []).append(decode(message.data))
    return by_topic


def _assert_servos_left_at_neutral(recording: dict[str, list[dict]]) -> None:
    """The servos at neutral (the flapper's servos: 0 rad) at the end of the run, as the product guarantees it
    (docs/driver.md, "Lifecycle", "Heartbeats"): the driver ramped them there (its last setpoint neutral) or, the link
    to the device lost on the way, the device's own watchdog took them there, which the recording shows as a
    hw/status with the link down after the last setpoint. The second way is the product working, not a weaker
    claim: a starved emulator (the driver's link silent for 0.5 s) ends the driver's part, and no host can send
    anything more then; asserting the first way alone failed the demo test at load 10-25."""
    commands, statuses = recording[messages.TOPIC_HW_COMMAND], recording[messages.TOPIC_HW_STATUS]
    way = how_the_servos_were_left(commands, statuses, [0.0] * len(commands[-1]["setpoint_rad"]),
                                   NEUTRAL_TOLERANCE_RAD)
    assert way is not None, (commands[-1], statuses[-1])
    print(f"servos left at neutral: {way}")


def _recorder_stats(path: Path) -> dict:
    with path.open("rb") as handle:
        for record in make_reader(handle).iter_metadata():
            if record.name == "recorder_stats":
                return json.loads(record.metadata["topics"])
    raise AssertionError("no recorder_stats metadata in the recording")


@pytest.mark.timeout(DEMO_TEST_TIMEOUT_S)
def test_demo_runs_records_validates_and_leaves_nothing_running(tmp_path):
    out = tmp_path / "run"
    demo = _demo(out, DEMO_DURATION_S)
    stdout, stderr = demo.communicate(timeout=DEMO_TIMEOUT_S)
    assert demo.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert f"recording: {out / 'run.mcap'}" in stdout and "metrics:" in stdout

    recording = _read_recording(out / "run.mcap")
    assert DEMO_TOPICS <= set(recording)
    stats = _recorder_stats(out / "run.mcap")
    for topic, payloads in recording.items():
        seqs = [p["seq"] for p in payloads]
        missing = sum(b - a - 1 for a, b in zip(seqs, seqs[1:]) if b > a)
        assert missing == stats[topic]["gaps"], topic        # every gap in the file was reported
    assert stats[messages.TOPIC_SIM_STATE]["gaps"] == 0
    sim_seconds = recording[messages.TOPIC_SIM_STATE][-1]["t"] - recording[messages.TOPIC_SIM_STATE][0]["t"]
    assert sim_seconds > 5.0
    # the recorder was given the robot: Foxglove's 3-D panel draws it (its poses at 100 Hz of simulated time)
    foxglove = _read_recording(out / "run.mcap", "json")
    assert len(foxglove["foxglove/poses"]) >= 0.9 * 100 * sim_seconds and foxglove["foxglove/scene"]
    # the run ended without an e-stop
    last_status = recording[messages.TOPIC_HW_STATUS][-1]
    assert last_status["estop"] is False
    # the driver deactivated first: the servos were left at neutral when it stopped
    _assert_servos_left_at_neutral(recording)

    metrics = json.loads((out / "report" / "metrics.json").read_text())
    report = (out / "report" / "report.md").read_text()
    # the run was healthy, and the report and the console say so first, with the window analysed
    health = metrics["health"]
    assert health["valid"] is True and health["analysed_s"] >= 5.0, health
    assert report.startswith("**VALID: analysed") and "[demo]   VALID: analysed" in stdout
    # no compile pause in the stream: the simulator warmed up before publishing (a short stall of a busy machine is
    # cut like any disturbance)
    assert all(stall["length_s"] < COMPILE_STALL_S for stall in health["stalls"]), health["stalls"]
    assert metrics["analysed_window"] == health["analysed"]
    channels = {c["measured"].split(":")[-1]: c for c in metrics["channels"]}
    # the servo tracks the simulated stroke with its lag, and the shape once the lag is removed
    stroke = channels["stroke_right"]["metrics"]
    assert abs(stroke["phase_lag_deg"] - STROKE_LAG_DEG) < STROKE_LAG_BAND_DEG, stroke
    assert stroke["residual_rms"] < 0.2 * stroke["amplitude_simulated"], stroke
    # the rig's stiffer wing roots bend less than the model's (and the servos undershoot)
    lagged = channels["root_bend_r"]["metrics"]
    assert abs(lagged["amplitude_ratio"] - ROOT_BENDING_RATIO) < ROOT_BENDING_BAND, lagged
    # the replay (the model driven by the measured servo motion): the servos' lag gone from the strains, and the
    # bending ratio the stiffer roots' own (1/1.2 = 0.83; the servos' undershoot no longer in it)
    replay = json.loads((out / "report" / "replay" / "metrics.json").read_text())
    assert "re-simulation" in replay["reference"]
    bend = {c["measured"].split(":")[-1]: c for c in replay["channels"]}["root_bend_r"]["metrics"]
    assert abs(bend["phase_lag_deg"] - REPLAY_STRAIN_LAG_DEG) < REPLAY_STRAIN_LAG_BAND_DEG, bend
    assert abs(bend["amplitude_ratio"] - REPLAY_BENDING_RATIO) < REPLAY_BENDING_BAND, bend
    assert "taken out" in stdout
    # the narrative is the run's own: every expectation of the rig's truth checked against these figures
    narrative = (out / "report" / "narrative.md").read_text()
    assert narrative.count(": as expected") == 4 and "CONTRADICTS" not in narrative, narrative
    assert "live run: all 2 expectations hold" in stdout and "replay: all 2 expectations hold" in stdout
    _wait_no_processes(str(out))
    _identify_recovers_the_rigs_root_stiffness(out)


#: The identification's bar on the demo (issue 21): the rig's truth recovered within 3 %, and inside two of its standard
#: errors. Measured with the device clock and the jackknifed standard errors (docs/identify.md, "Measured on the demo"):
#: idle -1.40 to -1.15 % (3 runs), beside other load +0.02 to -1.25 % (4), at load 10-19 +2.24 % (1), beside a CPU hog
#: (load 5-7) -0.70 to +0.76 % (5), this test at load 3-4 -1.12, -0.36, +0.56 % (3); standard errors 1.20-1.44 % (1.2 %
#: of it the two bending gauges' disagreement), the truth 0.02-1.72 of them away. Before (host time stamps, noise-only
#: errors): idle -0.6 to -1.3 % +- 0.22-0.32 %.
IDENTIFY_BAND = 0.03
#: the truth within this many standard errors of the estimate (issue 21's bar)
IDENTIFY_COVERAGE = 2.0


def _identify_recovers_the_rigs_root_stiffness(out: Path) -> None:
    """`mms identify` on the demo's recording fits the wing roots' bending stiffness to the emulator's truth (the rig
    file's [emulator.physics.overrides.stiffness], 1.2x the model's), within IDENTIFY_BAND and within
    IDENTIFY_COVERAGE standard errors (which include the gauges' disagreement: the left one reads 2 % high)."""
    import tomllib

    from sim.config import shipped_config

    with open(shipped_config("rig", "flapper"), "rb") as handle:
        truth = tomllib.load(handle)["emulator"]["physics"]["overrides"]["stiffness"]["bend_root"]
    fit = subprocess.run([sys.executable, "-m", "hil.cli", "identify", str(out / "run.mcap"), "--params",
                          "stiffness.bend_root", "--scheduler", "serial", "--out", str(out / "identify")],
                         capture_output=True, text=True, timeout=DEMO_TIMEOUT_S)
    assert fit.returncode == 0, fit.stdout[-2000:] + fit.stderr[-2000:]
    document = json.loads((out / "identify" / "identify.json").read_text())
    (estimate,) = document["parameters"]
    print(f"identified bend_root {estimate['estimate']:.5g} +- {estimate['standard_error']:.2g} N m/rad "
          f"(truth {truth:g}; block ratio {document['block_ratio']:.2f})")
    assert abs(estimate["estimate"] / truth - 1.0) < IDENTIFY_BAND, estimate
    assert abs(estimate["estimate"] - truth) < IDENTIFY_COVERAGE * estimate["standard_error"], estimate


@pytest.mark.timeout(DEMO_TEST_TIMEOUT_S)
def test_demo_on_the_two_device_dynamixel_rig(tmp_path, broken_qt_plugin):
    """`mms demo --rig flapper-dynamixel`: one driver owning the Dynamixel bus and the sensor microcontroller
    (both emulated, the microcontroller with the physics plant); the recording keeps both rig files, and the
    validation pairs the bus servos and the microcontroller's gauges and tether sensor with the model. Asked for
    the dashboard (`--gui`) on a machine whose Qt platform plugin misses a system library, it says which and how to
    install it, and goes on headless."""
    out = tmp_path / "run"
    # --no-replay: every assert reads the live run's recording and validation (report/metrics.json); the replay
    # (the model re-simulated from the measured servos, report/replay) is checked on the flapper rig by
    # test_demo_runs_records_validates_and_leaves_nothing_running
    demo = _demo(out, DEMO_DURATION_S, "--rig", "flapper-dynamixel", "--gui", "--no-replay",
                 env={"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0", PLUGIN_ENV: str(broken_qt_plugin)})
    stdout, stderr = demo.communicate(timeout=DEMO_TIMEOUT_S)
    assert demo.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert f"[demo] no dashboard: Qt's 'xcb' platform plugin cannot load: the system lacks {MISSING_LIBRARY}" in stdout
    assert "going on without it (headless)" in stdout and "started dash" not in stdout
    with (out / "run.mcap").open("rb") as handle:
        metadata = {m.name: m.metadata for m in make_reader(handle).iter_metadata()}
    assert metadata["rig_config"]["path"].endswith("flapper_dynamixel_rig.toml")
    assert metadata["sensor_rig_config"]["path"].endswith("flapper_rig.toml")
    recording = _read_recording(out / "run.mcap")
    telemetry = recording[messages.TOPIC_HW_TELEMETRY]
    assert telemetry[-1]["strain_names"] and telemetry[-1]["load_names"] and "servo_host_ns" in telemetry[-1]
    assert recording[messages.TOPIC_HW_STATUS][-1]["link"]["sensor"]["crc_errors"] == 0

    metrics = json.loads((out / "report" / "metrics.json").read_text())
    channels = {c["measured"].split(":")[-1]: c for c in metrics["channels"]}
    assert {"stroke_right", "stroke_left", "root_bend_r", "root_twist_l", "fx", "fz"} <= set(channels)
    # the Dynamixel servos follow the 0.8 Hz stroke (amplitude, shape once their lag is removed)
    stroke = channels["stroke_right"]["metrics"]
    assert 0.8 < stroke["amplitude_ratio"] < 1.25 and 0.0 < stroke["phase_lag_deg"] < 90.0, stroke
    assert stroke["residual_rms"] < 0.2 * stroke["amplitude_simulated"], stroke
    # the gauges were compared (their signal is mostly the wing's vibration under the emulated servos' setpoint
    # steps at this slow stroke, hil/experiment/demo.py: no verdict on their shape is asserted; test_dxl_chain.py shows the
    # microcontroller's strains following the mirrored stroke)
    bend = channels["root_bend_r"]
    assert bend["status"] in ("pass", "fail") and bend["metrics"]["amplitude_measured"] > 0, bend
    _wait_no_processes(str(out))


#: `mms demo --background-nice` in the test that kills the server: 1 (a weight of 820 against 1024) shows that the
#: sessions get it without starving the recorder on a busy test machine
TEST_BACKGROUND_NICE = 1


@pytest.mark.timeout(DEMO_TEST_TIMEOUT_S)
def test_killing_one_process_stops_the_others_names_it_and_leaves_servos_at_neutral(tmp_path):
    out = tmp_path / "run"
    demo = _demo(out, 120, "--background-nice", str(TEST_BACKGROUND_NICE))
    pids: dict[str, int] = {}
    deadline = time.monotonic() + DEMO_TIMEOUT_S
    for line in demo.stdout:
        if match := re.search(r"started (\w+) \(pid (\d+)\)", line):
            pids[match[1]] = int(match[2])
        if "driver active" in line or time.monotonic() > deadline:
            break
    assert {"serve", "drive", "record"} <= set(pids)
    # the processes that can wait, and the emulator the driver started, run in sessions of that nice; the server not
    nices = {role: session_nice(pid) for role, pid in [*pids.items(), ("emulator", _child_of(pids["drive"]))]}
    assert nices == {"serve": 0, "record": TEST_BACKGROUND_NICE, "drive": TEST_BACKGROUND_NICE,
                     "emulator": TEST_BACKGROUND_NICE}, nices
    os.kill(pids["serve"], signal.SIGKILL)
    stdout, stderr = demo.communicate(timeout=120)
    assert demo.returncode != 0
    assert "process 'serve'" in stderr and "died unexpectedly" in stderr and "SIGKILL" in stderr
    _wait_no_processes(str(out))
    _assert_servos_left_at_neutral(_read_recording(out / "run.mcap"))
