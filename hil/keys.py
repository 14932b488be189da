"""``mms keys``: create the ZeroMQ CURVE certificates that let processes bind beyond loopback (docs/security.md).

One server certificate (shared by every binding process: `mms serve`, `mms drive`, `mms record`) and one
certificate per client, written by pyzmq's ``zmq.auth.create_certificates`` as ``NAME.key`` (public) and
``NAME.key_secret`` (public and secret, mode 0600). An existing certificate is kept, never replaced. The command
prints the ``[security]`` and ``[clients.*]`` tables to paste into the network file. ZeroMQ is imported when the
keys are made, after the arguments are read (hil/cli.py).
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

SERVER_NAME = "server"
#: a client name is a TOML bare key and a file name
CLIENT_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
SECRET_FILE_MODE = 0o600
KEY_DIR_MODE = 0o700


def default_key_dir() -> Path:
    """``$XDG_CONFIG_HOME/mms-hil/keys`` (``~/.config/mms-hil/keys``): outside any repository, so that secret keys
    are never committed by accident."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "mms-hil" / "keys"


def add_arguments(parser) -> None:
    parser.add_argument("--dir", type=Path, default=None,
                        help=f"where the certificates go (default {default_key_dir()})")
    parser.add_argument("--client", action="append", metavar="NAME[=ROLE]", default=None,
                        help="a client certificate to create, with its role (operator or observer; default "
                             "operator); repeatable; default: one client 'operator'")


def parse_client(text: str) -> tuple[str, str]:
    from sim.network import ROLES

    name, _, role = text.partition("=")
    role = role or "operator"
    if not CLIENT_NAME.match(name) or name == SERVER_NAME:
        raise ValueError(f"client name {name!r}: expected letters, digits, '_' or '-' (and not {SERVER_NAME!r})")
    if role not in ROLES:
        raise ValueError(f"client {name!r}: role {role!r}, expected one of {', '.join(ROLES)}")
    return name, role


def ensure_certificate(folder: Path, name: str) -> tuple[Path, bytes, bool]:
    """(secret file, Z85 public key, created?) of ``folder/name``; an existing pair is loaded, never replaced."""
    import zmq.auth

    public_file, secret_file = folder / f"{name}.key", folder / f"{name}.key_secret"
    created = not secret_file.exists()
    if created:
        if public_file.exists():
            raise FileExistsError(f"{public_file} exists without its {secret_file.name}: move it away first")
        zmq.auth.create_certificates(folder, name)
        secret_file.chmod(SECRET_FILE_MODE)
    public, _ = zmq.auth.load_certificate(secret_file)
    return secret_file, public, created


def run(args) -> int:
    try:
        clients = [parse_client(text) for text in (args.client or ["operator"])]
    except ValueError as exc:
        print(f"mms keys: error: {exc}", file=sys.stderr)
        return 2
    folder = (args.dir or default_key_dir()).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True, mode=KEY_DIR_MODE)
    try:
        server_secret, _, created = ensure_certificate(folder, SERVER_NAME)
        made = [(SERVER_NAME, created)]
        entries = []
        for name, role in clients:
            secret, public, created = ensure_certificate(folder, name)
            made.append((name, created))
            entries.append((name, role, secret, public))
    except (OSError, ValueError) as exc:
        print(f"mms keys: error: {exc}", file=sys.stderr)
        return 2
    for name, created in made:
        print(f"mms keys: {'created' if created else 'kept existing'} {folder / name}.key[_secret]", file=sys.stderr)
    lines = ["[security]", f'server_key = "{server_secret}"', f'client_key = "{entries[0][2]}"']
    for name, role, _, public in entries:
        lines += ["", f"[clients.{name}]", f'public_key = "{public.decode("ascii")}"', f'role = "{role}"']
    print("\n".join(lines))
    return 0
