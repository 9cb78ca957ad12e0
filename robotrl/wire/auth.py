"""CURVE key pairs for links that cross hosts: `robotrl keys generate`.

Layout of a keys directory (ZeroMQ certificate files, text, no pickle):

- ``server.key`` / ``server.key_secret``: the learner's pair (it binds both links);
- ``client.key`` / ``client.key_secret``: the pair actors present;
- ``authorized/``: public keys of clients the learner accepts (``client.key`` by default).

Copy the whole directory to the learner host; the actor host needs only
``server.key``, ``client.key`` and ``client.key_secret``. A client whose public key
is not in ``authorized/`` is refused by the learner's ZAP handler.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SERVER = "server"
CLIENT = "client"
AUTHORIZED = "authorized"


class KeysError(ValueError):
    """A keys directory that is missing a file or holds a malformed certificate."""


@dataclass(frozen=True)
class ServerKeys:
    """What a binding (server) socket needs: its pair and the clients it accepts."""

    public: bytes
    secret: bytes
    authorized_dir: Path


@dataclass(frozen=True)
class ClientKeys:
    """What a connecting (client) socket needs: its pair and the server's public key."""

    public: bytes
    secret: bytes
    server_public: bytes


def _load_pair(path: Path, need_secret: bool) -> tuple[bytes, bytes | None]:
    import zmq.auth

    if not path.is_file():
        raise KeysError(f"CURVE key file {path} does not exist (run `robotrl keys generate`)")
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (ValueError, OSError) as exc:
        raise KeysError(f"CURVE key file {path} is malformed: {exc}") from exc
    if need_secret and secret is None:
        raise KeysError(f"CURVE key file {path} holds no secret key")
    return public, secret


def server_keys(keys_dir: str | Path) -> ServerKeys:
    d = Path(keys_dir)
    public, secret = _load_pair(d / f"{SERVER}.key_secret", need_secret=True)
    assert secret is not None
    authorized = d / AUTHORIZED
    if not authorized.is_dir() or not any(authorized.glob("*.key")):
        raise KeysError(f"{authorized} holds no authorized client keys; the learner would refuse every actor")
    return ServerKeys(public, secret, authorized)


def client_keys(keys_dir: str | Path) -> ClientKeys:
    d = Path(keys_dir)
    public, secret = _load_pair(d / f"{CLIENT}.key_secret", need_secret=True)
    server_public, _ = _load_pair(d / f"{SERVER}.key", need_secret=False)
    assert secret is not None
    return ClientKeys(public, secret, server_public)


def generate(keys_dir: str | Path, overwrite: bool = False) -> list[Path]:
    """Write a server pair, a client pair and the authorized copy; returns the files written."""
    import zmq.auth

    d = Path(keys_dir)
    if (d / f"{SERVER}.key_secret").exists() and not overwrite:
        raise KeysError(f"{d} already holds keys; pass --force to replace them")
    d.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in (SERVER, CLIENT):
        public, secret = zmq.auth.create_certificates(d, name)
        os.chmod(secret, 0o600)
        written += [Path(public), Path(secret)]
    (d / AUTHORIZED).mkdir(exist_ok=True)
    authorized = d / AUTHORIZED / f"{CLIENT}.key"
    shutil.copyfile(d / f"{CLIENT}.key", authorized)
    written.append(authorized)
    return written


def main(argv: Sequence[str]) -> int:
    """`robotrl keys generate [--dir DIR] [--force]`."""
    parser = argparse.ArgumentParser(prog="robotrl keys", description="CURVE key pairs for robotrl links")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="write server and client key pairs")
    gen.add_argument("--dir", default="keys", help="keys directory (transport.keys_dir)")
    gen.add_argument("--force", action="store_true", help="replace existing keys")
    args = parser.parse_args(list(argv))
    try:
        written = generate(args.dir, overwrite=args.force)
    except KeysError as exc:
        print(f"robotrl keys: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    print(f"copy {args.dir}/ to the learner host; the actor host needs server.key and client.key*")
    return 0
