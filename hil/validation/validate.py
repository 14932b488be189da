"""``mms validate``: measured against simulated signals of a recorded run; report, plots and metrics.json.

The simulated reference is the ``sim/*`` stream recorded in the same run, or with ``--sim ROBOT`` an offline
re-simulation of the model driven by the measured servo angles (hil/validation/resim.py). Which measured channel is
compared with which simulated one is a *pair* (docs/validation.md)::

    [[pair]]
    name = "tail"
    measured = "hw/telemetry:servo_rad:tail_servo"   # topic:key:element (element = name or index)
    simulated = "sim/state:q:tail_joint"
    scale = 1.0      # the simulated value is mapped to the measured unit/sign: scale * sim + offset
    offset = 0.0

Without pairs in the config, they are derived from the rig file stored in the recording (or ``--rig``): each
``[[joints]]`` map gives servo angle vs ``q`` (scale = direction * gain, offset = offset_rad); each strain or load
channel with an ``[emulator.physics.sensors]`` source gives that simulated signal (scale from it); otherwise a
strain channel named as a joint is compared with that joint's ``strain`` and a load channel named fx..mz with
``base_wrench``. Analysis method: :mod:`hil.validation.analysis`.

A channel with no prediction (its expected signal varies by at most NO_PREDICTION_FRACTION of the measured one's,
e.g. a side force that the model's symmetry makes zero) is judged by its RMS error on the measured samples
(``rmse_samples``, in its unit) against its ``rmse_max`` alone (``[pass]``, ``[pair.pass]`` or
``[channel.<name>]``). Without an ``rmse_max``, a constant prediction is *not judged* (neither PASS nor FAIL), and
a small but varying one is judged by the criteria as any channel (the model may be under-predicting).
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
import sys
import textwrap
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from hil.validation.analysis import (Comparison, Criterion, compare, grid_rate, median_rate, no_prediction,
                                     prediction_constant)
from hil.validation.health import Health, HealthCriteria, health_keys, recorder_gaps, recording_health
from hil.recording.mcap_io import RecordingError, read_recording
from firmware_interface.rigs.host import channel_maps, load_host_rig, sensor_unit, stored_rig
from hil.recording.series import WRENCH_NAMES, Tables, build_tables
from hil.recording.series import simulated_unit as series_unit
from sim.cli_options import deprecation
from sim.config import ConfigError, load_toml, require
from sim.messages import TOPIC_HW_COMMAND, TOPIC_HW_STATUS, TOPIC_HW_TELEMETRY, TOPIC_SIM_STATE, TOPIC_SIM_STATUS

#: default pass/fail criteria (overridden by [pass] and [pair.pass] of the config)
DEFAULT_PASS = {"nrmse_max": 0.25, "r2_min": 0.5, "amplitude_ratio_min": 0.8, "amplitude_ratio_max": 1.25,
                "phase_lag_deg_max": 45.0}
#: config key -> (metric, bound, absolute)
_CRITERIA_KEYS = {
    "rmse_max": ("rmse", "upper", False), "nrmse_max": ("nrmse", "upper", False), "r2_min": ("r2", "lower", False),
    "amplitude_ratio_min": ("amplitude_ratio", "lower", False),
    "amplitude_ratio_max": ("amplitude_ratio", "upper", False),
    "phase_lag_deg_max": ("phase_lag_deg", "upper", True), "lag_s_max": ("lag_s", "upper", True),
    "residual_rms_max": ("residual_rms", "upper", False), "rmse_aligned_max": ("rmse_aligned", "upper", False),
    "frequency_error_max": ("frequency_error", "upper", True),
}
#: what rmse_max bounds for a channel with no prediction: the RMS error on the measured samples themselves
NO_PREDICTION_METRIC = "rmse_samples"
#: a channel's status (metrics.json "status"; the report and summary print it upper-case, "_" as a space)
PASS, FAIL, NOT_JUDGED, ERROR = "pass", "fail", "not_judged", "error"
#: messages per topic decoded to learn the channel names before the pairs are chosen
NAME_PROBE_MESSAGES = 50
#: cycles shown in the overlay panel of each channel's figure
PLOT_CYCLES = 3
#: a figure's title is wrapped at this many characters (the figure is 11 in wide at 10 pt)
TITLE_WIDTH_CHARS = 130
#: a channel's figure: size (in) and resolution (dots per in)
FIGURE_SIZE_IN = (11.0, 3.6)
FIGURE_DPI = 80
#: fixed margins of a channel's figure (figure fractions; the top one from _top_margin): room for a y label and
#: tick labels of up to about FIGURE_TICK_CHARS characters at 10 pt left of each axes, x label and ticks below
FIGURE_TICK_CHARS = 8
FIGURE_MARGINS = {"left": 0.085, "right": 0.99, "bottom": 0.14, "wspace": 0.45}
#: height of a line of the figure's title (10 pt type, line spacing 1.2 plus the padding), pt
SUPTITLE_LINE_PT = 14.0
#: what the top margin keeps beside the title's lines: the axes' two-line titles (9 pt) and padding, pt
FIGURE_TOP_RESERVE_PT = 34.0
#: a signal whose spread is at most this fraction of its magnitude is constant (float32 rounding is 6e-8)
CONSTANT_FRACTION = 1e-6


@dataclass(frozen=True)
class SignalRef:
    """``topic:key:element`` — one column of a recorded topic."""
    topic: str
    key: str
    element: str | None

    @classmethod
    def parse(cls, text: str, path=None, key: str = "") -> "SignalRef":
        parts = text.rsplit(":", 2) if isinstance(text, str) else []
        if len(parts) < 2 or not all(parts):
            raise ConfigError(path, key, f"got {text!r}, expected topic:key[:element] like "
                                         f"'hw/telemetry:servo_rad:tail' or 'sim/state:base_wrench:fz'")
        return cls(parts[0], parts[1], parts[2] if len(parts) == 3 else None)

    def __str__(self) -> str:
        return ":".join(p for p in (self.topic, self.key, self.element) if p is not None)

    def values(self, tables: Tables) -> tuple[np.ndarray, np.ndarray]:
        """Sample times (n,) s on the recording clock and values (n,) of this signal."""
        table = tables.tables.get(self.topic)
        if table is None or table.rows == 0:
            raise KeyError(f"{self}: the recording has no {self.topic} messages")
        if self.element is None:
            if self.key not in table.columns:
                raise KeyError(f"{self}: {self.topic} has no column {self.key!r}")
            return table.columns["time_s"], table.columns[self.key].astype(float)
        return table.columns["time_s"], table.element(self.key, self.element)


@dataclass
class Pair:
    name: str
    measured: SignalRef
    simulated: SignalRef
    scale: float = 1.0
    offset: float = 0.0
    criteria: list[Criterion] = field(default_factory=list)
    frequency_hz: float | None = None
    #: the measured channel's unit (rig file, or [[pair]] unit); None: the simulated signal's (scale 1 keeps it)
    unit: str | None = None

    @property
    def measured_unit(self) -> str:
        return self.unit or simulated_unit(self.simulated)


def simulated_unit(ref: SignalRef) -> str:
    """The unit of a simulated signal (:func:`hil.recording.series.simulated_unit`)."""
    return series_unit(ref.key, ref.element) or "unit of sim/state"


def mapping_words(pair: Pair) -> str:
    """The pair's ``expected = scale * simulated + offset`` said in words, with units."""
    measured, simulated = pair.measured_unit, simulated_unit(pair.simulated)
    offset = f" + {pair.offset:g} {measured}" if pair.offset else ""
    if pair.scale == 1.0 and measured == simulated:
        return "compared as they are (same unit and sign)" + (f", expected = simulated{offset}" if offset else "")
    if pair.scale == -1.0 and measured == simulated:
        return ("compared with the simulated sign reversed (the sensor reads the opposite of the simulated signal)"
                + (f", expected = -simulated{offset}" if offset else ""))
    per = f" {measured} per {simulated}" if measured != simulated else ""
    return f"expected measured value = {pair.scale:g}{per} x simulated{offset} (the scale and offset of the pair)"


