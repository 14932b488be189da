"""Validation on synthetic cases with known answers: a measured signal that is the simulated one delayed by a
known lag, scaled and noised gives back that lag, ratio and noise level; `mms validate` end to end."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from hil.validation.analysis import compare, dominant_frequency, phase_average, xcorr_lag

#: tolerances of the known-answer checks (stated in docs/validation.md)
LAG_TOL_S = 0.5e-3            # a quarter of a 500 Hz sample
RATIO_TOL = 0.01              # relative
NOISE_TOL = 0.05              # relative error of the residual RMS as a noise estimate
FREQ_TOL = 1e-3               # relative
PHASE_TOL_DEG = 0.5


def _waveform(t, f):
    return np.sin(2 * np.pi * f * t) + 0.3 * np.sin(2 * np.pi * 3 * f * t + 0.5)


@pytest.mark.parametrize("f, lag, ratio, noise, rate_meas", [
    (2.0, 0.030, 0.8, 0.05, 800.0),
    (1.3, -0.011, 1.15, 0.02, 1000.0),
    (5.0, 0.0043, 1.0, 0.10, 500.0),
])
def test_delayed_scaled_noisy_signal_gives_back_lag_ratio_and_noise(f, lag, ratio, noise, rate_meas):
    rng = np.random.default_rng(7)
    t_sim = np.arange(0.0, 40.0, 1e-3)
    t_meas = np.arange(0.0037, 40.0, 1.0 / rate_meas)   # another clock phase and rate
    x_meas = ratio * _waveform(t_meas - lag, f) + 0.1 + noise * rng.standard_normal(len(t_meas))
    m = compare(t_sim, _waveform(t_sim, f), t_meas, x_meas).metrics
    assert m.lag_s == pytest.approx(lag, abs=LAG_TOL_S)
    assert m.amplitude_ratio == pytest.approx(ratio, rel=RATIO_TOL)
    assert m.gain == pytest.approx(ratio, rel=RATIO_TOL)
    assert m.bias == pytest.approx(0.1, abs=3 * noise / np.sqrt(len(t_meas)) + 0.01 * ratio)
    assert m.residual_rms == pytest.approx(noise, rel=NOISE_TOL)
    assert m.phase_lag_deg == pytest.approx(360.0 * f * lag, abs=PHASE_TOL_DEG)
    assert m.frequency_hz == pytest.approx(f, rel=FREQ_TOL)
    assert m.dominant_frequency_measured_hz == pytest.approx(f, rel=FREQ_TOL)


def test_identical_signals_are_a_perfect_match():
    t = np.arange(0.0, 10.0, 2e-3)
    x = _waveform(t, 3.0)
    m = compare(t, x, t, x).metrics
    assert m.rmse == pytest.approx(0.0, abs=1e-12) and m.r2 == pytest.approx(1.0)
    # the sub-sample parabola of a symmetric peak lands on it up to rounding
    assert m.lag_s == pytest.approx(0.0, abs=1e-8) and m.amplitude_ratio == pytest.approx(1.0)
    assert m.phase_lag_deg == pytest.approx(0.0, abs=1e-5)


def test_rmse_and_r2_follow_their_definitions_for_a_pure_offset():
    """m = s + c: RMSE = c exactly; R^2 = 1 - c^2 / var(s) (closed form for a sinusoid: var = A^2 / 2)."""
    t = np.arange(0.0, 10.0, 1e-3)
    s = 2.0 * np.sin(2 * np.pi * 1.0 * t)
    m = compare(t, s, t, s + 0.3).metrics
    assert m.rmse == pytest.approx(0.3, rel=1e-9)
    assert m.nrmse == pytest.approx(0.3 / 4.0, rel=1e-4)
    assert m.r2 == pytest.approx(1 - 0.09 / 2.0, rel=1e-3)


def test_dominant_frequency_lag_and_phase_average_building_blocks():
    rate = 1000.0
    t = np.arange(0, 12.0, 1 / rate)
    assert dominant_frequency(np.sin(2 * np.pi * 2.37 * t), rate) == pytest.approx(2.37, rel=FREQ_TOL)
    x = np.sin(2 * np.pi * 1.5 * t)
    assert xcorr_lag(x, np.sin(2 * np.pi * 1.5 * (t - 0.0123)), rate, 0.3) == pytest.approx(0.0123, abs=1e-4)
    average = phase_average(t, x + 0.5, 1.5, 0.0, 40)
    assert average.count.sum() == len(t)
    np.testing.assert_allclose(average.mean, 0.5 + np.sin(2 * np.pi * average.phase), atol=np.pi / 40)
    assert average.std.max() < np.pi / 40 * 1.5     # only the spread within a bin


def test_mms_validate_end_to_end_with_pairs_from_the_recorded_rig(tmp_path, kit):
    run = tmp_path / "run.mcap"
    truth = kit.write_synthetic_run(run, lag_s=0.012, ratio=0.9, noise=0.01, duration_s=12.0)
    out = tmp_path / "report"
    result = kit.mms_run("validate", str(run), "--out", str(out), "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads((out / "metrics.json").read_text())
    channels = {c["name"]: c for c in document["channels"]}
    assert document["pairs_from"].startswith("rig stored in the recording")
    assert set(channels) == {"tail vs q[tail_yaw]", "fin_ray_left vs q[tail_yaw]", "thrust vs base_wrench[fx]"}
    tail = channels["tail vs q[tail_yaw]"]
    assert tail["scale"] == kit.RIG_SERVO_GAIN and tail["offset"] == kit.RIG_SERVO_OFFSET
    for channel in channels.values():
        assert channel["passed"], channel
        assert channel["metrics"]["lag_s"] == pytest.approx(truth["lag_s"], abs=LAG_TOL_S)
    assert tail["metrics"]["amplitude_ratio"] == pytest.approx(truth["ratio"], rel=RATIO_TOL)
    assert tail["metrics"]["residual_rms"] == pytest.approx(truth["noise"], rel=NOISE_TOL)
    assert tail["metrics"]["phase_lag_deg"] == pytest.approx(360 * truth["frequency_hz"] * truth["lag_s"],
                                                             abs=PHASE_TOL_DEG)
    thrust = channels["thrust vs base_wrench[fx]"]["metrics"]
    assert thrust["mean_measured"] == pytest.approx(truth["thrust_mean"], rel=0.01)
    assert thrust["dominant_frequency_simulated_hz"] == pytest.approx(2 * truth["frequency_hz"], rel=FREQ_TOL)
    report = (out / "report.md").read_text()
    assert "3 of 3 channels pass" in report
    for name in ("pair_tail_vs_q_tail_yaw.png", "pair_thrust_vs_base_wrench_fx.png"):
        assert f"]({name})" in report
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_mms_validate_thresholds_and_explicit_pairs_fail_what_is_out_of_bounds(tmp_path, kit):
    run = tmp_path / "run.mcap"
    kit.write_synthetic_run(run, lag_s=0.012, ratio=0.9, noise=0.01, duration_s=10.0)
    thresholds = tmp_path / "thresholds.toml"
    thresholds.write_text("""
