"""CURVE authentication on real sockets (docs/security.md): `mms keys` makes the certificates, a real
`mms drive --emulate` binds with them; an operator controls it, an observer may only read, a client without an
allowed key gets no reply and no data; a bind beyond loopback without keys exits 2 with the reason in one line."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import msgpack
import zmq
import zmq.auth

from hil.testing import DEADLINE_S, MmsProcess, mms, wait_for
from sim.network import Endpoints, load_endpoints, open_socket, write_loopback_network

ROOT = Path(__file__).resolve().parents[2]
FLAPPER_RIG = ROOT / "configs" / "rigs" / "flapper_rig.toml"
#: how long a client that should get nothing is given, s: the authorised client's answer comes first
SILENT_WINDOW_S = 2.0


def make_keys(tmp_path: Path) -> str:
    """Run `mms keys` for an operator and an observer; the printed TOML (client_key = the operator)."""
    result = subprocess.run(mms("keys", "--dir", str(tmp_path / "keys"), "--client", "op=operator",
                                "--client", "viewer=observer"), capture_output=True, text=True, timeout=60,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "keys" / "server.key_secret").stat().st_mode & 0o077 == 0
    return result.stdout


def client_network(tmp_path: Path, server: Path, text: str, client: str, name: str) -> Endpoints:
    """The same endpoints as ``server``'s network file, as seen from a host using ``client``'s key."""
    path = tmp_path / name
    body = server.read_text().replace(f'client_key = "{tmp_path}/keys/op.key_secret"',
                                      f'client_key = "{tmp_path}/keys/{client}.key_secret"')
    assert body != server.read_text() or client == "op"
    path.write_text(body)
    return load_endpoints(path)


def ask(sock: zmq.Socket, cmd: str, timeout_s: float = DEADLINE_S) -> dict | None:
    sock.send(msgpack.packb({"cmd": cmd}))
    if not sock.poll(int(timeout_s * 1000)):
        return None
    return msgpack.unpackb(sock.recv(), raw=False)


def test_curve_operator_controls_observer_reads_stranger_gets_nothing(tmp_path):
    keys = make_keys(tmp_path)
    network = tmp_path / "network.toml"
    write_loopback_network(network, "\n" + keys)
    operator = load_endpoints(network)
    observer = client_network(tmp_path, network, keys, "viewer", "observer.toml")
    assert operator.curve.client_public != observer.curve.client_public
    zmq.auth.create_certificates(tmp_path, "stranger")            # a valid key that is not in the allow-list
    stranger_public, stranger_secret = zmq.auth.load_certificate(tmp_path / "stranger.key_secret")
    driver = MmsProcess(tmp_path, ["drive", "--rig", str(FLAPPER_RIG), "--network", str(network), "--emulate"],
                        ROOT, operator.driver_control)
    context = zmq.Context()
    try:
        def client(kind, endpoints, endpoint):
            return open_socket(context, kind, endpoint, bind=False, curve=endpoints.curve, what="test",
                               options={zmq.LINGER: 0})

        op_req = client(zmq.REQ, operator, operator.driver_control)
        op_sub = client(zmq.SUB, operator, operator.driver_pub)
        op_sub.setsockopt(zmq.SUBSCRIBE, b"hw/status")
        plain_req = context.socket(zmq.REQ)                       # no CURVE at all
        plain_sub = context.socket(zmq.SUB)
        wrong_req = context.socket(zmq.REQ)                       # CURVE with a key nobody allowed
        for sock in (wrong_req,):
            sock.curve_serverkey = operator.curve.server_public
            sock.curve_publickey, sock.curve_secretkey = stranger_public, stranger_secret
        for sock in (plain_req, plain_sub, wrong_req):
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(operator.driver_pub if sock is plain_sub else operator.driver_control)
        plain_sub.setsockopt(zmq.SUBSCRIBE, b"")

        # the operator is served as soon as the driver is up; the strangers' requests, sent at once, stay unanswered
        plain_req.send(msgpack.packb({"cmd": "status"}))
        wrong_req.send(msgpack.packb({"cmd": "status"}))
        status = ask(op_req, "status")
        assert status is not None and status["ok"] is True, driver.log_text()
        wait_for(lambda: ask(op_req, "status")["link"]["state"] == "up", what="the emulated link up",
                 logs=(driver.log_path,))
        received = 0
        deadline = time.monotonic() + DEADLINE_S
        while received < 20 and time.monotonic() < deadline:
            if op_sub.poll(100):
                op_sub.recv_multipart()
                received += 1
        assert received == 20
        assert plain_sub.poll(0) == 0, "an unauthenticated subscriber received data"
        assert plain_req.poll(int(SILENT_WINDOW_S * 1000)) == 0, "an unauthenticated client got a reply"
        assert wrong_req.poll(0) == 0, "a client with a key outside the allow-list got a reply"

        # an observer reads but may not command
        obs_req = client(zmq.REQ, observer, observer.driver_control)
        assert ask(obs_req, "status")["ok"] is True
        for cmd in ("activate", "reset_estop", "estop", "shutdown"):
            refused = ask(obs_req, cmd)
            assert refused["ok"] is False and "observer" in refused["error"] and cmd in refused["error"]
        obs_req.send_multipart([msgpack.packb({"cmd": "activate"}), msgpack.packb({"cmd": "status"})])
        assert obs_req.poll(int(DEADLINE_S * 1000))
        refused = msgpack.unpackb(obs_req.recv(), raw=False)
        assert refused["ok"] is False and "observer" in refused["error"]
        assert ask(obs_req, "status")["ok"] is True
        assert ask(op_req, "status")["lifecycle"] == "inactive"
        activated = ask(op_req, "activate")
        assert activated["ok"] is True and activated["lifecycle"] == "active"
        assert ask(op_req, "shutdown")["ok"] is True
        assert driver.proc.wait(DEADLINE_S) == 0
        assert plain_sub.poll(0) == 0
    finally:
        driver.stop()
        context.destroy(0)


def test_bind_beyond_loopback_without_keys_exits_2_with_the_reason(tmp_path):
    network = tmp_path / "network.toml"
    write_loopback_network(network)
    network.write_text(network.read_text().replace('[recorder]\ncontrol = "tcp://127.0.0.1:',
                                                   '[recorder]\ncontrol = "tcp://0.0.0.0:'))
    record = subprocess.run(mms("record", "--network", str(network), "--idle", "--quiet"), capture_output=True,
                            text=True, timeout=60, cwd=ROOT)
    assert record.returncode == 2
    assert len(record.stderr.strip().splitlines()) == 1
    assert "refusing to bind tcp://0.0.0.0:" in record.stderr and "mms keys" in record.stderr
    network.write_text(network.read_text().replace('[driver]\npub = "tcp://127.0.0.1:',
                                                   '[driver]\npub = "tcp://*:'))
    drive = subprocess.run(mms("drive", "--rig", str(FLAPPER_RIG), "--network", str(network), "--emulate"),
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert drive.returncode == 2
    assert "refusing to bind tcp://*:" in drive.stderr and len(drive.stderr.strip().splitlines()) == 1