@dataclass
class Settings:
    frequency_hz: float | None = None
    grid_hz: float | None = None
    max_lag_s: float | None = None
    phase_bins: int = 50
    skip_s: float = 0.0
    pass_defaults: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_PASS))
    pairs: list[Pair] = field(default_factory=list)
    #: [channel.<name>] criteria: for the pairs of that name or whose measured channel has that name
    channel_pass: dict[str, list[Criterion]] = field(default_factory=dict)
    path: str | None = None   # the thresholds file, for errors found once the pairs are known
    #: [health]: what counts as a healthy stretch of the run (hil/validation/health.py)
    health: HealthCriteria = field(default_factory=HealthCriteria)
    #: the run's healthy window the channels are compared in (s, recording clock); None: the whole overlap
    window: tuple[float, float] | None = None
    #: compare over the whole run, not its healthy window (the health is still assessed and reported)
    whole_run: bool = False


def _criteria(table: dict[str, float], path, prefix: str) -> list[Criterion]:
    merged: dict[str, tuple[float | None, float | None, bool]] = {}
    for key, value in table.items():
        if key not in _CRITERIA_KEYS:
            raise ConfigError(path, f"{prefix}.{key}", f"unknown criterion, expected one of {sorted(_CRITERIA_KEYS)}")
        number = require(table, key, float, path=path, prefix=prefix)
        metric, bound, absolute = _CRITERIA_KEYS[key]
        lower, upper, _ = merged.get(metric, (None, None, absolute))
        merged[metric] = (number, upper, absolute) if bound == "lower" else (lower, number, absolute)
    return [Criterion(metric, lower, upper, absolute) for metric, (lower, upper, absolute) in merged.items()]


def _override(criteria: list[Criterion], overrides: list[Criterion]) -> list[Criterion]:
    """``criteria`` with the bounds that ``overrides`` set replaced (or added), metric by metric."""
    by_metric = {c.metric: c for c in criteria}
    for new in overrides:
        old = by_metric.get(new.metric)
        by_metric[new.metric] = new if old is None else replace(
            old, lower=new.lower if new.lower is not None else old.lower,
            upper=new.upper if new.upper is not None else old.upper)
    return list(by_metric.values())


def load_settings(path: str | Path | None) -> Settings:
    """Read the thresholds/mapping TOML (every key optional); one-line ConfigError on a bad value."""
    settings = Settings()
    if path is None:
        return settings
    settings.path = str(path)
    doc = load_toml(path)
    positive = dict(check=lambda v: v > 0, expected="a positive number")
    section = require(doc, "validation", dict, path=path, default={})
    settings.frequency_hz = require(section, "frequency_hz", float, path=path, prefix="validation", default=None,
                                    **positive)
    settings.grid_hz = require(section, "grid_hz", float, path=path, prefix="validation", default=None, **positive)
    settings.max_lag_s = require(section, "max_lag_s", float, path=path, prefix="validation", default=None,
                                 **positive)
    settings.phase_bins = require(section, "phase_bins", int, path=path, prefix="validation", default=50,
                                  check=lambda v: 4 <= v <= 10_000, expected="an integer from 4 to 10000")
    settings.skip_s = require(section, "skip_s", float, path=path, prefix="validation", default=0.0,
                              check=lambda v: v >= 0, expected="a number >= 0")
    pass_table = require(doc, "pass", dict, path=path, default={})
    _criteria(pass_table, path, "pass")   # checks the keys
    settings.pass_defaults = {**DEFAULT_PASS, **{k: float(v) for k, v in pass_table.items()}}
    pairs = require(doc, "pair", list, path=path, default=[], expected="an array of tables [[pair]]")
    for k, item in enumerate(pairs):
        prefix = f"pair[{k}]"
        if not isinstance(item, dict):
            raise ConfigError(path, prefix, "expected a table")
        measured = SignalRef.parse(require(item, "measured", str, path=path, prefix=prefix), path,
                                   f"{prefix}.measured")
        simulated = SignalRef.parse(require(item, "simulated", str, path=path, prefix=prefix), path,
                                    f"{prefix}.simulated")
        own_pass = require(item, "pass", dict, path=path, prefix=prefix, default={})
        settings.pairs.append(Pair(
            name=require(item, "name", str, path=path, prefix=prefix, default=str(measured)),
            measured=measured, simulated=simulated,
            scale=require(item, "scale", float, path=path, prefix=prefix, default=1.0),
            offset=require(item, "offset", float, path=path, prefix=prefix, default=0.0),
            criteria=_criteria({**settings.pass_defaults, **own_pass}, path, f"{prefix}.pass"),
            frequency_hz=require(item, "frequency_hz", float, path=path, prefix=prefix, default=None, **positive),
            unit=require(item, "unit", str, path=path, prefix=prefix, default=None)))
    settings.health = load_health_criteria(require(doc, "health", dict, path=path, default={}), path)
    channels = require(doc, "channel", dict, path=path, default={}, expected='tables [channel."<name>"]')
    for name, table in channels.items():
        if not isinstance(table, dict):
            raise ConfigError(path, f"channel.{name}", "expected a table of criteria (e.g. rmse_max = 0.01)")
        settings.channel_pass[name] = _criteria(table, path, f"channel.{name}")
    return settings


