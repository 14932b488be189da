"""Run health: which stretches of a recorded run can be trusted, and whether there are enough of them.

A live run is only as good as the loop that produced it. The simulator may stall (a compile, a swap, another busy
program) or fall behind the wall clock; the driver may hold or ramp instead of tracking; the serial link may drop;
the emulator's physics plant (the rig's "truth") may lag the servos it senses. Each of these corrupts the
comparison of measured and simulated signals without changing their look: a 22 s stall of the simulator shows up as
a 22 s flat stretch that the phase averaging happily takes as data. This module finds, from the recording alone,
the *healthy windows* (docs/validation.md, "Run health"):

- simulator: consecutive ``sim/state`` messages at most ``stall_gap_s`` apart on the wall clock (else a stall),
  simulated time advancing at the wall clock's pace within ``rtf_tolerance`` over every ``rtf_window_s``, no
  reset (simulated time going back), and, where ``sim/status`` says so, states not later than ``late_max_s``;
- driver: every ``hw/command`` in mode ``track`` (not hold, ramp or neutral), none more than ``stall_gap_s`` after
  the previous one, and sent at most ``latency_max_deg`` of the cycle after its ``sim/state`` (90th percentile per
  second; ``latency_max_s`` when the cycle frequency is not known): a busy machine delays the servos behind the
  model they are compared with;
- link and rig: telemetry samples at most ``stall_gap_s`` apart; ``hw/status`` link ``up`` with no reconnect or
  emulator restart in between; the physics plant (``hw/status`` ``health.plant``, when the driver runs the
  emulator) alive and at most ``plant_lag_max_s`` behind the wall clock.

Every disturbance is cut together with the ``settle_s`` after it (the servos and the structure need a few cycles
to return to their periodic motion), and so is the run's first ``settle_s`` (the start-up transient). Windows shorter than ``min_window_s``
are dropped. The run is valid when its longest window (the one analysed) lasts at least ``min_analysed_s`` and
the windows cover at least ``min_fraction`` of the run. Pure functions on decoded arrays: no files, no plots.
"""
from __future__ import annotations

import json

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

import msgpack
import numpy as np

from hil.validation.health_criteria import HealthCriteria
from sim.messages import (TOPIC_HW_COMMAND, TOPIC_HW_STATUS, TOPIC_HW_TELEMETRY, TOPIC_SIM_STATE,
                          TOPIC_SIM_STATUS)

#: resolution of the health mask, s: far below every criterion's time scale, coarse enough for 10-minute runs
MASK_STEP_S = 0.005
#: the stretch over which the latency percentiles are taken, s (the sim/status window)
LATENCY_WINDOW_S = 1.0
#: the percentile of a window's latencies that is judged: the typical delay, not its rare worst case
LATENCY_PERCENTILE = 90.0
#: the pace is judged over windows that span at least this fraction of rtf_window_s (the first states of a run, or
#: those right after a stall, have less wall time behind them: a ratio over a few ms would measure jitter)
PACE_SPAN_FRACTION = 0.5
#: the driver mode in which the servos follow the simulation
TRACKING_MODE = "track"
LINK_UP = "up"


@dataclass
class Disturbance:
    """A stretch that is not healthy: ``start_s``, ``end_s`` on the recording clock (s), what it was."""
    start_s: float
    end_s: float
    source: str        # "simulator", "driver", "link", "plant"
    what: str          # one line

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s


@dataclass
class Health:
    """What the recording says about its own trustworthiness. ``valid`` None: unknown (no status topics)."""
    valid: bool | None
    reasons: list[str]                      # why not valid, one line each (empty when valid)
    warnings: list[str]
    windows: list[tuple[float, float]]      # healthy windows (s, recording clock), longest first
    analysed: tuple[float, float] | None    # the window the metrics are computed on
    run_s: float
    disturbances: list[Disturbance] = field(default_factory=list)
    deadline_miss_fraction: float | None = None
    checked: list[str] = field(default_factory=list)     # which sources could be checked
    unchecked: list[str] = field(default_factory=list)   # which could not (topic or key missing)

    @property
    def analysed_s(self) -> float:
        return 0.0 if self.analysed is None else self.analysed[1] - self.analysed[0]

    @property
    def stalls(self) -> list[Disturbance]:
        return [d for d in self.disturbances if d.source == "simulator" and d.what.startswith("stall")]

    def as_dict(self) -> dict[str, Any]:
        """The ``health`` object of metrics.json."""
        return {"valid": self.valid, "reasons": self.reasons, "warnings": self.warnings,
                "analysed_s": self.analysed_s, "analysed": list(self.analysed) if self.analysed else None,
                "windows": [list(w) for w in self.windows], "run_s": self.run_s,
                "deadline_miss_fraction": self.deadline_miss_fraction,
                "stalls": [{"start_s": d.start_s, "length_s": d.length_s, "what": d.what} for d in self.stalls],
                "disturbances": [{**asdict(d), "length_s": d.length_s} for d in self.disturbances],
                "checked": self.checked, "unchecked": self.unchecked}


