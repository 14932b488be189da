"""`mms record` as a real subprocess on real ZeroMQ traffic; its files read back by the mcap package's reader."""
from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import msgpack
import zmq
from mcap.reader import make_reader

from sim import messages
from sim.messages import SCHEMAS

ROBOT_TEXT = '# a robot config stored verbatim\n[robot]\nkind = "flapper"\nname = "test"\n'
#: messages of the burst test: enough to queue in the recorder for several receive turns
BURST_MESSAGES = 20_000
RIG_TEXT = '# a rig config stored verbatim\n[rig]\nname = "test-rig"\n'


def test_record_every_topic_with_schemas_times_metadata_and_gap_counts(tmp_path, network, kit):
    robot, rig = tmp_path / "robot.toml", tmp_path / "rig.toml"
    robot.write_text(ROBOT_TEXT)
    rig.write_text(RIG_TEXT)
    out = tmp_path / "runs" / "run.mcap"
    with kit.Publisher(network, rate_hz=500, skip_every=7, skip_by=3, malformed=True) as publisher:
        proc = kit.mms("record", "--network", network["path"], "--out", str(out), "--robot", str(robot),
                       "--rig", str(rig))
        try:
            kit.status_when(network["rec"], lambda r: r.get("recording") and len(r["topics"]) == 5
                            and r["topics"]["hw/status"]["messages"] >= 30 and r["malformed"] >= 4,
                            "all five topics, 30 hw/status messages and the malformed ones recorded")
        finally:
            _, stderr = kit.stop_process(proc, signal.SIGINT)
        expected_gaps = publisher.expected_gaps
    assert proc.returncode == 0, stderr
    # the progress line (text mode turns its "\r" into newlines): messages and MB per topic, line cleared
    progress = [line for line in stderr.splitlines() if line.startswith("rec ")]
    assert progress and "\x1b[K" in progress[-1] and "sim/state" in progress[-1] and " MB" in progress[-1]

    with open(out, "rb") as handle:
        reader = make_reader(handle)
        summary = reader.get_summary()
        assert summary is not None, "a cleanly stopped recording has a summary"
        channels = {c.topic: c for c in summary.channels.values()}
        assert set(channels) == set(SCHEMAS)
        for topic, channel in channels.items():
            assert channel.message_encoding == "msgpack"
            schema = summary.schemas[channel.schema_id]
            assert schema.encoding == "jsonschema" and schema.name == topic
            assert json.loads(schema.data) == SCHEMAS[topic]
        seqs: dict[str, list[int]] = {}
        for _schema, channel, message in reader.iter_messages(log_time_order=False):
            payload = msgpack.unpackb(message.data, raw=False)
            messages.validate(channel.topic, payload)     # the file's schema (equal to SCHEMAS, above)
            assert message.publish_time == payload["stamp_ns"]
            assert message.log_time >= message.publish_time - 1_000_000  # received after sent (same clock, 1 ms)
            assert message.sequence == payload["seq"]
            seqs.setdefault(channel.topic, []).append(payload["seq"])
        metadata = {m.name: m.metadata for m in reader.iter_metadata()}

    assert metadata["robot_config"] == {"path": str(robot), "text": ROBOT_TEXT}
    assert metadata["rig_config"] == {"path": str(rig), "text": RIG_TEXT}
    assert metadata["software"]["mcap"] and metadata["software"]["mms-hil"]
    stats = metadata["recorder_stats"]
    topics = json.loads(stats["topics"])
    assert int(stats["malformed"]) >= 8  # each malformed round sends two bad messages
    # sim/state was published without gaps: every seq between the first and last recorded is there
    state = seqs["sim/state"]
    assert state == list(range(state[0], state[0] + len(state)))
    assert topics["sim/state"]["gaps"] == 0 and topics["sim/state"]["messages"] == len(state)
    # hw/status skipped `skip_by` seqs every `skip_every` messages: the gaps counted are exactly those inside
    # the recorded span
    status = seqs["hw/status"]
    inside = sum(b - a - 1 for a, b in zip(status, status[1:]))
    assert inside > 0 and topics["hw/status"]["gaps"] == inside
    assert inside <= expected_gaps