def load_health_criteria(table: dict, path) -> HealthCriteria:
    """The ``[health]`` table (every key optional, each a number >= 0, min_fraction at most 1); an unknown key is a
    one-line ConfigError with the closest known one."""
    import difflib

    known = HealthCriteria.keys()
    values = {}
    for key in table:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(path, f"health.{key}", f"unknown key{hint}, expected one of {list(known)}")
        values[key] = require(table, key, float, path=path, prefix="health",
                              check=lambda v, k=key: 0 <= v <= (1 if k == "min_fraction" else math.inf),
                              expected="a number from 0 to 1" if key == "min_fraction" else "a number >= 0")
    return HealthCriteria(**values)


def apply_channel_criteria(pairs: list[Pair], settings: Settings) -> list[Pair]:
    """The pairs with the ``[channel.<name>]`` criteria applied over their own (``name`` = the pair's name or its
    measured channel's element); a name that matches no pair is a one-line ConfigError."""
    out = []
    for pair in pairs:
        for name, overrides in settings.channel_pass.items():
            if name in (pair.name, pair.measured.element):
                pair = replace(pair, criteria=_override(pair.criteria, overrides))
        out.append(pair)
    names = {p.name for p in pairs} | {p.measured.element for p in pairs if p.measured.element is not None}
    for name in settings.channel_pass:
        if name not in names:
            raise ConfigError(settings.path, f"channel.{name}",
                              f"matches no pair, expected a pair or measured channel name, one of {sorted(names)}")
    return out


def pairs_from_rig(rig, tables: Tables, criteria: list[Criterion]) -> list[Pair]:
    """Default pairs from a :class:`firmware_interface.rigs.mcu.Rig` (see the module docstring); the rig's declared maps
    are :func:`firmware_interface.rigs.host.channel_maps`, which the dashboard draws with too."""
    declared = {(m.telemetry_key, m.channel): m for m in channel_maps(rig)}
    measured = [("servo_rad", joint.servo, "rad") for joint in rig.joints]
    measured += [("strain" if channel.kind == "strain" else "load", channel.name, sensor_unit(channel))
                 for channel in rig.sensors]
    pairs = []
    for key, name, unit in measured:
        mapping = declared.get((key, name))
        if mapping is not None:
            element = mapping.element if isinstance(mapping.element, str) else WRENCH_NAMES[mapping.element]
            simulated = SignalRef(TOPIC_SIM_STATE, mapping.signal, element)
            scale, offset = mapping.scale, mapping.offset
        else:
            simulated, scale, offset = _by_name(key, name, tables), 1.0, 0.0
        if simulated is not None:
            pairs.append(Pair(f"{name} vs {simulated.key}[{simulated.element}]",
                              SignalRef(TOPIC_HW_TELEMETRY, key, name), simulated, scale=scale, offset=offset,
                              criteria=criteria, unit=unit))
    return pairs


def _by_name(key: str, name: str, tables: Tables) -> SignalRef | None:
    """A simulated signal named like a measured channel: a joint's strain (or q for a servo), a wrench component."""
    state = tables.tables.get(TOPIC_SIM_STATE)
    joints = state.element_names.get("q", []) if state is not None else []
    if key in ("strain", "servo_rad") and name in joints:
        return SignalRef(TOPIC_SIM_STATE, "strain" if key == "strain" else "q", name)
    if key == "load" and name in WRENCH_NAMES:
        return SignalRef(TOPIC_SIM_STATE, "base_wrench", name)
    return None


def pairs_by_name(tables: Tables, criteria: list[Criterion]) -> list[Pair]:
    """Default pairs when no rig is known: measured channels named like simulated joints or wrench components."""
    telemetry = tables.tables.get(TOPIC_HW_TELEMETRY)
    if telemetry is None:
        return []
    pairs = []
    for key in ("servo_rad", "strain", "load"):
        for name in telemetry.element_names.get(key, []):
            simulated = _by_name(key, name, tables)
            if simulated is not None:
                pairs.append(Pair(f"{name} vs {simulated.key}[{name}]", SignalRef(TOPIC_HW_TELEMETRY, key, name),
                                  simulated, criteria=criteria))
    return pairs


def run_rig(metadata: dict[str, dict[str, str]], rig_path: str | None):
    """The rig of a run (``--rig``, else the one stored in the recording) and where it came from, or (None, why
    not); a ``--rig`` file that does not load is a one-line ConfigError."""
    if rig_path is not None:
        return load_host_rig(rig_path), f"rig {rig_path}"
    try:
        rig = stored_rig(metadata)
    except ConfigError as exc:   # a rig of another version, or not a rig at all
        return None, f" (the rig stored in the recording does not load: {exc.message})"
    if rig is None:
        return None, ""
    return rig, f"rig stored in the recording ({metadata['rig_config'].get('path', '?')})"


def default_pairs(settings: Settings, tables: Tables, rig, origin: str) -> tuple[list[Pair], str]:
    """The pairs to compare and where they came from; ``rig``, ``origin``: :func:`run_rig`'s answer."""
    if settings.pairs:
        return settings.pairs, "config"
    criteria = _criteria(settings.pass_defaults, None, "pass")
    if rig is None and origin:      # fall back to the names, saying why
        return pairs_by_name(tables, criteria), "channel names" + origin
    if rig is not None:
        pairs = pairs_from_rig(rig, tables, criteria)
        if pairs:
            return pairs, origin
    return pairs_by_name(tables, criteria), "channel names"


@dataclass
class PairResult:
    pair: Pair
    comparison: Comparison | None
    metrics: dict[str, Any]
    checks: list[tuple[bool, str]]
    error: str | None = None
    figure: str | None = None   # file name of its figure in the output folder, if one was drawn
    judged_by: str | None = "criteria"   # "criteria" (all configured), "rmse" (no prediction), None (not judged)
    reason: str | None = None            # why a channel with no prediction was judged by rmse_samples or not

    @property
    def status(self) -> str:
        """PASS, FAIL, NOT_JUDGED (no prediction and no rmse_max) or ERROR (could not be compared)."""
        if self.error is not None:
            return ERROR
        if self.judged_by is None:
            return NOT_JUDGED
        return PASS if all(ok for ok, _ in self.checks) else FAIL

    @property
    def passed(self) -> bool:
        return self.status == PASS


def _label(status: str) -> str:
    return status.upper().replace("_", " ")


class SampleRates:
    """The median sample rate (Hz) of each topic's ``time_s`` in ``tables``, computed once: every channel of a topic
    shares its clock, and the median of 600 000 intervals is a fifth of a channel's comparison."""

    def __init__(self, tables: Tables):
        self.tables, self.rates = tables, {}

    def __call__(self, topic: str) -> float:
        if topic not in self.rates:
            self.rates[topic] = median_rate(self.tables.tables[topic].columns["time_s"])
        return self.rates[topic]