# ------------------------------------------------------------------ the checks, each a list of disturbances
def gaps(times_s: np.ndarray, limit_s: float, source: str, what: str) -> list[Disturbance]:
    """Stretches between consecutive sample times (n,) s more than ``limit_s`` apart."""
    if len(times_s) < 2:
        return []
    step = np.diff(times_s)
    return [Disturbance(float(times_s[i]), float(times_s[i + 1]), source, f"{what} {step[i]:.3f} s")
            for i in np.nonzero(step > limit_s)[0]]


def pace(wall_s: np.ndarray, sim_t: np.ndarray, criteria: HealthCriteria) -> list[Disturbance]:
    """Where simulated time ``sim_t`` (n,) s did not keep the wall clock's pace ``wall_s`` (n,) s, or went back."""
    out = [Disturbance(float(wall_s[i]), float(wall_s[i + 1]), "simulator",
                       f"reset: simulated time went back from {sim_t[i]:.3f} s to {sim_t[i + 1]:.3f} s")
           for i in np.nonzero(np.diff(sim_t) < 0)[0]]
    start = np.searchsorted(wall_s, wall_s - criteria.rtf_window_s)
    full = wall_s - wall_s[start] >= PACE_SPAN_FRACTION * criteria.rtf_window_s
    with np.errstate(divide="ignore", invalid="ignore"):
        rtf = (sim_t - sim_t[start]) / (wall_s - wall_s[start])
    bad = full & (np.abs(rtf - 1.0) > criteria.rtf_tolerance) & (sim_t >= sim_t[start])
    for first, last in _runs(bad):
        worst = first + int(np.argmax(np.abs(rtf[first:last + 1] - 1.0)))
        out.append(Disturbance(float(wall_s[start[first]]), float(wall_s[last]), "simulator",
                               f"off real time: real-time factor {rtf[worst]:.3f} over {criteria.rtf_window_s:g} s"))
    return out


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) index of every run of True in ``mask`` (n,)."""
    padded = np.concatenate([[False], mask, [False]]).astype(np.int8)
    edges = np.diff(padded)
    return list(zip(np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0] - 1))


def status_windows(stamps_s: np.ndarray, bad: Iterable[bool], source: str, whats: list[str]) -> list[Disturbance]:
    """A status message (at ``stamps_s`` (n,) s) that reports a problem marks the stretch since the previous one;
    consecutive ones make one disturbance, named by the first."""
    bad = np.fromiter(bad, dtype=bool, count=len(stamps_s))
    return [Disturbance(float(stamps_s[max(first - 1, 0)]), float(stamps_s[last]), source, whats[first])
            for first, last in _runs(bad)]


def latency(times_s: np.ndarray, delay_s: np.ndarray, limit_s: float, source: str,
            what: str) -> list[Disturbance]:
    """Each LATENCY_WINDOW_S stretch of ``times_s`` (n,) s whose LATENCY_PERCENTILE of ``delay_s`` (n,) s exceeds
    ``limit_s``."""
    if len(times_s) == 0:
        return []
    window = np.floor((times_s - times_s[0]) / LATENCY_WINDOW_S).astype(np.int64)
    starts = np.concatenate([[0], np.nonzero(np.diff(window))[0] + 1, [len(window)]])
    out = []
    for first, end in zip(starts[:-1], starts[1:]):
        typical = float(np.percentile(delay_s[first:end], LATENCY_PERCENTILE))
        if typical > limit_s:
            out.append(Disturbance(float(times_s[first]), float(times_s[end - 1]), source,
                                   f"{what} {typical * 1e3:.1f} ms ({LATENCY_PERCENTILE:.0f}th percentile)"))
    return out


def driver_modes(stamps_s: np.ndarray, modes: list[str], criteria: HealthCriteria) -> list[Disturbance]:
    """Stretches of ``hw/command`` not in tracking mode, and gaps between commands."""
    tracking = np.array([m == TRACKING_MODE for m in modes], dtype=bool)
    out = []
    for first, last in _runs(~tracking):
        end = stamps_s[last + 1] if last + 1 < len(stamps_s) else stamps_s[last]
        out.append(Disturbance(float(stamps_s[first]), float(end), "driver", f"driver {modes[first]}"))
    return out + gaps(stamps_s, criteria.stall_gap_s, "driver", "no command for")


def healthy_windows(span: tuple[float, float], disturbances: list[Disturbance],
                    criteria: HealthCriteria) -> list[tuple[float, float]]:
    """The stretches of ``span`` (s) clear of the first ``settle_s`` (the start-up transient) and of every
    disturbance and the ``settle_s`` after it, at least ``min_window_s`` long; longest first."""
    n = int(np.floor((span[1] - span[0]) / MASK_STEP_S)) + 1
    if n < 2:
        return []
    grid = span[0] + MASK_STEP_S * np.arange(n)
    ok = grid >= span[0] + criteria.settle_s
    for d in disturbances:
        ok[np.searchsorted(grid, d.start_s):np.searchsorted(grid, d.end_s + criteria.settle_s, side="right")] = False
    windows = []
    for first, last in _runs(ok):
        start, end = grid[first], grid[last]
        if end - start >= criteria.min_window_s:
            windows.append((float(start), float(end)))
    return sorted(windows, key=lambda w: w[0] - w[1])


# ------------------------------------------------------------------ the recording
def _decode(messages: list[tuple[int, int, bytes]]) -> list[dict]:
    out = []
    for _log, _publish, data in messages:
        try:
            payload = msgpack.unpackb(bytes(data), raw=False, strict_map_key=False)
        except Exception:   # msgpack raises several unrelated types; a bad payload is counted by the recorder
            continue
        if isinstance(payload, dict) and isinstance(payload.get("stamp_ns"), int):
            out.append(payload)
    return out


def _stamps_s(payloads: list[dict], origin_ns: int) -> np.ndarray:
    return (np.array([p["stamp_ns"] for p in payloads], dtype=np.int64) - origin_ns) * 1e-9


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def assess(messages: dict[str, list[tuple[int, int, bytes]]], tables, criteria: HealthCriteria,
           warnings: list[str] | None = None, cycle_hz: float | None = None) -> Health:
    """The health of a run from its raw ``messages`` by topic (:class:`hil.recording.mcap_io.RawRecording`) and its decoded
    ``tables`` (:class:`hil.recording.series.Tables`, whose ``sim/state`` and ``hw/telemetry`` give the sample times on the
    recording clock). ``warnings``: what the reader already knows (damaged chunks, truncation, seq gaps).
    ``cycle_hz``: the run's cycle frequency (Hz), which turns ``latency_max_deg`` into seconds."""
    latency_max_s = (criteria.latency_max_deg / 360.0 / cycle_hz if cycle_hz and np.isfinite(cycle_hz)
                     else criteria.latency_max_s)
    origin_ns = tables.origin_ns
    warnings = list(warnings or [])
    disturbances: list[Disturbance] = []
    checked, unchecked = [], []
    state = tables.tables.get(TOPIC_SIM_STATE)
    if state is None or state.rows < 2:
        return Health(False, ["the recording has fewer than two sim/state messages"], warnings, [], None, 0.0,
                      unchecked=["simulator", "driver", "link", "plant"])
    wall, sim_t = state.columns["time_s"], state.columns["t"]
    telemetry = tables.tables.get(TOPIC_HW_TELEMETRY)
    commands = _decode(messages.get(TOPIC_HW_COMMAND, []))
    command_s = _stamps_s(commands, origin_ns) if commands else None
    # the run is where the simulation, the driver and the rig all speak (a topic absent from the file does not cut)
    ranges = [(wall[0], wall[-1])] + [(times[0], times[-1]) for times in (
        command_s, telemetry.columns["time_s"] if telemetry is not None and telemetry.rows >= 2 else None)
        if times is not None]
    span = (float(max(r[0] for r in ranges)), float(min(r[1] for r in ranges)))
    disturbances += gaps(wall, criteria.stall_gap_s, "simulator", "stall: no sim/state for")
    disturbances += pace(wall, sim_t, criteria)
    checked.append("simulator pace and stalls (sim/state)")

    deadline_fraction = None
    sim_status = _decode(messages.get(TOPIC_SIM_STATUS, []))
    if sim_status:
        stamps = _stamps_s(sim_status, origin_ns)
        late = [_number(s.get("late_max_s")) for s in sim_status]
        disturbances += status_windows(stamps, [v is not None and v > criteria.late_max_s for v in late],
                                       "simulator", [f"states up to {v or 0:.3f} s late" for v in late])
        last = sim_status[-1]
        states = _number(last.get("states")) or float(state.rows)
        misses = _number(last.get("deadline_misses"))
        if misses is not None and states > 0:
            deadline_fraction = misses / states
        if isinstance(last.get("scheduler_note"), str):     # the real-time class asked for and not had
            warnings.append(f"simulator under the normal scheduler: {last['scheduler_note']}")
        checked.append("simulator lateness (sim/status)")
    else:
        unchecked.append("simulator lateness (no sim/status)")

    if commands:
        disturbances += driver_modes(command_s, [str(c.get("mode")) for c in commands], criteria)
        checked.append("driver tracking (hw/command)")
        sent = [(c["stamp_ns"], c["state_stamp_ns"]) for c in commands
                if c.get("mode") == TRACKING_MODE and isinstance(c.get("state_stamp_ns"), int)]
        if sent:
            sent_ns = np.array(sent, dtype=np.int64)
            disturbances += latency((sent_ns[:, 0] - origin_ns) * 1e-9, (sent_ns[:, 0] - sent_ns[:, 1]) * 1e-9,
                                    latency_max_s, "driver", "commands sent late after their state:")
            checked.append("driver latency (hw/command state_stamp_ns)")
    else:
        unchecked.append("driver tracking (no hw/command)")

    if telemetry is not None and telemetry.rows >= 2:
        sample_s = telemetry.columns["time_s"]
        disturbances += gaps(sample_s, criteria.stall_gap_s, "link", "no telemetry for")
        checked.append("telemetry continuity (hw/telemetry)")
    else:
        unchecked.append("telemetry continuity (no hw/telemetry)")

    hw_status = _decode(messages.get(TOPIC_HW_STATUS, []))
    if hw_status:
        disturbances += _link_and_plant(hw_status, _stamps_s(hw_status, origin_ns), criteria, checked, unchecked)
    else:
        unchecked.append("link and plant (no hw/status)")

    windows = healthy_windows(span, disturbances, criteria)
    analysed = windows[0] if windows else None
    run_s = max(span[1] - span[0], 0.0)
    covered = sum(end - start for start, end in windows)
    reasons = []
    if analysed is None or analysed[1] - analysed[0] < criteria.min_analysed_s:
        longest = 0.0 if analysed is None else analysed[1] - analysed[0]
        reasons.append(f"longest healthy window {longest:.1f} s < {criteria.min_analysed_s:g} s")
    if run_s > 0 and covered < criteria.min_fraction * run_s:
        reasons.append(f"healthy windows cover {covered:.1f} s of {run_s:.1f} s "
                       f"(< {criteria.min_fraction:.0%})")
    if reasons:
        reasons += _worst(disturbances)
    known = bool(sim_status or hw_status)
    if not known:
        warnings.append("health unknown: the recording has no sim/status or hw/status (an older file?); only "
                        "the timing of sim/state and hw/command was checked")
    valid = (not reasons) if known or reasons else None
    return Health(valid, reasons, warnings, windows, analysed, run_s, disturbances, deadline_fraction, checked,
                  unchecked)


