"""The columnar decode that validate and export share (hil/recording/series.py, template_decode.py) against an
independent, straightforward decode of the same real MCAP file: the mcap package's own reader and msgpack, message by
message. A recording with a simulator stall (a gap), a driver hold, a link-down stretch (no telemetry, hw/status
says so) and bad messages (not MessagePack, cut short, a key renamed at the same length) with skipped seqs: the
columns are identical, and so are the run's health and every channel's metrics computed from either."""
from __future__ import annotations

from dataclasses import replace

import msgpack
import numpy as np
from mcap.reader import make_reader

from hil.recording.mcap_io import read_recording
from hil.recording.series import Table, Tables, build_tables
from hil.validation import validate
from hil.validation.health import assess, recording_warnings
from sim.messages import TOPIC_HW_TELEMETRY, TOPIC_SIM_STATE

from .conftest import write_live_run

#: the faults of the run, s: (start, length)
STALL, HOLD, LINK_DOWN = (3.0, 0.5), (6.0, 0.4), (9.0, 0.6)
#: a bad message after every this many sim/state and telemetry messages (each a different kind in turn)
BAD_EVERY = 97
#: the keys compared: those validate decodes, and sim/state's time t (health's pace check reads it)
KEYS = {TOPIC_SIM_STATE: {"q", "t"}, TOPIC_HW_TELEMETRY: {"servo_rad", "strain", "load"}}
_UINT32 = 1 << 32


def _reference_tables(path) -> Tables:
    """The tables of KEYS from the mcap reader's messages, each decoded whole by msgpack (bad ones dropped)."""
    decoded: dict[str, list[tuple[int, dict]]] = {TOPIC_SIM_STATE: [], TOPIC_HW_TELEMETRY: []}
    firsts = {}
    with open(path, "rb") as handle:
        for _schema, channel, message in make_reader(handle).iter_messages(log_time_order=False):
            firsts.setdefault(channel.topic, message.publish_time)
            try:
                payload = msgpack.unpackb(message.data)
            except Exception:   # msgpack raises several unrelated types on bad bytes
                continue
            if channel.topic in decoded and isinstance(payload, dict):
                decoded[channel.topic].append((message.log_time, payload))
    origin = min(firsts.values())
    state = Table(TOPIC_SIM_STATE)
    payloads = [p for _, p in decoded[TOPIC_SIM_STATE]]
    state.columns["log_time"] = np.array([t for t, _ in decoded[TOPIC_SIM_STATE]], dtype=np.int64)
    state.columns["stamp_ns"] = np.array([p["stamp_ns"] for p in payloads], dtype=np.int64)
    state.columns["time_s"] = (state.columns["stamp_ns"] - origin) * 1e-9
    names = payloads[0]["joint_names"]
    state.element_names["q"] = names
    state.groups["q"] = [f"q_{name}" for name in names]
    for i, name in enumerate(names):
        state.columns[f"q_{name}"] = np.array([p["q"][i] if "q" in p else np.nan for p in payloads])
    state.columns["t"] = np.array([p["t"] for p in payloads], dtype=float)
    telemetry = Table(TOPIC_HW_TELEMETRY)
    frames = [(t, p) for t, p in decoded[TOPIC_HW_TELEMETRY]]
    sample_ns, log_time = [], []
    for frame_log_time, p in frames:
        for us in p["device_us"]:
            back_ns = ((p["device_us"][-1] - us) % _UINT32) * 1000
            sample_ns.append(p["host_ns"] - back_ns)
            log_time.append(frame_log_time - back_ns)
    telemetry.columns["log_time"] = np.array(log_time, dtype=np.int64)
    telemetry.columns["sample_ns"] = np.array(sample_ns, dtype=np.int64)
    telemetry.columns["time_s"] = (telemetry.columns["sample_ns"] - origin) * 1e-9
    for key, names_key in (("servo_rad", "servo_names"), ("strain", "strain_names"), ("load", "load_names")):
        names = frames[0][1][names_key]
        telemetry.element_names[key] = names
        telemetry.groups[key] = [f"{key}_{name}" for name in names]
        for i, name in enumerate(names):
            telemetry.columns[f"{key}_{name}"] = np.array(
                [row[i] if key in p else np.nan for _, p in frames for row in p.get(key, [[]] * len(p["device_us"]))])
    return Tables({TOPIC_SIM_STATE: state, TOPIC_HW_TELEMETRY: telemetry}, origin, {})


def test_the_columnar_decode_gives_the_columns_health_and_metrics_of_a_plain_decode(tmp_path):
    path = tmp_path / "faulty.mcap"
    write_live_run(path, duration_s=16.0, stall=STALL, hold=HOLD, link_down=LINK_DOWN, bad_every=BAD_EVERY)
    recording = read_recording(path)
    fast = build_tables(recording, topics=list(KEYS), keys=KEYS)
    reference = _reference_tables(path)
    assert fast.origin_ns == reference.origin_ns
    # the bad messages are there and are told apart: the undecodable ones dropped, the renamed ones kept as rows
    # without the renamed key (NaN), the gap and the link-down stretch absent
    assert fast.malformed[TOPIC_SIM_STATE] > 0 and fast.malformed[TOPIC_HW_TELEMETRY] > 0
    q = fast.tables[TOPIC_SIM_STATE].group("q")
    assert 0 < np.isnan(q).any(axis=1).sum() < len(q) / BAD_EVERY
    samples_s = fast.tables[TOPIC_HW_TELEMETRY].columns["time_s"]
    assert np.diff(samples_s).max() >= LINK_DOWN[1]
    for topic, table in reference.tables.items():
        mine = fast.tables[topic]
        assert mine.rows == table.rows and mine.element_names == {k: v for k, v in mine.element_names.items()
                                                                  if k in table.element_names}
        for name, values in table.columns.items():
            assert mine.columns[name].dtype == values.dtype, f"{topic}:{name}"
            np.testing.assert_array_equal(mine.columns[name], values, err_msg=f"{topic}:{name}")
    # the same run health (the stall, the hold and the link-down stretch cut) and the same metrics per channel
    settings = validate.load_settings(None)
    rig, origin = validate.run_rig(recording.metadata, None)
    warnings = recording_warnings(recording)
    metrics, health = [], []
    for tables in (fast, reference):
        pairs, _source = validate.default_pairs(settings, tables, rig, origin)
        cycle_hz = validate.cycle_frequency(pairs, tables, settings)
        run_health = assess(recording.messages, tables, settings.health, warnings, cycle_hz)
        health.append(run_health.as_dict())
        results = validate.evaluate_pairs(pairs, tables, replace(settings, window=run_health.analysed))
        metrics.append({r.pair.name: (r.status, r.metrics) for r in results})
    assert health[0] == health[1]
    whats = " ".join(d["what"] for d in health[0]["disturbances"])
    assert "stall" in whats and "driver hold" in whats and "link down" in whats, whats
    assert metrics[0] == metrics[1]
    assert metrics[0]["tail vs q[tail_yaw]"][0] == metrics[0]["fin_ray_left vs q[tail_yaw]"][0] == validate.PASS
