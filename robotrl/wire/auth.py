"""CURVE key pairs for links that cross hosts: `robotrl keys generate`.

Layout of a keys directory (ZeroMQ certificate files, text, no pickle):

- ``server.key`` / ``server.key_secret``: the learner's pair (it binds both links);
- ``actors/<actor_id>.key`` / ``actors/<actor_id>.key_secret``: one pair per actor;
- ``authorized/<actor_id>.key``: public keys of the actors the learner accepts. The file's
  name is the actor id that key may speak for: the learner's ZAP handler gives it to every
  message of that connection as its User-Id, and a batch or ping claiming another id is refused.

Copy the whole directory to the learner host without ``actors/`` secrets; an actor host needs
``server.key`` and its own ``actors/<actor_id>.key*``. Secrets are written under umask 077
and a secret file any other user may read is refused: whoever reads it can speak as that actor.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

SERVER = "server"
ACTORS = "actors"
AUTHORIZED = "authorized"
_KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class KeysError(ValueError):
    """A keys directory that is missing a file, holds a malformed certificate or a loose secret."""


@dataclass(frozen=True)
class ServerKeys:
    """What a binding (server) socket needs: its pair and the clients it accepts."""

    public: bytes
    secret: bytes
    authorized_dir: Path
    actor_of_key: dict[bytes, str] = field(default_factory=dict)
    """Authorized public key (z85) -> the actor id it speaks for (its file's name)."""


@dataclass(frozen=True)
class ClientKeys:
    """What a connecting (client) socket needs: its pair and the server's public key."""

    public: bytes
    secret: bytes
    server_public: bytes


def check_secret_permissions(path: Path) -> None:
    """Refuse a secret key file that its group or other users may read or write."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise KeysError(
            f"CURVE secret key file {path} has permissions {mode:04o}: anyone who reads it can "
            f"authenticate as its owner; run `chmod 600 {path}`"
        )


def _load_pair(path: Path, need_secret: bool) -> tuple[bytes, bytes | None]:
    import zmq.auth

    if not path.is_file():
        raise KeysError(f"CURVE key file {path} does not exist (run `robotrl keys generate`)")
    if need_secret:
        check_secret_permissions(path)
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (ValueError, OSError) as exc:
        raise KeysError(f"CURVE key file {path} is malformed: {exc}") from exc
    if need_secret and secret is None:
        raise KeysError(f"CURVE key file {path} holds no secret key")
    return public, secret


def key_name(actor_id: str) -> str:
    """``actor_id`` as a key file's name; KeysError for an id that cannot name a file."""
    if not _KEY_NAME.fullmatch(actor_id):
        raise KeysError(f"actor id {actor_id!r} cannot name a key file (letters, digits, '_', '.', '-')")
    return actor_id


def server_keys(keys_dir: str | Path) -> ServerKeys:
    d = Path(keys_dir)
    public, secret = _load_pair(d / f"{SERVER}.key_secret", need_secret=True)
    assert secret is not None
    authorized = d / AUTHORIZED
    files = sorted(authorized.glob("*.key")) if authorized.is_dir() else []
    if not files:
        raise KeysError(f"{authorized} holds no authorized actor keys; the learner would refuse every actor")
    actor_of_key = {_load_pair(f, need_secret=False)[0]: f.stem for f in files}
    return ServerKeys(public, secret, authorized, actor_of_key)


def client_keys(keys_dir: str | Path, actor_id: str) -> ClientKeys:
    """The pair of ``actor_id`` and the learner's public key."""
    d = Path(keys_dir)
    public, secret = _load_pair(d / ACTORS / f"{key_name(actor_id)}.key_secret", need_secret=True)
    server_public, _ = _load_pair(d / f"{SERVER}.key", need_secret=False)
    assert secret is not None
    return ClientKeys(public, secret, server_public)


def generate(
    keys_dir: str | Path, actors: Sequence[str] = ("actor-0",), overwrite: bool = False
) -> list[Path]:
    """Write the server pair (unless there is one), a pair per actor in ``actors`` and its
    authorized copy, all under umask 077; returns the files written. An actor that already
    has a pair keeps it unless ``overwrite``."""
    import zmq.auth

    d = Path(keys_dir)
    names = [key_name(a) for a in actors]
    taken = [a for a in names if (d / ACTORS / f"{a}.key_secret").exists()]
    if taken and not overwrite:
        raise KeysError(f"{d} already holds keys of {', '.join(taken)}; pass --force to replace them")
    old_umask = os.umask(0o077)
    try:
        written: list[Path] = []
        for sub in (d, d / ACTORS, d / AUTHORIZED):
            sub.mkdir(mode=0o700, parents=True, exist_ok=True)
        if overwrite or not (d / f"{SERVER}.key_secret").exists():
            server_public, server_secret = zmq.auth.create_certificates(d, SERVER)
            os.chmod(server_secret, 0o600)
            written += [Path(server_public), Path(server_secret)]
        for name in names:
            public, secret = zmq.auth.create_certificates(d / ACTORS, name)
            os.chmod(secret, 0o600)  # a replaced file keeps its old mode otherwise
            authorized = d / AUTHORIZED / f"{name}.key"
            shutil.copyfile(public, authorized)
            written += [Path(public), Path(secret), authorized]
    finally:
        os.umask(old_umask)
    return written


def main(argv: Sequence[str]) -> int:
    """`robotrl keys generate [--dir DIR] [--actors ID,ID] [--force]`."""
    parser = argparse.ArgumentParser(prog="robotrl keys", description="CURVE key pairs for robotrl links")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="write the server pair and one pair per actor")
    gen.add_argument("--dir", default="keys", help="keys directory (transport.keys_dir)")
    gen.add_argument("--actors", default="actor-0", help="comma-separated actor ids (actor.actor_id)")
    gen.add_argument("--force", action="store_true", help="replace existing keys")
    args = parser.parse_args(list(argv))
    actors = [a.strip() for a in args.actors.split(",") if a.strip()]
    try:
        written = generate(args.dir, actors, overwrite=args.force)
    except KeysError as exc:
        print(f"robotrl keys: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    print(
        f"the learner host needs {args.dir}/server.key* and {args.dir}/{AUTHORIZED}/; "
        f"each actor host needs {args.dir}/server.key and its own {args.dir}/{ACTORS}/<actor_id>.key*"
    )
    return 0
