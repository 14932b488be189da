"""Soak: the live loop for minutes with the link's faults injected; no silent loss, flat memory (issue 16).

`mms serve` (the tethered flapper at 1 kHz) -> `mms drive --emulate` (the flapper rig, kinematic plant; the
emulator with bit errors on both directions, noise bursts, and an unplug every ``--unplug`` seconds: it exits and
the driver restarts it) -> `mms record`, for ``--minutes``. Then, from the recording and the processes:

- gaps: seq gaps per topic as the recorder counted them, against the file (messages + gaps = last seq + 1 - first
  seq: every message published while recording was either written or counted missing), and the telemetry
  silences outside the unplugs (hil/validation/health.py's link disturbances);
- memory: each process's resident set sampled every ``--sample`` s, its least-squares slope over the second half
  of the run (after start-up) in MiB per minute;
- the link: frames the driver sent vs frames the emulator received, and the reverse, from the driver's last
  hw/status and the emulator's --stats file (the last emulator instance only: counters restart with it).

The server's deadline misses are printed by reason (sim/status ``deadline_miss_reasons``: ``not_ready``, the
integration fell behind; ``published_late``, the process was not scheduled at the due time). By default every
process runs as a user starting them by hand would (their own defaults: the server at SCHED_FIFO 10, the driver,
the emulator and its plant one below, where the permission allows; each session at nice 0); ``--background-nice N``
puts the recorder's and the driver's sessions (the driver starts the emulator in its own) at nice N, as
`mms demo --background-nice N` does; ``--rt-priority N`` launches them at N and one below, as `mms demo
--rt-priority N` does (0: the normal scheduler; docs/headroom.md).

Not a test: it takes minutes. Usage: python benchmarks/bench_soak.py [--minutes 10] [--unplug 60] [--rt-priority N]
[--background-nice N]
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

import msgpack
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hil.experiment.demo import RIGS, write_demo_robot  # noqa: E402
from hil.experiment.supervisor import Supervisor, mms_argv  # noqa: E402
from sim.cli_options import add_background_nice, add_rt_priority, below_server_priority  # noqa: E402
from sim.network import write_loopback_network  # noqa: E402

#: fault injection: a 190-byte telemetry frame has 1 520 bits; one flipped bit per frame with this probability is
#: a bit error rate of 1e-4; the same per received byte (8 bits) on the host -> device direction
FRAME_CORRUPT_RATE = 0.15
RX_BYTE_ERROR_RATE = 8e-4
BURST_RATE = 1e-3
PAGE_KIB = 4
MIB = 1024 * 1024


def rss_mib(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/statm").read_text().split()
    except OSError:
        return None
    return int(fields[1]) * PAGE_KIB / 1024


def descendants(root: int) -> dict[int, str]:
    """pid -> command line of every live descendant of ``root``."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                table[int(entry.name)] = (parent, (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            except (OSError, IndexError):
                continue
    out = {}
    for pid, (parent, cmdline) in table.items():
        while parent in table and parent != root:
            parent = table[parent][0]
        if parent == root:
            out[pid] = cmdline
    return out


def loop_files(run: Path) -> tuple[Path, Path]:
    """The files of the flapper demo's loop in the folder ``run``: its loopback network and its robot."""
    network = run / "network.toml"
    write_loopback_network(network)
    return network, write_demo_robot(RIGS["flapper"], run / "flapper.toml")


