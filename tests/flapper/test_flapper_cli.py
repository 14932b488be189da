"""`mms sim` on the flapper as a real subprocess: files written, readable without our code, summary keys,
one-line errors (sim/cli_sim.py, docs/sim-output.md)."""
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
MMS = [sys.executable, "-m", "hil.cli"]
CONFIG = ROOT / "configs" / "robots" / "flapper.toml"
SUMMARY_KEYS = {"peak_stroke_torque_Nm", "mean_power_per_wing_W", "tip_twist_amplitude_deg",
                "tip_twist_phase_lag_deg", "tip_bend_amplitude_deg", "tip_bend_phase_lag_deg",
                "thorax_amplitude_mm", "thorax_pitch_amplitude_deg", "thorax_excursion_mm",
                "thorax_pitch_excursion_deg", "mean_vertical_force_over_weight",
                "sim_time_s", "wall_time_s", "real_time_factor", "base_drift_m", "base_vertical_drift_m",
                "base_max_abs_pitch_deg", "base_total_rotation_deg", "warnings"}
TIMEOUT = 240  # s, generous: the machine is shared


def mms(*args):
    return subprocess.run([*MMS, *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)


def test_tethered_run_writes_series_metadata_plots_and_summary(tmp_path):
    out = tmp_path / "run"
    summary = tmp_path / "summary.json"
    done = mms("sim", CONFIG, "--periods", 1, "--base", "tethered", "--dt", 1e-4, "--out", out,
               "--summary", summary, "--quiet")
    assert done.returncode == 0, done.stderr
    values = json.loads(summary.read_text())
    assert set(values) == SUMMARY_KEYS
    assert set(values["thorax_amplitude_mm"]) == {"x", "y", "z"}
    assert values["thorax_amplitude_mm"] == {"x": 0.0, "y": 0.0, "z": 0.0}   # tethered
    assert values["thorax_excursion_mm"] == {"x": 0.0, "y": 0.0, "z": 0.0}
    assert values["base_drift_m"] == 0.0 and values["base_total_rotation_deg"] == 0.0 and values["warnings"] == []
    assert "warning" not in done.stderr
    assert values["sim_time_s"] == 0.04 or math.isclose(values["sim_time_s"], 0.04, rel_tol=1e-9)
    assert math.isclose(values["real_time_factor"], values["sim_time_s"] / values["wall_time_s"], rel_tol=1e-9)
    assert values["peak_stroke_torque_Nm"] > 0 and values["mean_power_per_wing_W"] > 0
    # The time series is readable with numpy alone, its metadata with json alone.
    meta = json.loads((out / "metadata.json").read_text())
    series = np.load(out / "timeseries.npz")
    assert set(series.files) == set(meta["arrays"])
    for name, info in meta["arrays"].items():
        assert list(series[name].shape) == info["shape"] and info["unit"]
    assert series["t"][0] == 0.0 and math.isclose(series["t"][-1], 0.04, rel_tol=1e-9)
    assert len(meta["joint_names"]) == series["q"].shape[1] == 16
    assert meta["base_mode"] == "fixed" and "x0 forward" in meta["robot_metadata"]["frames"]
    stroke = meta["joint_names"].index("stroke_r")
    power = series["tau"][:, stroke] * series["qd"][:, stroke]
    assert math.isclose(np.trapezoid(power, series["t"]) / 0.04, values["mean_power_per_wing_W"], rel_tol=1e-9)
    for png in ("stroke.png", "strains.png", "tip.png", "thorax.png", "forces.png", "power.png"):
        assert (out / png).stat().st_size > 10_000


def test_bad_inputs_give_one_line_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(CONFIG.read_text().replace("sections = 4 ", "sections = -2 "))
    done = mms("sim", bad, "--periods", 1, "--out", tmp_path / "x")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "wing.sections" in done.stderr
    done = mms("sim", CONFIG, "--tailbeat-frequency", 2.0, "--out", tmp_path / "y")
    assert done.returncode == 2 and "does not apply" in done.stderr and done.stderr.strip().count("\n") == 0
    done = mms("sim", CONFIG, "--dt", -1, "--out", tmp_path / "z")
    assert done.returncode == 2 and "--dt" in done.stderr


def test_help_lists_the_options():
    done = mms("sim", "--help")
    assert done.returncode == 0
    for option in ("--periods", "--duration", "--base", "--dt", "--integrator", "--out", "--summary",
                   "--tailbeat-frequency", "--tailbeat-amplitude"):
        assert option in done.stdout


#: docs/flapper.md "Summary": the default robot in free flight over 6 periods falls 202 mm and pitches up to 420 deg
#: (measured; the run is deterministic, the band allows for another platform's rounding through the tumble)
FREE_FLIGHT_FALL_MM, FREE_FLIGHT_PITCH_DEG, FREE_FLIGHT_BAND = 202.0, 420.0, 0.05


def test_free_flight_summary_says_the_fall_and_the_tumble(tmp_path):
    summary = tmp_path / "summary.json"
    done = mms("sim", CONFIG, "--periods", 6, "--out", tmp_path / "run", "--summary", summary, "--quiet",
               "--no-plots")
    assert done.returncode == 0, done.stderr
    values = json.loads(summary.read_text())
    assert -1e3 * values["base_vertical_drift_m"] == pytest.approx(FREE_FLIGHT_FALL_MM, rel=FREE_FLIGHT_BAND)
    assert values["base_max_abs_pitch_deg"] == pytest.approx(FREE_FLIGHT_PITCH_DEG, rel=FREE_FLIGHT_BAND)
    assert len(values["warnings"]) == 2
    assert [line for line in done.stderr.splitlines() if line.startswith("mms sim: warning: ")] == [
        f"mms sim: warning: {w}" for w in values["warnings"]]