def test_control_socket_start_stop_status_and_bad_requests(tmp_path, network, kit):
    first, second = tmp_path / "a.mcap", tmp_path / "b.mcap"
    with kit.Publisher(network, rate_hz=200):
        proc = kit.mms("record", "--network", network["path"], "--idle", "--quiet", "--run-dir", str(tmp_path))
        try:
            idle = kit.status_when(network["rec"], lambda r: r.get("ok"), "the control socket")
            assert idle == {"ok": True, "recording": False}
            assert kit.request(network["rec"], {"cmd": "stop"}) == {"ok": False, "error": "not recording"}
            bad = kit.request(network["rec"], b"\xc1 not msgpack")
            assert bad["ok"] is False and "MessagePack" in bad["error"]
            assert kit.request(network["rec"], [1, 2])["ok"] is False
            unknown = kit.request(network["rec"], {"cmd": "dance"})
            assert unknown["ok"] is False and "dance" in unknown["error"]

            started = kit.request(network["rec"], {"cmd": "start", "path": str(first)})
            assert started == {"ok": True, "recording": True, "path": str(first.resolve())}
            again = kit.request(network["rec"], {"cmd": "start", "path": str(second)})
            assert again["ok"] is False and "already recording" in again["error"]
            kit.status_when(network["rec"], lambda r: r.get("messages", 0) >= 200, "200 messages recorded")
            stopped = kit.request(network["rec"], {"cmd": "stop"})
            assert stopped["ok"] is True and stopped["recording"] is False and stopped["messages"] >= 200

            exists = kit.request(network["rec"], {"cmd": "start", "path": str(first)})
            assert exists["ok"] is False and "exists" in exists["error"]
            assert kit.request(network["rec"], {"cmd": "start", "path": str(second)})["ok"] is True
            kit.status_when(network["rec"], lambda r: r.get("messages", 0) >= 50, "50 messages in the second file")
        finally:
            _, stderr = kit.stop_process(proc, signal.SIGTERM)
    assert proc.returncode == 0, stderr
    for path, at_least in ((first, stopped["messages"]), (second, 50)):
        with open(path, "rb") as handle:
            reader = make_reader(handle)
            count = sum(1 for _ in reader.iter_messages())
            assert reader.get_summary().statistics.message_count == count
        assert count >= at_least
    with open(first, "rb") as handle:
        assert sum(1 for _ in make_reader(handle).iter_messages()) == stopped["messages"]


def test_record_refuses_bad_arguments_with_one_line(tmp_path, network, kit):
    missing = kit.mms_run("record", "--network", network["path"], "--robot", str(tmp_path / "nope.toml"),
                          "--out", str(tmp_path / "x.mcap"), timeout=60)
    assert missing.returncode == 2
    assert "nope.toml" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1
    existing = tmp_path / "exists.mcap"
    existing.write_bytes(b"keep me")
    refused = kit.mms_run("record", "--network", network["path"], "--out", str(existing), "--duration", "1",
                          timeout=60)
    assert refused.returncode == 2 and "exists" in refused.stderr
    assert existing.read_bytes() == b"keep me"