def slope_mib_per_min(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (time s, RSS MiB) over the second half of the samples, MiB/min."""
    half = samples[len(samples) // 2:]
    if len(half) < 3:
        return float("nan")
    t, rss = np.array(half).T
    return float(np.polyfit(t, rss, 1)[0] * 60.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the soak (default 10)")
    parser.add_argument("--unplug", type=float, default=60.0, help="seconds between emulated unplugs (default 60)")
    parser.add_argument("--sample", type=float, default=5.0, help="RSS sampling period, s (default 5)")
    add_rt_priority(parser, None, "each command's own")
    add_background_nice(parser)
    args = parser.parse_args()
    rig = RIGS["flapper"]
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder)
        network, robot = loop_files(run)
        recording = run / "soak.mcap"
        stats = run / "emulator-stats.json"
        given = args.rt_priority is not None
        server = ("--rt-priority", str(args.rt_priority)) if given else ()
        below = ("--rt-priority", str(below_server_priority(args.rt_priority))) if given else ()
        emulator = (f"--plant kinematic --corrupt-rate {FRAME_CORRUPT_RATE} --rx-byte-error-rate "
                    f"{RX_BYTE_ERROR_RATE} --burst-rate {BURST_RATE} --disconnect-after {args.unplug} "
                    f"--stats {shlex.quote(str(stats))} {' '.join(below)}")
        supervisor = Supervisor(run / "logs", say=lambda text: print(f"[soak] {text}", flush=True))
        supervisor.start("serve", mms_argv("serve", str(robot), "--network", str(network), *server))
        supervisor.start("record", mms_argv("record", "--out", str(recording), "--network", str(network), "--robot",
                                            str(robot), "--rig", str(rig.rig), "--quiet"),
                         session_nice=args.background_nice)
        supervisor.start("drive", mms_argv("drive", "--rig", str(rig.rig), "--emulate", "--network", str(network),
                                           "--autostart", *below, "--emulator-args", emulator),
                         session_nice=args.background_nice)
        memory: dict[str, list[tuple[float, float]]] = {}
        started = time.monotonic()
        duration = args.minutes * 60.0
        try:
            while (elapsed := time.monotonic() - started) < duration:
                supervisor.wait(args.sample)
                for name, child in supervisor.children.items():
                    for pid in [child.pid, *descendants(child.pid)]:
                        role = name if pid == child.pid else f"{name}/child {pid}"
                        if (rss := rss_mib(pid)) is not None:
                            memory.setdefault(role, []).append((elapsed, rss))
                print(f"\r[soak] {elapsed / 60:5.1f} / {args.minutes:g} min", end="", flush=True)
            print()
        finally:
            supervisor.stop_all(["drive", "serve", "record"])
        report(recording, memory, stats, args)
    return 0


def print_miss_split(status_messages: list) -> None:
    """The server's deadline misses by reason and its lookahead, from its last sim/status."""
    if not status_messages:
        return
    status = msgpack.unpackb(bytes(status_messages[-1][2]), raw=False)
    states = max(status.get("states", 0), 1)
    reasons = status.get("deadline_miss_reasons", {})
    split = ", ".join(f"{reason.replace('_', ' ')} {count} ({count / states:.2%})" for reason, count in reasons.items())
    priority = status.get("rt_priority")
    scheduler = "unknown (a server before it was reported)" if priority is None else \
        f"SCHED_FIFO {priority}" if priority else "the normal scheduler"
    print(f"  of {states} states: {split or 'no split (a server before the split)'}; lookahead "
          f"{status.get('lookahead_states', 1)} states; {scheduler}"
          + (f" ({status['scheduler_note']})" if "scheduler_note" in status else ""))


def report(recording: Path, memory: dict, stats: Path, args) -> None:
    from hil.validation.health import HealthCriteria, assess
    from hil.recording.mcap_io import read_recording
    from hil.recording.series import build_tables

    raw = read_recording(recording)
    recorder = json.loads(raw.metadata.get("recorder_stats", {}).get("topics", "{}"))
    print(f"\nrecording: {sum(len(m) for m in raw.messages.values())} messages, damage {raw.damage or 'none'}")
    print(f"{'topic':14s} {'messages':>9s} {'missing in file':>16s} {'gaps counted':>13s} {'of which dropped':>17s}")
    for topic, messages in sorted(raw.messages.items()):
        if raw.encodings.get(topic) != "msgpack":
            continue        # the recorder's own Foxglove topics (JSON, no seq)
        seqs = np.array([msgpack.unpackb(bytes(m[2]), raw=False)["seq"] for m in messages])
        restart = np.nonzero(np.diff(seqs) < 0)[0] + 1          # a publisher restarted: its seq begins again
        segments = np.split(seqs, restart)
        missing = sum(int(seg[-1] - seg[0] + 1) for seg in segments) - len(seqs)
        gaps = recorder.get(topic, {}).get("gaps", 0)
        dropped = sum(recorder.get(topic, {}).get("dropped", {}).values())
        print(f"{topic:14s} {len(seqs):9d} {missing:16d} {gaps:13d} {dropped:17d}"
              + (f"  ({len(restart)} publisher restarts)" if len(restart) else ""))
    backlog = json.loads(raw.metadata.get("recorder_stats", {}).get("backlog", "{}"))
    if backlog:
        print(f"the recorder's backlog: at most {backlog['peak_bytes'] / MIB:.1f} of {backlog['max_bytes'] / MIB:g} "
              f"MiB held; dropped by the recorder: {backlog['dropped'] or 'none'} (gaps beyond them: lost before it, "
              "a publisher's queue at its high-water mark)")
    tables = build_tables(raw)
    health = assess(raw.messages, tables, HealthCriteria())
    link = [d for d in health.disturbances if d.source == "link"]
    unplugs = [d for d in link if "restarted" in d.what or "link" in d.what]
    silences = [d for d in link if d.what.startswith("no telemetry")]
    print(f"link disturbances: {len(unplugs)} link down/restart windows (the unplugs: {args.minutes * 60 / args.unplug:.0f} "
          f"expected), {len(silences)} telemetry silences > {HealthCriteria.stall_gap_s * 1e3:.0f} ms outside them")
    print(f"simulator: {len(health.stalls)} stalls, deadline misses {health.deadline_miss_fraction or 0:.2%}")
    print_miss_split(raw.messages.get("sim/status", []))
    print("\nmemory (RSS, MiB): first, last, slope over the second half (MiB/min)")
    for role, samples in sorted(memory.items()):
        print(f"  {role:28s} {samples[0][1]:8.1f} {samples[-1][1]:8.1f} {slope_mib_per_min(samples):+8.3f}")
    hw_status = [msgpack.unpackb(bytes(m[2]), raw=False) for m in raw.messages.get("hw/status", [])[-1:]]
    if hw_status and stats.exists():
        link_counts = hw_status[-1]["link"]
        device = json.loads(stats.read_text())
        print(f"\nlink (last emulator instance): driver frames sent {link_counts.get('frames_sent')} (all instances), "
              f"device frames received {device['rx']['frames']} + crc errors {device['rx']['crc_errors']}; "
              f"device frames sent {device['frames_tx']}, driver frames ok {link_counts['frames_ok']} + crc errors "
              f"{link_counts['crc_errors']} (all instances), reconnects {link_counts['reconnects']}")


if __name__ == "__main__":
    sys.exit(main())
