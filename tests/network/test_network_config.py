"""The network file's schema (sim/network.py NETWORK_SCHEMA): every mistake is one line naming the file and key."""
from __future__ import annotations

import pytest

from sim.config import ConfigError
from sim.network import is_loopback, load_endpoints

GOOD = '[sim]\npub = "tcp://127.0.0.1:5556"\ncontrol = "tcp://127.0.0.1:5557"\n'


@pytest.mark.parametrize("text, key, words", [
    ('[simm]\npub = "tcp://127.0.0.1:5556"\n', "simm", ['did you mean "sim"']),
    ('[sim]\npubb = "tcp://127.0.0.1:5556"\n', "sim.pubb", ['did you mean "pub"']),
    ('[sim]\npub = "tcp://127.0.0.1:99999"\n', "sim.pub", ["1..65535"]),
    ('[sim]\npub = "tcp://127.0.0.1:0"\n', "sim.pub", ["1..65535"]),
    ('[sim]\npub = 5556\n', "sim.pub", ["5556", "string"]),
    ('[sim]\npub = "127.0.0.1:5556"\n', "sim.pub", ["expected an endpoint string tcp://HOST:PORT"]),
    ('sim = 3\n', "sim", ["got 3, expected a table"]),
    ('[clients.x]\npublic_key = "0000000000000000000000000000000000000000"\nrole = "observer"\n', "clients",
     ["mms keys"]),
    ('[security]\nserver_key = "missing.key_secret"\n', "security.server_key", ["cannot read"]),
    ('[security]\nclient_key = "a"\n', "security.server_key", ["missing"]),
    ('[clients.x]\nrole = "observer"\n[security]\nserver_key = "k"\n', "clients.x.public_key", ["missing"]),
    ('[clients.x]\npublic_key = "0000000000000000000000000000000000000000"\nrole = "admin"\n', "clients.x.role",
     ['got "admin", expected one of "operator", "observer"']),
])
def test_bad_network_files_are_one_line_naming_the_key(tmp_path, text, key, words):
    path = tmp_path / "network.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_endpoints(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    assert caught.value.key == key
    for word in words:
        assert word in message


def test_binary_file_is_named_as_such(tmp_path):
    path = tmp_path / "network.toml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(ConfigError, match="not a UTF-8 text file"):
        load_endpoints(path)


def test_good_file_keeps_defaults_for_what_it_omits(tmp_path):
    path = tmp_path / "network.toml"
    path.write_text(GOOD)
    endpoints = load_endpoints(path)
    assert endpoints.sim_pub == "tcp://127.0.0.1:5556" and endpoints.driver_pub == "tcp://127.0.0.1:5558"
    assert endpoints.curve is None


@pytest.mark.parametrize("endpoint, local", [
    ("tcp://127.0.0.1:5556", True), ("tcp://127.3.4.5:1", True), ("tcp://localhost:5556", True),
    ("tcp://[::1]:5556", True), ("ipc:///tmp/x", True), ("inproc://x", True),
    ("tcp://0.0.0.0:5556", False), ("tcp://*:5556", False), ("tcp://localhost.example.com:5556", False),
    ("tcp://192.168.1.2:5556", False), ("tcp://eth0:5556", False),
])
def test_loopback_is_recognised_exactly(endpoint, local):
    assert is_loopback(endpoint) is local