def evaluate_pair(pair: Pair, tables: Tables, settings: Settings, rates: SampleRates | None = None) -> PairResult:
    """Compare one pair and judge it; ``rates``: the tables' sample rates (made here when not given)."""
    rates = rates or SampleRates(tables)
    frequency_hz = pair.frequency_hz or settings.frequency_hz
    try:
        t_sim, x_sim = pair.simulated.values(tables)
        t_meas, x_meas = pair.measured.values(tables)
        grid_hz = settings.grid_hz or grid_rate(rates(pair.simulated.topic), rates(pair.measured.topic),
                                                frequency_hz)
        comparison = compare(t_sim, pair.scale * x_sim + pair.offset, t_meas, x_meas,
                             grid_hz=grid_hz, frequency_hz=frequency_hz,
                             max_lag_s=settings.max_lag_s, phase_bins=settings.phase_bins, skip_s=settings.skip_s,
                             window=settings.window)
    except (KeyError, ValueError) as exc:
        message = exc.args[0] if exc.args else str(exc)
        return PairResult(pair, None, {}, [], error=str(message), judged_by=None)
    metrics = comparison.metrics.as_dict()
    f_sim, f_meas = metrics["dominant_frequency_simulated_hz"], metrics["dominant_frequency_measured_hz"]
    metrics["frequency_error"] = (f_meas - f_sim) / f_sim if f_sim and f_meas is not None else None
    why = no_prediction(comparison.metrics)
    if why is not None:
        # relative metrics have no denominator: judged by the absolute RMS error on the measured samples alone (on
        # the grid, interpolation would average the measurement's noise away), if an rmse_max is configured
        bounds = [Criterion(NO_PREDICTION_METRIC, upper=c.upper) for c in pair.criteria
                  if c.metric == "rmse" and c.upper is not None]
        if bounds:
            return PairResult(pair, comparison, metrics, [c.check(metrics) for c in bounds], judged_by="rmse",
                              reason=f"{why}: judged by rmse_samples against rmse_max")
        if prediction_constant(comparison.metrics):
            return PairResult(pair, comparison, metrics, [], judged_by=None, reason=f"{why} and no rmse_max")
        # a small but varying prediction may be the model under-predicting what the rig really does: without an
        # absolute bound saying the measured spread is noise, the shape criteria judge it (and fail it)
        return PairResult(pair, comparison, metrics, [criterion.check(metrics) for criterion in pair.criteria],
                          reason=f"{why}: judged by the criteria, as no rmse_max says the measured spread is noise")
    checks = [criterion.check(metrics) for criterion in pair.criteria]
    return PairResult(pair, comparison, metrics, checks)


#: channels compared per worker process; with fewer, everything runs in this process
PAIRS_PER_WORKER = 8
#: (pairs, tables, settings, finish, rates) of the comparison in progress: forked workers inherit it (nothing pickled in)
_evaluation: tuple | None = None


def _evaluate_in_worker(index: int) -> tuple[int, PairResult]:
    pairs, tables, settings, finish, rates = _evaluation
    result = evaluate_pair(pairs[index], tables, settings, rates)
    finish(result)
    result.comparison = None   # the arrays stay here: what comes back is the metrics, checks and figure name
    return index, result


