"""Ring buffers and message decoding of the dashboard (pure numpy, no Qt, no sockets)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from gui.ringbuffer import RingBuffer, StreamStore
from gui.signals import ClockAligner, MessageProcessor, base_name, strain_group, tip_sums
from sim import messages


def test_ring_buffer_keeps_the_newest_samples_in_order_across_wraps():
    rng = np.random.default_rng(7)
    ring = RingBuffer(capacity=50, n_channels=3)
    all_times, all_values = [], []
    t = 0.0
    for block in rng.integers(0, 23, size=200):   # block sizes 0..22, wrapping many times
        times = t + np.arange(block) * 0.001
        values = rng.standard_normal((block, 3))
        t += block * 0.001
        ring.append(times, values)
        all_times.extend(times)
        all_values.extend(values)
        expected_t = np.array(all_times[-50:])
        np.testing.assert_array_equal(ring.times(), expected_t)
        np.testing.assert_array_equal(ring.values(), np.array(all_values[-50:]).reshape(-1, 3))
    assert ring.total == len(all_times)
    big = np.arange(120) * 1.0
    ring.append(big + 1000, np.column_stack([big, -big, 2 * big]))   # one block larger than the capacity
    np.testing.assert_array_equal(ring.times(), big[-50:] + 1000)
    np.testing.assert_array_equal(ring.values()[:, 2], 2 * big[-50:])


def test_ring_buffer_window_selects_the_visible_span_plus_one_sample_before():
    ring = RingBuffer(capacity=100, n_channels=1)
    ring.append(np.arange(100) * 0.1, np.arange(100.0).reshape(-1, 1))
    times, values = ring.window(5.0, 7.0)
    assert times[0] == pytest.approx(4.9) and times[-1] == pytest.approx(7.0)
    assert values[:, 0].tolist() == list(range(49, 71))


def test_stream_store_restarts_a_stream_whose_channels_change():
    store = StreamStore(capacity=10)
    store.append("sim.tau", ("a", "b"), [0.0], [[1.0, 2.0]])
    version = store.layout_version
    store.append("sim.tau", ("a", "b"), [0.1], [[3.0, 4.0]])
    assert store.layout_version == version and len(store.buffers["sim.tau"]) == 2
    store.append("sim.tau", ("a", "b", "c"), [0.2], [[5.0, 6.0, 7.0]])
    assert store.layout_version == version + 1 and len(store.buffers["sim.tau"]) == 1


def test_names_pair_sensors_with_joints_and_group_tip_sums():
    assert base_name("sg_twist2_r") == base_name("twist2_r_strain") == "twist2_r"
    assert base_name("tether_Fx") == "fx" and base_name("tau_stroke_l") == "stroke_l"
    assert strain_group("twist3_r") == "twist_r" and strain_group("sg_r_bend_2") == "r_bend"
    assert strain_group("stroke_r") is None
    names = ["stroke_r", "twist1_r", "bend1_r", "twist2_r", "bend2_r"]
    values = np.array([[9.0, 1.0, 10.0, 2.0, 20.0], [9.0, -1.0, 0.5, 3.0, 0.25]])
    groups, sums = tip_sums(names, values, include=np.array([False, True, True, True, True]))
    assert groups == ["tip_bend_r", "tip_twist_r"]
    np.testing.assert_allclose(sums, [[30.0, 3.0], [0.75, 2.0]])


def test_clock_aligner_removes_publishing_jitter():
    rng = np.random.default_rng(3)
    aligner = ClockAligner()
    source = np.arange(400) * 0.005                      # simulation time, s (200 Hz)
    delay = 0.002 + rng.exponential(0.004, size=400)     # publishing delay, s, jittery
    delay[::50] = 0.002                                  # the least-delayed publication, once every 0.25 s
    wall = 100.0 + source + delay
    aligned = np.array([s + aligner.offset(s, w) for s, w in zip(source, wall)])
    # after the first least-delayed sample, every sample sits at exactly source + (100 + 0.002)
    np.testing.assert_allclose(aligned[1:], source[1:] + 100.002, atol=1e-9)
    assert np.ptp(np.diff(wall)) > 0.01   # while the raw stamps were visibly jittery


def _state(seq: int, t: float, n: int = 3) -> dict:
    payload = {"v": 1, "seq": seq, "t": t, "stamp_ns": 1_000_000_000 + int(t * 1e9),
               "joint_names": ["stroke_r", "twist1_r", "bend1_r"][:n], "actuated": [True, False, False][:n],
               "q": [0.1 * seq] * n, "qd": [0.0] * n, "qdd": [0.0] * n, "tau": [float(seq)] * n,
               "strain": [0.01 * seq, 0.02 * seq][:n - 1], "base_pos": [0.0] * 3, "base_quat": [1.0, 0, 0, 0],
               "base_twist": [0.0] * 6, "base_wrench": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "ext_wrench": [0.0] * 6}
    messages.validate(messages.TOPIC_SIM_STATE, payload)
    return payload


def test_processor_counts_gaps_and_malformed_messages_and_keeps_values():
    processor = MessageProcessor(origin_ns=1_000_000_000)
    for seq in (0, 1, 2, 5, 6):   # 3 and 4 lost
        processor.feed_frames(messages.encode(messages.TOPIC_SIM_STATE, _state(seq, seq * 0.01)))
    processor.feed_frames([b"sim/state", b"\xc1"])                  # not msgpack
    processor.feed_frames([b"sim/state"])                           # one frame
    bad = _state(7, 0.07)
    bad["strain"] = [1.0, 2.0, 3.0]                                 # one per joint, not per passive joint
    processor.feed(messages.TOPIC_SIM_STATE, bad)
    batch = processor.take_batch()
    assert batch.received[messages.TOPIC_SIM_STATE] == 5
    assert batch.gaps[messages.TOPIC_SIM_STATE] == 2
    assert batch.malformed == 3
    tau = next(c for c in batch.chunks if c.key == "sim.tau")
    assert tau.names == ("stroke_r", "twist1_r", "bend1_r")
    np.testing.assert_array_equal(tau.values[:, 0], [0, 1, 2, 5, 6])
    tip = next(c for c in batch.chunks if c.key == "sim.tip")
    np.testing.assert_allclose(tip.values[:, tip.names.index("tip_bend_r")], [0, 0.02, 0.04, 0.1, 0.12])
    assert batch.actuated == {"stroke_r": True, "twist1_r": False, "bend1_r": False}
    assert processor.take_batch().chunks == []


def test_peak_decimation_keeps_every_bins_extremes_for_all_channels():
    from gui.decimate import aligned_peak_decimate

    rng = np.random.default_rng(11)
    times = np.arange(10_003) * 1e-3
    values = rng.standard_normal((10_003, 3))
    values[5_000, 1] = 40.0                       # a one-sample spike must survive
    per_bin, first_index = 15, 7                  # sample 0 is number 7: the first piece holds numbers 7..14
    out_t, out_v = aligned_peak_decimate(times, values, first_index, per_bin)
    assert len(out_t) == 2 * (1 + -(-(10_003 - 8) // per_bin)) and out_v.shape == (len(out_t), 3)
    np.testing.assert_array_equal(out_v.max(axis=0), values.max(axis=0))
    np.testing.assert_array_equal(out_v.min(axis=0), values.min(axis=0))
    assert out_v[:, 1].max() == 40.0
    np.testing.assert_array_equal(out_v[0], values[:8].min(axis=0))
    np.testing.assert_array_equal(out_v[1], values[:8].max(axis=0))
    # piece j >= 1: samples 8 + (j - 1) * per_bin onwards, (min, max) at its first time
    j = 123
    block = values[8 + (j - 1) * per_bin:8 + j * per_bin]
    np.testing.assert_array_equal(out_v[2 * j], block.min(axis=0))
    np.testing.assert_array_equal(out_v[2 * j + 1], block.max(axis=0))
    assert out_t[2 * j] == out_t[2 * j + 1] == times[8 + (j - 1) * per_bin]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), capacity=st.sampled_from([3_000, 20_000]))
def test_incremental_decimation_equals_the_reference_every_frame(seed, capacity):
    """Frames of random sizes, window lengths and plot widths, a NaN, a ring that wraps and one cleared: the
    incremental envelope equals the reference computed from scratch on the same window, exactly."""
    from gui.decimate import StreamDecimator, aligned_peak_decimate
    from gui.ringbuffer import RingBuffer

    rng = np.random.default_rng(seed)
    buffer, decimator, t = RingBuffer(capacity, 3), StreamDecimator(), 0.0
    window_s, bins, compared = 10.0, 700, 0
    for frame in range(120):
        count = int(rng.integers(1, 300))
        times = t + np.arange(count) * 1e-3
        t = times[-1] + 1e-3
        values = rng.standard_normal((count, 3))
        if frame == 30:
            values[0, 1] = np.nan
        if frame == 80:
            buffer.clear()
        buffer.append(times, values)
        if frame % 25 == 0:
            window_s, bins = float(rng.choice([1.0, 2.5, 10.0])), int(rng.choice([150, 300, 700]))
        t_end = times[-1] - float(rng.choice([0.0, 0.05]))
        got_t, got_v = decimator.window(buffer, t_end - window_s, t_end, bins)
        stored_t, stored_v = buffer.times(), buffer.values()
        first = max(int(np.searchsorted(stored_t, t_end - window_s, side="left")) - 1, 0)
        last = int(np.searchsorted(stored_t, t_end, side="right"))
        if last - first <= 2 * bins:
            want_t, want_v = stored_t[first:last], stored_v[first:last]
        else:
            assert -(-(last - first) // bins) <= decimator.per_bin
            want_t, want_v = aligned_peak_decimate(stored_t[first:last], stored_v[first:last],
                                                   buffer.total - len(stored_t) + first, decimator.per_bin)
            compared += 1
        np.testing.assert_array_equal(got_t, want_t)
        np.testing.assert_array_equal(got_v, want_v)
        assert got_v.shape[0] <= 2 * (bins + 2)
    assert compared > 0
