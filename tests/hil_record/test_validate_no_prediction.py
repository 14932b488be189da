"""Channels the model predicts (nearly) nothing for — a side force zero by symmetry — are judged by their RMS error
against an absolute ``rmse_max``, or reported as not judged without one; channels with a prediction are judged by
the configured criteria as before. Synthetic recordings with known answers."""
from __future__ import annotations

import json

import msgpack
import numpy as np
import pytest

from hil.validation import validate
from hil.validation.analysis import NO_PREDICTION_FRACTION, compare, no_prediction
from hil.cli import main as mms_main

FREQUENCY_HZ = 2.0
LAG_S = 0.012
SIDE_NOISE_N = 0.002      # standard deviation of the measured side force fy, N (its simulation is zero)
SERVO_NOISE_RAD = 0.01
RMSE_TOL = 0.05           # relative: the RMS of white noise over ~3000 samples is within a few % of sigma


def _q(t):
    return 0.3 * np.sin(2 * np.pi * FREQUENCY_HZ * t)


def _fx(t):
    return 0.4 + 0.5 * np.sin(2 * np.pi * 2 * FREQUENCY_HZ * t)


def write_run(path, kit, *, side_amplitude: float = 0.0, side_noise: float = SIDE_NOISE_N, duration_s: float = 8.0,
              state_hz: float = 500.0, frame: int = 10, seed: int = 3,
              origin_ns: int = 1_700_000_000_000_000_000) -> None:
    """A recording without a rig: pairs come from the channel names (servo ``tail_yaw`` vs ``q``, loads ``fx``,
    ``fy`` vs ``base_wrench``). Simulated: ``q``, ``fx`` as above, ``fy = side_amplitude sin(2 pi f t)``. Measured
    (frames of ``frame`` samples): each delayed by LAG_S; the servo with SERVO_NOISE_RAD of noise, ``fy`` with
    ``side_noise``."""
    from hil.recording.mcap_io import RecordingWriter

    rng = np.random.default_rng(seed)
    fy = lambda t: side_amplitude * np.sin(2 * np.pi * FREQUENCY_HZ * t)
    writer = RecordingWriter(path, overwrite=True)
    times = np.arange(int(duration_s * state_hz)) / state_hz
    for k, t in enumerate(times):
        stamp = origin_ns + int(round(t * 1e9))
        payload = kit.sim_state(k, float(t), [float(_q(t)), 0.0],
                                base_wrench=[float(_fx(t)), float(fy(t)), 0.0, 0.0, 0.0, 0.0])
        payload["stamp_ns"] = stamp
        writer.add("sim/state", msgpack.packb(payload), stamp + 1_000_000, stamp, k)
        if k % frame == frame - 1:
            s = times[k - frame + 1:k + 1] - LAG_S
            servo = _q(s) + SERVO_NOISE_RAD * rng.standard_normal(frame)
            side = fy(s) + side_noise * rng.standard_normal(frame)
            telemetry = {"v": 1, "seq": k // frame, "stamp_ns": stamp + 200_000, "host_ns": stamp,
                         "device_us": [int(round(x * 1e6)) for x in times[k - frame + 1:k + 1]],
                         "servo_names": ["tail_yaw"], "servo_rad": [[float(v)] for v in servo],
                         "strain_names": [], "strain": [[] for _ in s],
                         "load_names": ["fx", "fy"], "load": [[float(a), float(b)] for a, b in zip(_fx(s), side)]}
            writer.add("hw/telemetry", msgpack.packb(telemetry), stamp + 1_000_000, stamp + 200_000, k // frame)
    writer.close()


def _no_nan_constant(name):
    raise AssertionError(f"metrics.json holds {name}: not strict JSON")


def _validate(tmp_path, run, toml: str | None, out: str):
    settings = validate.load_settings(None)
    if toml is not None:
        path = tmp_path / f"{out}.toml"
        path.write_text(toml)
        settings = validate.load_settings(path)
    _results, document = validate.validate_run(run, tmp_path / out, settings, None, "none", progress=False)
    text = (tmp_path / out / "metrics.json").read_text()
    assert json.loads(text, parse_constant=_no_nan_constant) == json.loads(json.dumps(document))
    return document, {c["name"]: c for c in document["channels"]}


SIDE, SERVO, THRUST = "fy vs base_wrench[fy]", "tail_yaw vs q[tail_yaw]", "fx vs base_wrench[fx]"


@pytest.fixture
def run(tmp_path, kit):
    path = tmp_path / "run.mcap"
    write_run(path, kit)
    return path


def test_zero_prediction_is_judged_by_rmse_passes_under_rmse_max_fails_over_and_is_not_judged_without(tmp_path, run):
    # without rmse_max: not judged (neither PASS nor FAIL); the run passes on the channels that were judged
    document, channels = _validate(tmp_path, run, None, "none")
    side = channels[SIDE]
    assert side["status"] == "not_judged" and side["judged_by"] is None and not side["passed"]
    assert side["checks"] == [] and "no rmse_max" in side["reason"] and "no prediction" in side["reason"]
    assert side["metrics"]["rmse_samples"] == pytest.approx(SIDE_NOISE_N, rel=RMSE_TOL)
    assert side["metrics"]["std_simulated"] == 0.0
    # the undefined metrics of a zero prediction are null (strict JSON, checked in _validate), not NaN
    for metric in ("nrmse", "amplitude_ratio", "lag_s", "phase_lag_deg", "gain"):
        assert side["metrics"][metric] is None, metric
    assert document["passed"] and document["not_judged"] == 1
    lines = validate.summary_lines(document)
    assert lines[-1] == "2/3 channels pass, 1 not judged (no prediction and no rmse_max)"
    assert any(line.startswith(f"NOT JUDGED {SIDE}") for line in lines)
    report = (tmp_path / "none" / "report.md").read_text()
    assert "**2 of 3 channels pass**, 1 not judged" in report
    assert f"| {SIDE} | NOT JUDGED |" in report and '[channel."fy"] rmse_max' in report

    # rmse_max above the noise: PASS, judged by rmse alone (the default relative criteria are not applied)
    _document, channels = _validate(tmp_path, run, f"[channel.fy]\nrmse_max = {2 * SIDE_NOISE_N}\n", "loose")
    side = channels[SIDE]
    assert side["status"] == "pass" and side["passed"] and side["judged_by"] == "rmse"
    assert [c["text"].split(" =")[0] for c in side["checks"]] == ["rmse_samples"]
    assert "judged by rmse_samples against rmse_max" in side["reason"]

    # rmse_max below the noise: FAIL, and the run fails
    document, channels = _validate(tmp_path, run, f"[channel.fy]\nrmse_max = {0.5 * SIDE_NOISE_N}\n", "tight")
    side = channels[SIDE]
    assert side["status"] == "fail" and not side["passed"] and side["judged_by"] == "rmse"
    assert not side["checks"][0]["ok"] and side["checks"][0]["text"].startswith("rmse_samples = ")
    assert not document["passed"] and document["not_judged"] == 0
    assert validate.summary_lines(document)[-1] == "2/3 channels pass"


def test_channels_with_a_prediction_are_judged_by_every_criterion_as_before(tmp_path, run):
    """The servo and thrust channels: all default criteria, checked as Criterion.check gives them, and the same
    result whatever rmse_max the side channel gets."""
    default = validate._criteria(validate.DEFAULT_PASS, None, "pass")
    results = {}
    for out, toml in (("none", None), ("side", f"[channel.fy]\nrmse_max = {SIDE_NOISE_N}\n")):
        _document, channels = _validate(tmp_path, run, toml, out)
        results[out] = channels
        for name in (SERVO, THRUST):
            channel = channels[name]
            assert channel["status"] == "pass" and channel["judged_by"] == "criteria" and channel["reason"] is None
            expected = [c.check(channel["metrics"]) for c in default]
            assert [(c["ok"], c["text"]) for c in channel["checks"]] == expected
            assert channel["metrics"]["lag_s"] == pytest.approx(LAG_S, abs=0.5e-3)
    for name in (SERVO, THRUST):
        assert results["none"][name]["metrics"] == results["side"][name]["metrics"]


def test_rmse_max_per_pair_and_a_flat_pair_compared_before_the_cycle_frequency_is_known(tmp_path, run):
    """Explicit pairs: the zero-prediction pair comes first, before the pair that gives the cycle frequency (it
    has none of its own), and carries its rmse_max in its own pass table."""
    toml = f"""
[[pair]]
name = "side"
measured = "hw/telemetry:load:fy"
simulated = "sim/state:base_wrench:fy"
pass = {{ rmse_max = {2 * SIDE_NOISE_N} }}
[[pair]]
name = "thrust"
measured = "hw/telemetry:load:fx"
simulated = "sim/state:base_wrench:fx"
"""
    document, channels = _validate(tmp_path, run, toml, "pairs")
    assert channels["side"]["error"] is None and channels["side"]["status"] == "pass"
    assert channels["side"]["metrics"]["frequency_hz"] == pytest.approx(2 * FREQUENCY_HZ, rel=1e-3)
    assert channels["thrust"]["status"] == "pass" and document["passed"]


def test_exit_codes_and_one_line_error_for_a_channel_table_matching_no_pair(tmp_path, run, capsys):
    assert mms_main(["validate", str(run), "--out", str(tmp_path / "a"), "--no-plots", "--quiet"]) == 0
    assert "NOT JUDGED fy vs base_wrench[fy]" in capsys.readouterr().out
    tight = tmp_path / "tight.toml"
    tight.write_text(f"[channel.fy]\nrmse_max = {0.5 * SIDE_NOISE_N}\n")
    assert mms_main(["validate", str(run), "--thresholds", str(tight), "--out", str(tmp_path / "b"),
                     "--no-plots", "--quiet"]) == 1
    capsys.readouterr()
    typo = tmp_path / "typo.toml"
    typo.write_text("[channel.fyy]\nrmse_max = 0.01\n")
    assert mms_main(["validate", str(run), "--thresholds", str(typo), "--out", str(tmp_path / "c"),
                     "--quiet"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "channel.fyy: matches no pair" in error and "'fy'" in error
    bad = tmp_path / "bad.toml"
    bad.write_text("[channel.fy]\nrmse_maximum = 0.01\n")
    assert mms_main(["validate", str(run), "--thresholds", str(bad)]) == 2
    assert "channel.fy.rmse_maximum: unknown criterion" in capsys.readouterr().err


def test_no_prediction_rule_at_its_fraction_of_the_measured_spread():
    """Measured: unit white noise. Simulated: a sinusoid whose standard deviation is a multiple of the fraction
    of the measured one's; the rule switches between the two sides, and a flat prediction has undefined lag."""
    rng = np.random.default_rng(11)
    t = np.arange(0.0, 20.0, 1e-3)
    noise = rng.standard_normal(len(t))
    wave = np.sqrt(2) * np.sin(2 * np.pi * FREQUENCY_HZ * t)   # standard deviation 1 over whole cycles
    for factor, absent in ((0.0, True), (0.5, True), (0.9, True), (1.1, False), (3.0, False)):
        m = compare(t, factor * NO_PREDICTION_FRACTION * np.std(noise) * wave, t, noise,
                    frequency_hz=FREQUENCY_HZ).metrics
        assert (no_prediction(m) is not None) == absent, factor
    flat = compare(t, np.full(len(t), 0.25), t, 0.25 + 1e-3 * noise, frequency_hz=FREQUENCY_HZ).metrics
    assert "constant" in no_prediction(flat)
    assert np.isnan(flat.lag_s) and flat.as_dict()["lag_s"] is None and flat.as_dict()["nrmse"] is None
    # on the measured samples, no lag: the noise itself (on the 400 Hz grid, interpolation averages it away)
    assert flat.rmse_samples == pytest.approx(1e-3, rel=0.02) and flat.rmse_aligned == flat.rmse_samples
    assert flat.rmse < 0.95 * flat.rmse_samples
    both_flat = compare(t, np.zeros(len(t)), t, np.zeros(len(t)), frequency_hz=FREQUENCY_HZ).metrics
    assert no_prediction(both_flat) is not None and both_flat.rmse == 0.0


def test_the_run_passes_when_nothing_fails_or_errs_and_something_passes():
    ref = validate.SignalRef("hw/telemetry", "load", "fy")
    pair = validate.Pair("fy", ref, ref)
    passing = validate.PairResult(pair, None, {}, [(True, "rmse_samples = 1 <= 2")], judged_by="rmse")
    failing = validate.PairResult(pair, None, {}, [(True, "a"), (False, "b")])
    not_judged = validate.PairResult(pair, None, {}, [], judged_by=None, reason="no prediction and no rmse_max")
    error = validate.PairResult(pair, None, {}, [], error="no such channel", judged_by=None)
    assert [r.status for r in (passing, failing, not_judged, error)] == ["pass", "fail", "not_judged", "error"]
    assert [r.passed for r in (passing, failing, not_judged, error)] == [True, False, False, False]
    assert validate.run_passed([passing, not_judged])
    assert not validate.run_passed([not_judged, not_judged])     # nothing judged: nothing validated
    assert not validate.run_passed([passing, failing]) and not validate.run_passed([passing, error])


def test_a_small_varying_prediction_without_rmse_max_is_judged_by_the_criteria(tmp_path, kit):
    """A model that predicts a twentieth of what the rig measures (here: of its noise) is not excused as "not
    judged": without an rmse_max the criteria judge it, and it fails; with one, the absolute criterion does."""
    path = tmp_path / "small.mcap"
    write_run(path, kit, side_amplitude=0.05 * SIDE_NOISE_N)
    document, channels = _validate(tmp_path, path, None, "small")
    side = channels[SIDE]
    assert "no prediction" in side["reason"] and "constant" not in side["reason"]
    assert side["judged_by"] == "criteria" and side["status"] == "fail" and side["checks"]
    assert not document["passed"] and document["not_judged"] == 0
    report = (tmp_path / "small" / "report.md").read_text()
    assert f"| {SIDE} | FAIL |" in report and '[channel."fy"] rmse_max' in report
    _document, channels = _validate(tmp_path, path, f"[channel.fy]\nrmse_max = {2 * SIDE_NOISE_N}\n", "small_rmse")
    assert channels[SIDE]["judged_by"] == "rmse" and channels[SIDE]["status"] == "pass"


def test_the_report_gives_units_and_the_figure_says_a_constant_channel(tmp_path, run):
    """report.md: a unit on every number, the note on parentheses only with values in parentheses; the figure of a
    channel whose prediction is constant says so instead of drawing a flat line, and no text leaves the figure."""
    results, _document = validate.validate_run(run, tmp_path / "all", validate.load_settings(None), None, "all",
                                               progress=False)
    report = (tmp_path / "all" / "report.md").read_text()
    assert "| rmse | nrmse (-) | r2 (-) |" in report and "| lag_s (s) |" in report
    servo_row = next(line for line in report.splitlines() if line.startswith(f"| {SERVO} |"))
    assert " rad | " in servo_row                       # rmse and residual_rms carry the channel's unit
    side_row = next(line for line in report.splitlines() if line.startswith(f"| {SIDE} |"))
    assert "(" in side_row and "Values in parentheses are not used" in report   # fy's r2 is shown, not used
    assert "pass: |phase_lag_deg| = " in report and "(deg)" in report
    assert "(x 1 + 0)" not in report and "compared as they are (same unit and sign)" in report

    figure = validate.PairFigure()
    figure.save(next(r for r in results if r.pair.name == SIDE), tmp_path / "side.png")
    assert figure.notes[0].get_text() == "simulated constant at 0 N" and not figure.time_sim.get_visible()
    assert figure.time_meas.get_visible()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure.figure)
    canvas.draw()   # the layout as saved
    renderer = canvas.get_renderer()
    page = figure.figure.bbox
    # each axes' tight box holds its drawn title, labels and tick labels
    boxes = [figure.title.get_window_extent(renderer)]
    boxes += [ax.get_tightbbox(renderer) for ax in (figure.ax_time, figure.ax_phase, figure.ax_error)]
    for box in boxes:
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, box
    # the fixed margins keep the panels' text apart: no panel's labels reach into the next, none into the title
    title, panels = boxes[0], boxes[1:]
    for left, right in zip(panels, panels[1:]):
        assert left.x1 <= right.x0, (left, right)
    assert all(panel.y1 <= title.y0 for panel in panels), (title, panels)


def test_a_report_without_unused_values_does_not_explain_parentheses(tmp_path, run):
    settings = validate.load_settings(None)
    settings.pairs = [validate.Pair("servo x2", validate.SignalRef.parse("hw/telemetry:servo_rad:tail_yaw"),
                                    validate.SignalRef.parse("sim/state:q:tail_yaw"), scale=2.0, offset=0.05,
                                    criteria=validate._criteria(settings.pass_defaults, None, "pass"), unit="rad")]
    validate.validate_run(run, tmp_path / "one", settings, None, "none", progress=False)
    report = (tmp_path / "one" / "report.md").read_text()
    assert "Values in parentheses" not in report
    assert "expected measured value = 2 x simulated + 0.05 rad" in report