def evaluate_pairs(pairs: list[Pair], tables: Tables, settings: Settings, progress: bool = False,
                   finish=None) -> list[PairResult]:
    """Evaluate every pair on one stroke cycle: the configured frequency, else the dominant frequency of the
    first pair whose simulated signal is a joint angle (the actuated stroke), else of the first pair.

    ``finish(result)`` runs on each result where it was computed (it draws the figure). With many pairs and
    several cores the pairs are compared in forked worker processes; their results then come back without
    the comparison arrays.
    """
    global _evaluation
    import multiprocessing

    finish = finish or (lambda result: None)
    rates = SampleRates(tables)
    cycle_hz = settings.frequency_hz
    results: dict[int, PairResult] = {}
    if cycle_hz is None:
        order = sorted(range(len(pairs)), key=lambda i: pairs[i].simulated.key != "q")
        for i in order:
            results[i] = evaluate_pair(pairs[i], tables, settings, rates)
            finish(results[i])
            if results[i].comparison is not None:
                cycle_hz = results[i].comparison.metrics.frequency_hz
                break
        # pairs tried before (e.g. a flat simulated signal: no frequency of its own) are compared again on it
        results = {i: r for i, r in results.items() if r.comparison is not None or cycle_hz is None}
    cycle_settings = replace(settings, frequency_hz=cycle_hz)
    remaining = [i for i in range(len(pairs)) if i not in results]
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(pairs), initial=len(results), desc="compare", unit="ch", leave=False)
    workers = min(os.cpu_count() or 1, len(remaining) // PAIRS_PER_WORKER)
    try:
        if workers >= 2 and "fork" in multiprocessing.get_all_start_methods():
            _evaluation = (pairs, tables, cycle_settings, finish, rates)
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                for i, result in pool.imap_unordered(_evaluate_in_worker, remaining):
                    results[i] = result
                    if bar is not None:
                        bar.update()
        else:
            for i in remaining:
                results[i] = evaluate_pair(pairs[i], tables, cycle_settings, rates)
                finish(results[i])
                if bar is not None:
                    bar.update()
    finally:
        _evaluation = None
        if bar is not None:
            bar.close()
    return [results[i] for i in range(len(pairs))]


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")[:80] or "pair"


class PairFigure:
    """One reusable figure per report: overlay of the last cycles, phase-averaged cycles (mean and a band of one
    standard deviation), RMS error per cycle. Its artists are made once and given new data per channel (no
    axes rebuilt, no layout solved per figure: most of matplotlib's cost)."""

    def __init__(self):
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib.figure import Figure

        from hil.validation.glyph_cache import GlyphCachingCanvas

        # fixed margins, not a layout engine: constrained layout drew every figure twice (once to measure its
        # text) and was 40 % of a figure's CPU time; the margins hold tick labels of up to FIGURE_TICK_CHARS
        # characters, and the top one grows with the lines of the wrapped title (_top_margin)
        self.figure = Figure(figsize=FIGURE_SIZE_IN, dpi=FIGURE_DPI)
        # one canvas and renderer for every channel (savefig would make new ones per figure): matplotlib's text
        # extents, kept per renderer, and the renderer's glyphs (hil/validation/glyph_cache.py) serve every figure
        GlyphCachingCanvas(self.figure)
        self.ax_time, self.ax_phase, self.ax_error = self.figure.subplots(1, 3)
        self.figure.subplots_adjust(**FIGURE_MARGINS)
        (self.time_sim,) = self.ax_time.plot([], [], label="simulated", lw=1.2)
        (self.time_meas,) = self.ax_time.plot([], [], label="measured", lw=1.0)
        self.ax_time.legend(loc="upper right", fontsize=7)
        (self.phase_sim,) = self.ax_phase.plot([], [], label="simulated")
        (self.phase_meas,) = self.ax_phase.plot([], [], label="measured")
        self.bands = []
        (self.error,) = self.ax_error.plot([], [], lw=1.0)
        self.ax_time.set_xlabel("time (s)")
        self.ax_phase.set_xlabel("phase (deg of the cycle)")
        self.ax_error.set(xlabel="time (s)")
        for ax in (self.ax_time, self.ax_phase, self.ax_error):
            # the titles' height is fixed (no axis above them): placed once, not measured against the axes' tick
            # labels at every draw (a third of a figure's CPU)
            ax.set_title("", y=1.0)
        self.title = self.figure.suptitle("", fontsize=10)
        self.notes = [ax.text(0.03, 0.95, "", transform=ax.transAxes, ha="left", va="top", fontsize=9,
                              bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"})
                      for ax in (self.ax_time, self.ax_phase)]

    def save(self, result: PairResult, path: Path) -> None:
        c, m = result.comparison, result.comparison.metrics
        unit = result.pair.measured_unit
        window = c.t >= c.t[-1] - PLOT_CYCLES / m.frequency_hz
        # a constant signal is said, not drawn: a flat line on the axes' edge reads as an empty plot
        constant = {name: _constant_value(values[window]) for name, values in
                    (("simulated", c.simulated), ("measured", c.measured))}
        self.time_sim.set_data(c.t[window], c.simulated[window])
        self.time_meas.set_data(c.t[window], c.measured[window])
        self.time_sim.set_visible(constant["simulated"] is None)
        self.time_meas.set_visible(constant["measured"] is None)
        self.ax_time.set(ylabel=f"{result.pair.measured.element or result.pair.measured.key} ({unit})",
                         title=f"last {PLOT_CYCLES} cycles")
        for band in self.bands:
            band.remove()
        self.bands = []
        for line, average, name in ((self.phase_sim, c.phase_simulated, "simulated"),
                                    (self.phase_meas, c.phase_measured, "measured")):
            degrees = average.phase * 360
            line.set_data(degrees, average.mean)
            line.set_visible(constant[name] is None)
            if constant[name] is None:
                self.bands.append(self.ax_phase.fill_between(degrees, average.mean - average.std,
                                                             average.mean + average.std, alpha=0.25,
                                                             color=line.get_color()))
        said = "; ".join(f"{name} constant at {value:.4g} {unit}" for name, value in constant.items()
                         if value is not None)
        for note in self.notes:
            note.set_text(said)
        self.ax_phase.set(title=f"phase-averaged (mean ± std)\n{m.cycles:.0f} cycles of {m.frequency_hz:.3g} Hz",
                          ylabel=unit)
        self.ax_time.title.set_fontsize(9)
        self.ax_phase.title.set_fontsize(9)
        self.error.set_data(c.cycle_starts, c.cycle_rms_error)
        self.ax_error.set(title="RMS error per cycle", ylabel=unit)
        self.ax_error.title.set_fontsize(9)
        for ax in (self.ax_time, self.ax_phase, self.ax_error):
            ax.relim(visible_only=True)
            ax.autoscale_view()
        title = textwrap.fill(f"{result.pair.name}: {_label(result.status)}"
                              + (f" — {result.reason}" if result.reason else ""), TITLE_WIDTH_CHARS)
        self.title.set_text(title)
        self.figure.subplots_adjust(top=_top_margin(title.count("\n") + 1))
        self.figure.savefig(path)


def _top_margin(title_lines: int) -> float:
    """The top of the axes (figure fraction) under a suptitle of ``title_lines`` lines and the axes' own two-line
    titles."""
    height_pt = FIGURE_SIZE_IN[1] * 72.0
    return 1.0 - (title_lines * SUPTITLE_LINE_PT + FIGURE_TOP_RESERVE_PT) / height_pt


def _constant_value(values: np.ndarray) -> float | None:
    """The value of a signal that does not vary (to rounding), or None."""
    finite = values[np.isfinite(values)]
    if len(finite) == 0:
        return None
    spread, level = float(np.ptp(finite)), float(np.max(np.abs(finite)))
    return float(finite[0]) if spread <= CONSTANT_FRACTION * max(level, np.finfo(float).tiny) else None


_figure: PairFigure | None = None   # this process's figure (each worker process makes its own)


class Figures:
    """The ``finish`` step of :func:`evaluate_pairs` for a report: draws a result's figure into ``out`` when
    ``plots`` asks for it ("all", or "failed" for the failing channels) and names it in the result."""

    def __init__(self, out: Path, plots: str):
        self.out, self.plots = out, plots

    def __call__(self, result: PairResult) -> None:
        global _figure
        if result.comparison is None or self.plots == "none" or (self.plots == "failed" and result.passed):
            return
        if _figure is None:
            _figure = PairFigure()
        name = f"pair_{_slug(result.pair.name)}.png"
        _figure.save(result, self.out / name)
        result.figure = name


def _fmt(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


REPORT_METRICS = ("rmse", "nrmse", "r2", "amplitude_ratio", "phase_lag_deg", "lag_s", "residual_rms", "frequency_hz",
                  "dominant_frequency_simulated_hz", "dominant_frequency_measured_hz")
#: the unit of each metric ("-": a ratio, no unit); absent: the channel's own unit
METRIC_UNITS = {"nrmse": "-", "r2": "-", "amplitude_ratio": "-", "phase_lag_deg": "deg", "lag_s": "s",
                "frequency_hz": "Hz", "dominant_frequency_simulated_hz": "Hz", "dominant_frequency_measured_hz": "Hz",
                "frequency_error": "-", "gain": "-"}


def metric_unit(metric: str, channel_unit: str) -> str:
    return METRIC_UNITS.get(metric, channel_unit)
#: metrics that compare the shapes of the two signals: not used for a channel with no prediction
RELATIVE_METRICS = ("nrmse", "r2", "amplitude_ratio", "phase_lag_deg", "lag_s")


def _unused(result: PairResult, metric: str) -> bool:
    """A metric shown but not used: a shape metric of a channel with no prediction."""
    return result.judged_by != "criteria" and metric in RELATIVE_METRICS and result.metrics.get(metric) is not None


def _cell(result: PairResult, metric: str) -> str:
    value = result.metrics.get(metric)
    text = _fmt(value)
    if value is not None and metric not in METRIC_UNITS:
        text += f" {result.pair.measured_unit}"   # the columns in the channel's unit: the unit in the cell
    return f"({text})" if _unused(result, metric) else text


def _header(metric: str) -> str:
    return f"{metric} ({METRIC_UNITS[metric]})" if metric in METRIC_UNITS else metric


def write_report(out: Path, run: Path, results: list[PairResult], source: str, recording_info: dict,
                 plots: dict[str, str]) -> None:
    health: Health = recording_info["health"]
    lines = [f"**{health_verdict(health.as_dict())}**", "", f"# Validation of `{run.name}`", "",
             *health_lines(health, recording_info["window"]), "",
             f"- recording: `{run}`" + (" (truncated: read up to its last complete record)"
                                         if recording_info.get("truncated") else ""),
             f"- pairs from: {source}",
             f"- simulated reference: {recording_info.get('reference', RECORDED_REFERENCE)}",
             f"- result: **{sum(r.passed for r in results)} of {len(results)} channels pass**"
             + _not_judged_note(sum(r.status == NOT_JUDGED for r in results)), ""]
    gaps = recording_info.get("gaps")
    if gaps:
        lines += [f"- seq gaps recorded per topic: {gaps}", ""]
    lines += ["| channel | result | " + " | ".join(_header(k) for k in REPORT_METRICS) + " |",
              "|---|---|" + "---|" * len(REPORT_METRICS)]
    for r in results:
        state = "error" if r.error else _label(r.status)
        lines.append(f"| {r.pair.name} | {state} | " + " | ".join(_cell(r, k) for k in REPORT_METRICS) + " |")
    lines += ["", "Units: rmse and residual_rms in each channel's unit (in the cell); (-): a ratio, no unit.", ""]
    if any(_unused(r, k) for r in results for k in REPORT_METRICS):
        lines += ["Values in parentheses are not used: the channel has no prediction to compare shapes with and is "
                  "judged by rmse_samples against its rmse_max, or not judged (a constant prediction, no rmse_max).",
                  ""]
    for r in results:
        lines += [f"## {r.pair.name}", "",
                  f"measured `{r.pair.measured}` ({r.pair.measured_unit}) vs simulated `{r.pair.simulated}` "
                  f"({simulated_unit(r.pair.simulated)}): {mapping_words(r.pair)}", ""]
        if r.error:
            lines += [f"error: {r.error}", ""]
            continue
        if r.reason and r.judged_by == "rmse":
            lines += [f"- {r.reason}; nrmse, r2, amplitude_ratio and the lags are not used"]
        elif r.reason and r.judged_by == "criteria":
            name = r.pair.measured.element or r.pair.name
            lines += [f"- {r.reason} (if it is, set `[channel.\"{name}\"] rmse_max = ...` in the channel's unit)"]
        elif r.reason:
            name = r.pair.measured.element or r.pair.name
            lines += [f"- not judged: {r.reason} (set one, in the channel's unit: "
                      f"`[channel.\"{name}\"] rmse_max = ...`)"]
        lines += [f"- {'pass' if ok else 'FAIL'}: {text} {_check_unit(text, r)}" for ok, text in r.checks] + [""]
        if r.pair.name in plots:
            lines += [f"![{r.pair.name}]({plots[r.pair.name]})", ""]
    (out / "report.md").write_text("\n".join(lines))


def _check_unit(text: str, result: PairResult) -> str:
    """The unit of a check's numbers: of the metric it names (``metric = v`` or ``|metric| = v``,
    :meth:`hil.analysis.Criterion.check`)."""
    named = re.search(r"\|?([a-z_0-9]+)\|? (=|undefined)", text)
    return f"({metric_unit(named.group(1), result.pair.measured_unit)})" if named else ""


def health_lines(health: Health, window: tuple[float, float] | None) -> list[str]:
    """The report's run-health section: what was analysed (``window``, s; None: the whole run), what was cut and
    why, what could not be checked."""
    lines = ["## Run health", ""]
    if window is None and health.analysed is not None:
        lines.append(f"- analysed: the whole run ({health.run_s:.2f} s, --whole-run), not its longest healthy window "
                     f"{health.analysed[0]:.2f}-{health.analysed[1]:.2f} s")
    elif health.analysed is not None:
        lines.append(f"- analysed window: {health.analysed[0]:.2f}-{health.analysed[1]:.2f} s "
                     f"({health.analysed_s:.2f} s of a {health.run_s:.2f} s run; s from the recording's origin)")
    else:
        lines.append(f"- no healthy window: the channels below are compared over the whole run "
                     f"({health.run_s:.2f} s) and are not to be trusted")
    if len(health.windows) > 1:
        lines.append("- other healthy windows (not analysed): "
                     + ", ".join(f"{a:.2f}-{b:.2f} s" for a, b in health.windows[1:]))
    if health.deadline_miss_fraction is not None:
        lines.append(f"- simulator deadline misses: {health.deadline_miss_fraction:.1%} of the states")
    ordered = sorted(health.disturbances, key=lambda d: d.start_s)
    lines += [f"- cut: {d.source}: {d.what} ({d.start_s:.2f}-{d.end_s:.2f} s)" for d in ordered[:20]]
    if len(health.disturbances) > 20:
        lines.append(f"- ... and {len(health.disturbances) - 20} more disturbances (metrics.json: health)")
    lines += [f"- warning: {w}" for w in health.warnings]
    lines += [f"- not checked: {u}" for u in health.unchecked]
    return lines


def _not_judged_note(count: int) -> str:
    return f", {count} not judged (no prediction and no rmse_max)" if count else ""


def _topics_needed(pairs: list[Pair]) -> set[str]:
    return {p.measured.topic for p in pairs} | {p.simulated.topic for p in pairs}


@dataclass(frozen=True)
class Resim:
    """``--sim``: re-simulate this robot config (a file, or "recorded") driven by the measured servo angles
    (hil/validation/resim.py) instead of using the recorded sim/* stream; ``cutoff_hz``, ``warmup_s`` None: the defaults."""
    config: str
    cutoff_hz: float | None = None
    warmup_s: float | None = None


RECORDED_REFERENCE = "the sim/* stream recorded in the same run"


def analyse_run(run: Path, settings: Settings, rig_path: str | None, progress: bool, finish=None,
                resim: Resim | None = None) -> tuple[list[PairResult], str, dict]:
    wanted = ({TOPIC_SIM_STATE, TOPIC_SIM_STATUS, TOPIC_HW_TELEMETRY, TOPIC_HW_COMMAND, TOPIC_HW_STATUS}
              | _topics_needed(settings.pairs))
    recording = read_recording(run, topics=wanted, progress=progress)
    # names first (from the first messages), then decode only the keys the pairs use
    probe = build_tables(recording, max_messages=NAME_PROBE_MESSAGES)
    # the rig names the default pairs and maps the servos of a re-simulation: loaded once, when either needs it
    rig, rig_origin = run_rig(recording.metadata, rig_path) if not settings.pairs or resim else (None, "")
    pairs, source = default_pairs(settings, probe, rig, rig_origin)
    if not pairs:
        raise RecordingError(f"{run}: no measured/simulated pairs found: give them with --thresholds FILE "
                             f"([[pair]] measured = 'topic:key:element', simulated = ...)")
    pairs = apply_channel_criteria(pairs, settings)
    keys: dict[str, set[str]] = {}
    for pair in pairs:
        for ref in (pair.measured, pair.simulated):
            keys.setdefault(ref.topic, set()).add(ref.key)
    if resim is not None:
        keys.setdefault(TOPIC_HW_TELEMETRY, set()).add("servo_rad")
    keys = health_keys(keys)
    tables = build_tables(recording, topics=list(keys), progress=progress, keys=keys)
    health = recording_health(recording, tables, settings.health, cycle_frequency(pairs, tables, settings))
    settings = replace(settings, window=None if settings.whole_run else health.analysed)
    reference = RECORDED_REFERENCE
    if resim is not None:
        from hil.validation.resim import WARMUP_S, load_config, resimulate

        config, config_path = load_config(resim.config, recording.metadata)
        try:
            replay = resimulate(tables, config, config_path, rig, cutoff_hz=resim.cutoff_hz,
                                warmup_s=WARMUP_S if resim.warmup_s is None else resim.warmup_s, progress=progress)
        except ValueError as exc:
            raise RecordingError(f"{run}: --sim: {exc}") from None
        tables.tables[TOPIC_SIM_STATE] = replay.table
        reference = replay.description
    info = {"truncated": recording.truncated, "gaps": recorder_gaps(recording.metadata),
            "messages": {t: len(m) for t, m in recording.messages.items()}, "reference": reference,
            "health": health, "window": settings.window}
    # the payloads (the decompressed chunks: 1.7 GB for 10 minutes of 64 channels) are decoded: freed before the
    # comparison's worker processes are forked
    del recording
    results = evaluate_pairs(pairs, tables, settings, progress, finish)
    return results, source, info


def cycle_frequency(pairs: list[Pair], tables: Tables, settings: Settings) -> float | None:
    """The run's cycle frequency (Hz): the configured one, else the dominant frequency of the first pair's
    simulated joint angle (the actuated stroke), as :func:`evaluate_pairs` takes it; None when there is none."""
    from hil.validation.analysis import dominant_frequency, median_rate, resample

    if settings.frequency_hz is not None:
        return settings.frequency_hz
    for pair in pairs:
        if pair.simulated.key != "q":
            continue
        try:
            t, x = pair.simulated.values(tables)
            rate = median_rate(t)
            grid = t[0] + np.arange(int((t[-1] - t[0]) * rate)) / rate
            return dominant_frequency(resample(t, x, grid), rate)
        except (KeyError, ValueError):
            continue
    return None


def validate_run(run: Path, out: Path, settings: Settings, rig_path: str | None, plots: str,
                 progress: bool, resim: Resim | None = None) -> tuple[list[PairResult], dict]:
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    results, source, info = analyse_run(run, settings, rig_path, progress, finish=Figures(out, plots), resim=resim)
    plot_files = {r.pair.name: r.figure for r in results if r.figure}
    health: Health = info["health"]
    write_report(out, run, results, source, info, plot_files)
    document = {
        "health": health.as_dict(), "analysed_window": list(info["window"]) if info["window"] else None,
        "run": str(run), "pairs_from": source, "reference": info["reference"], "truncated": info["truncated"],
        "seq_gaps": info["gaps"],
        "messages": info["messages"], "passed": run_passed(results) and health.valid is not False,
        "not_judged": sum(r.status == NOT_JUDGED for r in results),
        "elapsed_s": time.perf_counter() - started,
        "channels": [{"name": r.pair.name, "measured": str(r.pair.measured), "simulated": str(r.pair.simulated),
                      "scale": r.pair.scale, "offset": r.pair.offset, "passed": r.passed, "error": r.error,
                      "status": r.status, "judged_by": r.judged_by, "reason": r.reason,
                      "checks": [{"ok": ok, "text": text} for ok, text in r.checks], "metrics": r.metrics}
                     for r in results]}
    (out / "metrics.json").write_text(json.dumps(document, indent=1, allow_nan=False))
    return results, document


def run_passed(results: list[PairResult]) -> bool:
    """The run passes when no channel fails or errs and at least one passes (channels not judged are neither)."""
    return any(r.passed for r in results) and all(r.status in (PASS, NOT_JUDGED) for r in results)


SWEEP_COLUMNS = ("run", "frequency_simulated_hz", "frequency_measured_hz", "amplitude_simulated",
                 "amplitude_measured", "mean_pair", "mean_simulated", "mean_measured")


def sweep(runs: list[Path], out: Path, settings: Settings, rig_path: str | None, channel: str | None,
          mean_channel: str | None, progress: bool, resim: Resim | None = None) -> list[dict]:
    """Per run: the chosen pair's dominant frequency and amplitude, and a (possibly other) pair's mean, both
    measured and simulated; written as sweep.csv and sweep.png (amplitude vs frequency, mean vs frequency)."""
    rows = []
    iterator = runs
    if progress:
        from tqdm import tqdm
        iterator = tqdm(runs, desc="runs", unit="run")
    for run in iterator:
        results, _source, _info = analyse_run(run, settings, rig_path, progress=False, resim=resim)
        by_name = {r.pair.name: r for r in results}
        main = _pick(by_name, channel, run)
        mean = _pick(by_name, mean_channel, run) if mean_channel else main
        rows.append({"run": str(run),
                     "frequency_simulated_hz": main.metrics["dominant_frequency_simulated_hz"],
                     "frequency_measured_hz": main.metrics["dominant_frequency_measured_hz"],
                     "amplitude_simulated": main.metrics["amplitude_simulated"],
                     "amplitude_measured": main.metrics["amplitude_measured"],
                     "mean_pair": mean.pair.name, "mean_simulated": mean.metrics["mean_simulated"],
                     "mean_measured": mean.metrics["mean_measured"]})
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "sweep.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=SWEEP_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_amp, ax_mean) = plt.subplots(1, 2, figsize=(10, 4), dpi=90)
    rows_sorted = sorted(rows, key=lambda r: r["frequency_simulated_hz"])
    for kind, marker in (("simulated", "o-"), ("measured", "s--")):
        f = [r[f"frequency_{kind}_hz"] for r in rows_sorted]
        ax_amp.plot(f, [r[f"amplitude_{kind}"] for r in rows_sorted], marker, label=kind)
        ax_mean.plot(f, [r[f"mean_{kind}"] for r in rows_sorted], marker, label=kind)
    ax_amp.set(xlabel="dominant frequency (Hz)", ylabel="amplitude (fundamental)", title=main.pair.name)
    ax_mean.set(xlabel="dominant frequency (Hz)", ylabel="mean", title=rows[0]["mean_pair"])
    ax_amp.legend()
    ax_mean.legend()
    fig.tight_layout()
    fig.savefig(out / "sweep.png")
    plt.close(fig)
    return rows


def _pick(by_name: dict[str, PairResult], name: str | None, run: Path) -> PairResult:
    if name is None:
        ok = [r for r in by_name.values() if r.error is None]
        if not ok:
            raise RecordingError(f"{run}: no pair could be compared")
        return ok[0]
    if name not in by_name:
        raise RecordingError(f"{run}: no pair named {name!r} (pairs: {sorted(by_name)})")
    result = by_name[name]
    if result.error:
        raise RecordingError(f"{run}: {name}: {result.error}")
    return result


def run(args) -> int:
    if args.plots == "none":
        deprecation("mms validate", "--plots none", "--no-plots")
    plots = "none" if args.no_plots else args.plots
    if args.sim_cutoff is not None and not (args.sim and math.isfinite(args.sim_cutoff) and args.sim_cutoff > 0):
        raise ConfigError(None, "--sim-cutoff", f"got {args.sim_cutoff}, expected a frequency > 0 Hz, with --sim")
    if args.sim_warmup is not None and not (args.sim and math.isfinite(args.sim_warmup) and args.sim_warmup >= 0):
        raise ConfigError(None, "--sim-warmup", f"got {args.sim_warmup}, expected a time >= 0 s, with --sim")
    resim = Resim(args.sim, args.sim_cutoff, args.sim_warmup) if args.sim else None
    settings = load_settings(args.thresholds)
    for option, value in (("--settle", args.settle), ("--min-analysed", args.min_analysed)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ConfigError(None, option, f"got {value}, expected a time >= 0 s")
    settings.whole_run = args.whole_run
    settings.health = replace(settings.health, **{k: v for k, v in (("settle_s", args.settle),
                                                                    ("min_analysed_s", args.min_analysed))
                                                   if v is not None})
    runs = [Path(r) for r in args.runs]
    progress = not args.quiet
    try:
        if args.sweep:
            out = Path(args.out) if args.out else runs[0].parent / "sweep"
            rows = sweep(runs, out, settings, args.rig, args.channel, args.mean_channel, progress, resim)
            for row in rows:
                print(f"{row['run']}: f sim {row['frequency_simulated_hz']:.4g} Hz meas "
                      f"{row['frequency_measured_hz']:.4g} Hz, amplitude sim {row['amplitude_simulated']:.4g} "
                      f"meas {row['amplitude_measured']:.4g}, mean sim {row['mean_simulated']:.4g} "
                      f"meas {row['mean_measured']:.4g}")
            print(f"wrote {out / 'sweep.csv'} and {out / 'sweep.png'}")
            return 0
        if len(runs) != 1:
            print("mms validate: error: several runs need --sweep", file=sys.stderr)
            return 2
        run_path = runs[0]
        out = Path(args.out) if args.out else run_path.with_suffix(".validation")
        results, document = validate_run(run_path, out, settings, args.rig, plots, progress, resim)
    except RecordingError as exc:
        print(f"mms validate: error: {exc}", file=sys.stderr)
        return 2
    for line in summary_lines(document):
        print(line)
    print(f"report {out / 'report.md'}, metrics {out / 'metrics.json'}")
    return exit_code(document)


def summary_lines(document: dict) -> list[str]:
    """The run's health verdict, then one line per channel of a metrics.json document, and a total."""
    lines = [health_verdict(document.get("health"))]
    for channel in document["channels"]:
        if channel["error"]:
            lines.append(f"ERROR {channel['name']}: {channel['error']}")
            continue
        m = channel["metrics"]
        status = channel.get("status") or (PASS if channel["passed"] else FAIL)   # older files: no status
        if channel.get("judged_by", "criteria") != "criteria":   # no prediction: rmse, or not judged
            lines.append(f"{_label(status):5} {channel['name']}  {NO_PREDICTION_METRIC} "
                         f"{_fmt(m.get(NO_PREDICTION_METRIC))}  {channel['reason']}")
            continue
        lines.append(f"{_label(status):5} {channel['name']}  nrmse {_fmt(m.get('nrmse'))}  "
                     f"R2 {_fmt(m.get('r2'))}  ratio {_fmt(m.get('amplitude_ratio'))}  "
                     f"lag {_fmt(m.get('phase_lag_deg'))} deg")
    passed = sum(c["passed"] for c in document["channels"])
    not_judged = sum(c.get("status") == NOT_JUDGED for c in document["channels"])
    lines.append(f"{passed}/{len(document['channels'])} channels pass" + _not_judged_note(not_judged))
    return lines


#: exit code of `mms validate` for a run without enough healthy data (0: passed, 1: a channel failed, 2: error)
EXIT_INVALID = 3


def exit_code(document: dict) -> int:
    """0 the run passed, 1 a channel failed or erred, 3 the run is not valid (whatever its channels say)."""
    if document["health"]["valid"] is False:
        return EXIT_INVALID
    return 0 if document["passed"] else 1


def health_verdict(health: dict | None) -> str:
    """One line from metrics.json's ``health`` (older files have none)."""
    if health is None:
        return "HEALTH UNKNOWN: this metrics.json predates run health"
    if health["valid"] is False:
        return "INVALID: " + "; ".join(health["reasons"])
    window = (f"analysed {health['analysed_s']:.1f} s of {health['run_s']:.1f} s"
              if health["analysed"] else "nothing analysed")
    if health["valid"] is None:
        return f"HEALTH UNKNOWN ({'; '.join(health['warnings'])}); {window}"
    return f"VALID: {window}, {len(health['disturbances'])} disturbance(s) cut"


def main_for_demo(recording: Path, robot: Path, rig: Path, out: Path, resim: Resim | None = None) -> int:
    """`mms demo`'s validation step: pairs from ``rig``, the default criteria, every figure. Returns the exit code
    of `mms validate` (0 no channel fails and one passes, 1 a channel fails, 2 the run cannot be validated).
    ``robot`` is the model the run simulated: the reference is its recorded sim/* stream, or with ``resim`` its
    re-simulation driven by the measured servo angles."""
    try:
        _results, document = validate_run(Path(recording), Path(out), load_settings(None), str(rig), "all",
                                          progress=False, resim=resim)
    except RecordingError as exc:
        print(f"mms validate: error: {exc}", file=sys.stderr)
        return 2
    return exit_code(document)