def _link_and_plant(statuses: list[dict], stamps: np.ndarray, criteria: HealthCriteria, checked: list[str],
                    unchecked: list[str]) -> list[Disturbance]:
    links = [s.get("link") if isinstance(s.get("link"), dict) else {} for s in statuses]
    state = [str(link.get("state")) for link in links]
    restarts = np.array([(_number(link.get("reconnects")) or 0) + (_number(link.get("emulator_starts")) or 0)
                         for link in links])
    bad = [s != LINK_UP for s in state]
    whats = [f"link {s}" for s in state]
    for i in range(1, len(links)):
        if restarts[i] > restarts[i - 1]:
            bad[i], whats[i] = True, "link reconnected or emulator restarted"
    out = status_windows(stamps, bad, "link", whats)
    checked.append("link state and restarts (hw/status)")
    plants = [s.get("health", {}).get("plant") if isinstance(s.get("health"), dict) else None for s in statuses]
    if not any(isinstance(p, dict) for p in plants):
        unchecked.append("physics plant lag (hw/status has no health.plant: no physics plant, or an older driver)")
        return out
    lag_bad, lag_what = [], []
    for plant in plants:
        plant = plant if isinstance(plant, dict) else {}
        lag = _number(plant.get("lag_s"))
        dead = plant.get("alive") is False
        lag_bad.append(dead or (lag is not None and lag > criteria.plant_lag_max_s))
        lag_what.append("physics plant not alive" if dead else f"physics plant {lag or 0:.3f} s behind")
    checked.append("physics plant lag (hw/status health.plant)")
    return out + status_windows(stamps, lag_bad, "plant", lag_what)


