"""``mms bridge``: the live topics for Foxglove (WebSocket) and PlotJuggler (ZeroMQ), docs/foxglove.md.

One SUB socket follows the simulator's and the driver's PUB endpoints (every topic), as the recorder does; each
message is checked where it enters (two frames, an ASCII topic, a MessagePack map; ``seq`` gaps counted per topic)
and what fails is counted by reason and dropped. Then:

- ``--foxglove PORT``: foxglove-sdk's WebSocket server (Foxglove's WebSocket protocol, subprotocol
  ``foxglove.sdk.v1``) on loopback serves one JSON channel per topic, its schema the topic's JSON schema
  (:data:`sim.messages.SCHEMAS`), and with ``--robot`` the robot's poses and shapes as Foxglove's well-known
  messages (hil/foxglove/scene.py): Foxglove's 3-D panel draws the robot live. Message log times are the payloads'
  ``stamp_ns``.
- ``--plotjuggler ENDPOINT``: a ZeroMQ PUB socket bound there sends every message as PlotJuggler's ZMQ subscriber
  reads it (hil/bridge/plotjuggler.py): ``[topic, flat JSON map of numbers, seconds]``.

The WebSocket server has no authentication, so it binds only to 127.0.0.1; the PUB socket follows the network's
rule (loopback unless CURVE keys are configured, and PlotJuggler speaks no CURVE: loopback). SIGINT and SIGTERM stop
it; the counters go to stderr at exit.
"""
from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import zmq

from hil.bridge import plotjuggler
from hil.foxglove.scene import (FRAME_TRANSFORMS, MESSAGE_ENCODING, SCENE_UPDATE, SCHEMA_ENCODING, TOPIC_POSES,
                                TOPIC_SCENE, PoseStream, pose_stream, schema)
from sim.config import ConfigError, load_toml
from sim.messages import SCHEMAS, TOPIC_SIM_STATE, MalformedMessage, SeqTracker, decode
from sim.network import load_endpoints, open_socket

#: poll timeout of the loop, s: bounds the reaction to a stop request
LOOP_TIMEOUT_S = 0.05
#: receive queue, messages: a slow WebSocket client makes the SDK drop its oldest messages, never this queue
RECEIVE_HWM = 100_000
#: the WebSocket server's address: no authentication, so loopback only
FOXGLOVE_HOST = "127.0.0.1"


@dataclass
class BridgeStats:
    received: int = 0
    refused: dict[str, int] = field(default_factory=dict)      # reason -> messages dropped at the boundary
    seq: SeqTracker = field(default_factory=SeqTracker)

    def refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1


class FoxgloveSink:
    """foxglove-sdk's WebSocket server and one channel per topic, all advertised at once."""

    def __init__(self, port: int, with_poses: bool):
        import foxglove

        self._foxglove = foxglove
        self.context = foxglove.Context()
        self.channels: dict[str, Any] = {}
        for topic, topic_schema in SCHEMAS.items():
            self._channel(topic, topic, json.dumps(topic_schema).encode())
        if with_poses:
            for topic, name in ((TOPIC_POSES, FRAME_TRANSFORMS), (TOPIC_SCENE, SCENE_UPDATE)):
                self._channel(topic, name, json.dumps(schema(name)).encode())
        self.server = foxglove.start_server(name="mms bridge", host=FOXGLOVE_HOST, port=port, context=self.context)

    def _channel(self, topic: str, schema_name: str, data: bytes) -> Any:
        channel = self._foxglove.Channel(
            topic, schema=self._foxglove.Schema(name=schema_name, encoding=SCHEMA_ENCODING, data=data),
            message_encoding=MESSAGE_ENCODING, context=self.context)
        self.channels[topic] = channel
        return channel

    def log(self, topic: str, data: bytes, log_time_ns: int) -> None:
        channel = self.channels.get(topic)
        if channel is None:         # a topic without a schema: a schemaless JSON channel (any map)
            channel = self.channels[topic] = self._foxglove.Channel(topic, context=self.context)
        channel.log(data, log_time=log_time_ns)

    @property
    def port(self) -> int:
        return self.server.port

    def close(self) -> None:
        self.server.stop()