def test_control_socket_writes_only_new_files_inside_the_run_directory(tmp_path, network, kit):
    run_dir, outside = tmp_path / "runs", tmp_path / "outside"
    run_dir.mkdir()
    outside.mkdir()
    victim = outside / "victim.mcap"
    victim.write_bytes(b"precious")
    kept = run_dir / "kept.mcap"
    kept.write_bytes(b"earlier run")
    (run_dir / "escape").symlink_to(outside, target_is_directory=True)
    (run_dir / "link.mcap").symlink_to(victim)
    (run_dir / "dangling.mcap").symlink_to(outside / "new.mcap")
    refusals = {
        str(victim): "outside the run directory", "../outside/victim.mcap": "'..'",
        "sub/../../outside/x.mcap": "'..'", "escape/x.mcap": "outside the run directory",
        "dangling.mcap": "outside the run directory", "link.mcap": "outside the run directory",
        "kept.mcap": "exists", str(kept): "exists", "notes.txt": ".mcap", "": "non-empty",
        "/etc/passwd.mcap": "outside the run directory"}
    with kit.Publisher(network, rate_hz=200):
        proc = kit.mms("record", "--network", network["path"], "--idle", "--quiet", "--run-dir", str(run_dir))
        try:
            kit.status_when(network["rec"], lambda r: r.get("ok"), "the control socket")
            for path, reason in refusals.items():
                reply = kit.request(network["rec"], {"cmd": "start", "path": path})
                assert reply["ok"] is False and reason in reply["error"], (path, reply)
            forced = kit.request(network["rec"], {"cmd": "start", "path": "kept.mcap", "overwrite": True})
            assert forced["ok"] is False and "overwrit" in forced["error"]
            forced = kit.request(network["rec"], {"cmd": "start", "path": "fresh.mcap", "overwrite": True})
            assert forced["ok"] is False
            assert kit.request(network["rec"], {"cmd": "status"}) == {"ok": True, "recording": False}
            started = kit.request(network["rec"], {"cmd": "start", "path": "day1/fresh.mcap"})
            assert started["ok"] is True and started["path"] == str((run_dir / "day1" / "fresh.mcap").resolve())
            kit.status_when(network["rec"], lambda r: r.get("messages", 0) >= 20, "20 messages recorded")
            assert kit.request(network["rec"], {"cmd": "stop"})["ok"] is True
            default = kit.request(network["rec"], {"cmd": "start"})
            assert default["ok"] is True and Path(default["path"]).parent == run_dir.resolve()
        finally:
            _, stderr = kit.stop_process(proc, signal.SIGTERM)
    assert proc.returncode == 0, stderr
    assert victim.read_bytes() == b"precious" and kept.read_bytes() == b"earlier run"
    assert sorted(p.name for p in outside.iterdir()) == ["victim.mcap"]
    with open(run_dir / "day1" / "fresh.mcap", "rb") as handle:
        assert sum(1 for _ in make_reader(handle).iter_messages()) >= 20


def test_a_burst_is_recorded_byte_for_byte_in_order_with_receipt_times(tmp_path, network, kit):
    """The receive path queues a burst and writes it once the socket is drained: the file must hold exactly the
    bytes sent, in order, with non-decreasing receipt times inside the burst's span and the gaps counted."""
    context = zmq.Context()
    pub = kit.burst_publisher(context, network)
    out = tmp_path / "burst.mcap"
    proc = kit.mms("record", "--network", network["path"], "--out", str(out), "--quiet")
    sent: list[bytes] = []
    try:
        kit.wait_subscribed(pub, network)
        skipped = 0
        first_ns = time.time_ns()
        for k in range(BURST_MESSAGES):
            seq = k + (1 if k >= BURST_MESSAGES // 2 else 0)        # one seq skipped half-way: one gap
            skipped = seq - k
            payload = msgpack.packb({"v": 1, "seq": seq, "stamp_ns": first_ns + k, "k": k, "pad": "x" * (k % 97)})
            sent.append(payload)
            pub.send_multipart([b"hw/status", payload])
        status = kit.status_when(network["rec"],
                                 lambda r: r.get("topics", {}).get("hw/status", {}).get("messages") == len(sent),
                                 "the burst written")
        assert status["topics"]["hw/status"]["gaps"] == skipped == 1
        written_ns = time.time_ns()
    finally:
        _, stderr = kit.stop_process(proc, signal.SIGTERM)
        context.destroy(0)
    assert proc.returncode == 0, stderr
    with open(out, "rb") as handle:
        messages = [m for _, _, m in make_reader(handle).iter_messages(topics=["hw/status"], log_time_order=False)]
    assert [m.data for m in messages] == sent
    log_times = [m.log_time for m in messages]
    assert log_times == sorted(log_times) and first_ns <= log_times[0] and log_times[-1] <= written_ns
    assert [m.publish_time for m in messages] == [first_ns + k for k in range(len(sent))]