#: disturbances named in the reasons of an invalid run
WORST_NAMED = 3


def _worst(disturbances: list[Disturbance]) -> list[str]:
    """The longest disturbances, as reasons: what took the healthy time away."""
    ranked = sorted(disturbances, key=lambda d: d.length_s, reverse=True)[:WORST_NAMED]
    return [f"{d.source}: {d.what} ({d.start_s:.1f}-{d.end_s:.1f} s)" for d in ranked]


def recorder_gaps(metadata: dict[str, dict[str, str]]) -> dict[str, int]:
    """The messages the recorder missed (seq gaps) per topic, from the recording's ``recorder_stats`` metadata."""
    stats = metadata.get("recorder_stats", {})
    try:
        topics = json.loads(stats.get("topics", "{}"))
    except json.JSONDecodeError:
        return {}
    return {topic: s.get("gaps", 0) for topic, s in topics.items() if s.get("gaps")}


def recorder_drops(metadata: dict[str, dict[str, str]]) -> dict[str, dict[str, int]]:
    """The messages the recorder received and dropped, per topic and reason (``backlog_full``: its queue of messages
    not yet written was at ``--max-backlog``), from the ``recorder_stats`` metadata; counted in the gaps too."""
    try:
        topics = json.loads(metadata.get("recorder_stats", {}).get("topics", "{}"))
    except json.JSONDecodeError:
        return {}
    return {topic: s["dropped"] for topic, s in topics.items() if isinstance(s, dict) and s.get("dropped")}