class Bridge:
    """The bridge process: SUB in, the Foxglove sink and/or the PlotJuggler PUB socket out."""

    def __init__(self, endpoints, *, foxglove: FoxgloveSink | None, plotjuggler_pub: zmq.Socket | None,
                 poses: PoseStream | None, context: zmq.Context):
        self.sub = open_socket(context, zmq.SUB, endpoints.sim_pub, bind=False, curve=endpoints.curve,
                               what="sim.pub", options={zmq.RCVHWM: RECEIVE_HWM, zmq.LINGER: 0, zmq.SUBSCRIBE: b""})
        self.sub.connect(endpoints.driver_pub)
        self.sources = f"{endpoints.sim_pub} and {endpoints.driver_pub}"
        self.foxglove, self.plotjuggler_pub, self.poses = foxglove, plotjuggler_pub, poses
        self.stats = BridgeStats()
        self.names: dict[str, list[str]] = {}        # the latest name lists, for PlotJuggler's element names
        self.stop_requested = False

    def handle(self, frames: list[bytes]) -> None:
        """One received message: checked, then forwarded to each output."""
        self.stats.received += 1
        try:
            topic, payload = decode(frames)
        except MalformedMessage:
            self.stats.refuse("malformed")
            return
        seq, stamp = payload.get("seq"), payload.get("stamp_ns")
        if not (isinstance(seq, int) and isinstance(stamp, int) and seq >= 0 and stamp >= 0):
            self.stats.refuse("seq_or_stamp")
            return
        self.stats.seq.update(topic, seq)
        if self.foxglove is not None:
            try:
                data = json.dumps(payload, separators=(",", ":"), allow_nan=False).encode()
            except (TypeError, ValueError):      # bytes or a NaN inside: not JSON
                self.stats.refuse("not_json")
            else:
                self.foxglove.log(topic, data, stamp)
            if topic == TOPIC_SIM_STATE and self.poses is not None:
                for message in self.poses.messages(payload):
                    self.foxglove.log(message.topic, message.data, message.stamp_ns)
        if self.plotjuggler_pub is not None:
            for message in plotjuggler.messages(topic, payload, self.names):
                self.plotjuggler_pub.send_multipart(message)

    @property
    def served(self) -> str:
        """What the bridge serves, in words (its startup line)."""
        parts = [f"Foxglove on ws://{FOXGLOVE_HOST}:{self.foxglove.port}"] if self.foxglove is not None else []
        if self.plotjuggler_pub is not None:
            parts.append(f"PlotJuggler on {self.plotjuggler_pub.getsockopt_string(zmq.LAST_ENDPOINT)}")
        return " and ".join(parts)

    def run(self) -> None:
        """Forward until :attr:`stop_requested`; then close every socket and the server."""
        try:
            while not self.stop_requested:
                if not self.sub.poll(int(LOOP_TIMEOUT_S * 1000)):
                    continue
                # the stop is looked at between messages: a bridge slower than its peers (a busy machine: the
                # messages arrive faster than it converts them) never drains its socket, and went on for the
                # whole 30 s its test waits after the stop (load 16)
                while not self.stop_requested:
                    try:
                        frames = self.sub.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self.handle(frames)
        finally:
            self.sub.close()
            if self.foxglove is not None:
                self.foxglove.close()
            if self.plotjuggler_pub is not None:
                self.plotjuggler_pub.close()

    def summary(self) -> str:
        refused = dict(self.stats.refused)
        if self.poses is not None:
            refused.update({f"poses:{k}": v for k, v in self.poses.refused.items()})
        gaps = sum(self.stats.seq.gaps.values())
        return f"received {self.stats.received}, seq gaps {gaps}, refused {refused or 'none'}"


def open_bridge(args) -> Bridge:
    """The bridge of parsed ``mms bridge`` arguments, its sockets and server open (one-line ConfigError on a bad
    option, a taken port or endpoint)."""
    if args.foxglove is None and args.plotjuggler is None:
        raise ConfigError(None, "mms bridge", "nothing to serve: give --foxglove [PORT] and/or --plotjuggler "
                                              "[ENDPOINT]")
    endpoints = load_endpoints(args.network)
    poses = pose_stream(load_toml(args.robot), args.robot, args.poses_rate) if args.robot else None
    context = zmq.Context.instance()
    pub = None
    if args.plotjuggler is not None:
        pub = open_socket(context, zmq.PUB, args.plotjuggler, bind=True, curve=None, what="plotjuggler",
                          options={zmq.LINGER: 0})
    try:
        sink = FoxgloveSink(args.foxglove, poses is not None) if args.foxglove is not None else None
    except RuntimeError as exc:         # the SDK's error for a port it cannot bind
        if pub is not None:
            pub.close()
        raise ConfigError(None, "--foxglove", f"cannot serve on {FOXGLOVE_HOST}:{args.foxglove}: {exc}") from None
    return Bridge(endpoints, foxglove=sink, plotjuggler_pub=pub, poses=poses, context=context)


def run(args) -> int:
    bridge = open_bridge(args)

    def request_stop(signum, frame):
        bridge.stop_requested = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    print(f"mms bridge: following {bridge.sources}; serving {bridge.served}", file=sys.stderr, flush=True)
    started = time.monotonic()
    bridge.run()
    if not args.quiet:
        print(f"mms bridge: {time.monotonic() - started:.1f} s, {bridge.summary()}", file=sys.stderr)
    return 0