[validation]
frequency_hz = 2.0
skip_s = 1.0
[pass]
amplitude_ratio_min = 0.95
[[pair]]
name = "servo"
measured = "hw/telemetry:servo_rad:tail"
simulated = "sim/state:q:tail_yaw"
scale = 2.0
offset = 0.05
[[pair]]
name = "servo, lenient"
measured = "hw/telemetry:servo_rad:0"
simulated = "sim/state:q:0"
scale = 2.0
offset = 0.05
pass = { amplitude_ratio_min = 0.85 }
[[pair]]
name = "missing"
measured = "hw/telemetry:servo_rad:nope"
simulated = "sim/state:q:tail_yaw"
""")
    out = tmp_path / "out"
    result = kit.mms_run("validate", str(run), "--thresholds", str(thresholds), "--out", str(out),
                         "--plots", "failed", "--quiet")
    assert result.returncode == 1, result.stdout + result.stderr
    channels = {c["name"]: c for c in json.loads((out / "metrics.json").read_text())["channels"]}
    assert not channels["servo"]["passed"]
    assert any(not c["ok"] and "amplitude_ratio" in c["text"] for c in channels["servo"]["checks"])
    assert channels["servo, lenient"]["passed"]
    assert "nope" in channels["missing"]["error"]
    assert (out / "pair_servo.png").exists() and not (out / "pair_servo__lenient.png").exists()

    bad = tmp_path / "bad.toml"
    bad.write_text("[pass]\nnrmse_maximum = 1\n")
    refused = kit.mms_run("validate", str(run), "--thresholds", str(bad))
    assert refused.returncode == 2 and "pass.nrmse_maximum" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_mms_validate_sweep_recovers_each_runs_frequency_amplitude_and_mean(tmp_path, kit):
    cases = [(1.0, 0.2, 0.3), (1.5, 0.3, 0.5), (2.5, 0.25, 0.8)]   # frequency Hz, q amplitude rad, mean thrust N
    runs = []
    for k, (f, a, thrust) in enumerate(cases):
        runs.append(tmp_path / f"run{k}.mcap")
        kit.write_synthetic_run(runs[-1], frequency_hz=f, amplitude=a, thrust_mean=thrust, ratio=0.9,
                                duration_s=6.0, seed=k)
    out = tmp_path / "sweep"
    result = kit.mms_run("validate", "--sweep", *map(str, runs), "--channel", "tail vs q[tail_yaw]",
                         "--mean-channel", "thrust vs base_wrench[fx]", "--out", str(out), "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    with open(out / "sweep.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["run"] for row in rows] == [str(r) for r in runs]
    for row, (f, a, thrust) in zip(rows, cases):
        assert float(row["frequency_simulated_hz"]) == pytest.approx(f, rel=FREQ_TOL)
        assert float(row["frequency_measured_hz"]) == pytest.approx(f, rel=FREQ_TOL)
        assert float(row["amplitude_simulated"]) == pytest.approx(kit.RIG_SERVO_GAIN * a, rel=0.01)
        assert float(row["amplitude_measured"]) == pytest.approx(0.9 * kit.RIG_SERVO_GAIN * a, rel=0.02)
        assert float(row["mean_measured"]) == pytest.approx(thrust, rel=0.02)
        assert float(row["mean_simulated"]) == pytest.approx(thrust, rel=0.02)
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"


def test_a_run_recorded_by_mms_record_validates_with_the_rigs_mapping(tmp_path, network, kit):
    """The whole chain over real sockets: the publisher's servo telemetry is the simulated q sampled by the
    device clock (no lag, same amplitude); `mms record` writes it, `mms validate` finds that."""
    run = tmp_path / "recorded.mcap"
    with kit.Publisher(network, rate_hz=500):
        proc = kit.mms("record", "--network", network["path"], "--out", str(run), "--quiet")
        try:
            kit.status_when(network["rec"], lambda r: r.get("topics", {}).get("hw/telemetry", {})
                            .get("messages", 0) >= 400, "4 s of telemetry recorded")
        finally:
            kit.stop_process(proc)
    thresholds = tmp_path / "pairs.toml"
    # a Python thread publishing 4 s at 500 Hz on a shared machine: it misses its schedule by up to a few hundred ms
    # and catches up, so the run's health is judged with that thread's tolerances, not a simulator's
    thresholds.write_text('[[pair]]\nname = "tail"\nmeasured = "hw/telemetry:servo_rad:tail"\n'
                          'simulated = "sim/state:q:tail_yaw"\n'
                          '[health]\nstall_gap_s = 0.5\nrtf_tolerance = 0.5\nsettle_s = 0.2\nmin_window_s = 1.0\n'
                          'min_analysed_s = 1.0\nmin_fraction = 0.2\n')
    out = tmp_path / "validation"
    result = kit.mms_run("validate", str(run), "--thresholds", str(thresholds), "--out", str(out), "--quiet")
    document = json.loads((out / "metrics.json").read_text())
    metrics = document["channels"][0]["metrics"]
    assert result.returncode == 0, result.stdout + result.stderr
    assert document["health"]["valid"] is True and result.stdout.startswith("VALID: analysed")
    # the publisher stamps both from one thread of a shared machine: its scheduling jitter is the tolerance
    assert abs(metrics["lag_s"]) < 0.01
    assert metrics["amplitude_ratio"] == pytest.approx(1.0, rel=0.05)
    assert metrics["frequency_hz"] == pytest.approx(2.0, rel=0.02)


def test_comparison_in_worker_processes_equals_the_in_process_one(tmp_path, kit, monkeypatch):
    """Many channels are compared (and drawn) in forked workers: same metrics, same figures, as in-process."""
    from hil.validation import validate

    run = tmp_path / "run.mcap"
    kit.write_synthetic_run(run, duration_s=6.0)
    settings = validate.load_settings(None)
    sequential = validate.validate_run(run, tmp_path / "seq", settings, None, "all", progress=False)[1]
    monkeypatch.setattr(validate, "PAIRS_PER_WORKER", 1)
    monkeypatch.setattr(validate.os, "cpu_count", lambda: 2)
    parallel = validate.validate_run(run, tmp_path / "par", settings, None, "all", progress=False)[1]
    assert [c["metrics"] for c in parallel["channels"]] == [c["metrics"] for c in sequential["channels"]]
    assert len(parallel["channels"]) == 3
    for name in ("pair_tail_vs_q_tail_yaw.png", "pair_fin_ray_left_vs_q_tail_yaw.png",
                 "pair_thrust_vs_base_wrench_fx.png"):
        assert (tmp_path / "par" / name).read_bytes() == (tmp_path / "seq" / name).read_bytes(), name
    assert (tmp_path / "par" / "report.md").read_text().count("](pair_") == 3
    assert (tmp_path / "par" / "report.md").read_text() == (tmp_path / "seq" / "report.md").read_text()