def recording_warnings(recording) -> list[str]:
    """What the file itself says about lost data: damaged chunks, a truncated end, messages the recorder missed."""
    warnings = [f"damaged {d.get('kind', 'chunk')} at byte {d.get('offset')}: "
                f"{d.get('messages_lost') if d.get('messages_lost') is not None else 'an unknown number of'} "
                f"messages lost ({d.get('detail', '')})" for d in getattr(recording, "damage", [])]
    if recording.truncated:
        warnings.append("the recording is truncated (a crash?): read up to its last complete record")
    gaps = recorder_gaps(recording.metadata)
    if gaps:
        warnings.append(f"messages the recorder missed (seq gaps) per topic: {gaps}")
    drops = recorder_drops(recording.metadata)
    if drops:
        warnings.append(f"of which the recorder dropped, behind its stream, per topic and reason: {drops}")
    return warnings


def health_keys(keys: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    """``keys`` (topic -> the keys to decode, for build_tables) with what :func:`assess` reads: the simulated time of
    every sim/state (the pace check) and the times of the hw/telemetry samples."""
    merged = {topic: set(names) for topic, names in (keys or {}).items()}
    merged.setdefault(TOPIC_SIM_STATE, set()).add("t")
    merged.setdefault(TOPIC_HW_TELEMETRY, set())
    return merged


def recording_health(recording, tables, criteria: HealthCriteria, cycle_hz: float | None = None) -> Health:
    """The health of a recorded run (:func:`assess`): ``recording`` a :class:`hil.recording.mcap_io.RawRecording`,
    ``tables`` its decoded tables with at least :func:`health_keys`, with what the file itself says about lost
    data (:func:`recording_warnings`)."""
    return assess(recording.messages, tables, criteria, recording_warnings(recording), cycle_hz)
