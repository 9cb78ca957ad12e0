"""Identity at the edges a user touches first: the config refuses a reachable endpoint without
CURVE (through the real console script), and `robotrl keys generate` writes one private pair
per actor, while a secret any other user could read is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from robotrl.cli import EXIT_USAGE
from robotrl.config.transport import TransportConfig, curve_on, is_local_endpoint
from robotrl.wire.auth import KeysError, client_keys, server_keys

ROBOTRL = shutil.which("robotrl") or str(Path(sys.executable).parent / "robotrl")


def robotrl(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ROBOTRL, *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


@pytest.mark.parametrize("role", ["learner", "actor"])
def test_a_reachable_endpoint_with_curve_off_is_refused_at_start_naming_the_key(role):
    out = robotrl(role, "transport.transitions_endpoint=tcp://0.0.0.0:0", "transport.curve=false")
    assert out.returncode == EXIT_USAGE, out.stderr
    assert "transport.curve" in out.stderr and "tcp://0.0.0.0:0" in out.stderr


@pytest.mark.parametrize(
    ("endpoint", "local"),
    [
        ("tcp://127.0.0.1:0", True),
        ("tcp://localhost:0", True),
        ("tcp://[::1]:0", True),
        ("ipc:///tmp/robotrl-t", True),
        ("inproc://t", True),
        ("tcp://0.0.0.0:0", False),
        ("tcp://*:0", False),
        ("tcp://192.168.1.20:0", False),
        ("tcp://no-such-host.invalid:0", False),
    ],
)
def test_only_loopback_ipc_and_inproc_count_as_local(endpoint, local):
    assert is_local_endpoint(endpoint) is local


def test_curve_null_is_on_exactly_when_an_endpoint_leaves_the_host():
    assert not curve_on(TransportConfig())  # the default: loopback, so `make demo` needs no keys
    assert curve_on(TransportConfig(weights_endpoint="tcp://0.0.0.0:0"))
    assert not curve_on(TransportConfig(transitions_endpoint="ipc:///tmp/t", weights_endpoint="ipc:///tmp/w"))
    assert curve_on(TransportConfig(curve=True))


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_keys_generate_writes_a_private_pair_per_actor_and_authorizes_each(tmp_path):
    keys = tmp_path / "keys"
    out = robotrl("keys", "generate", "--dir", str(keys), "--actors", "actor-0,actor-1")
    assert out.returncode == 0, out.stderr
    for secret in (
        keys / "server.key_secret",
        keys / "actors/actor-0.key_secret",
        keys / "actors/actor-1.key_secret",
    ):
        assert _mode(secret) == 0o600, secret
    assert _mode(keys / "actors") == 0o700
    server = server_keys(keys)
    pairs = {a: client_keys(keys, a) for a in ("actor-0", "actor-1")}
    assert pairs["actor-0"].public != pairs["actor-1"].public
    assert server.actor_of_key == {pairs["actor-0"].public: "actor-0", pairs["actor-1"].public: "actor-1"}
    # one call per actor adds to the same directory; an actor's pair is never replaced silently
    assert robotrl("keys", "generate", "--dir", str(keys), "--actors", "actor-2").returncode == 0
    assert server_keys(keys).public == server.public and len(server_keys(keys).actor_of_key) == 3
    again = robotrl("keys", "generate", "--dir", str(keys), "--actors", "actor-1")
    assert again.returncode == 1 and "actor-1" in again.stderr
    assert client_keys(keys, "actor-1") == pairs["actor-1"]


@pytest.mark.parametrize("secret", ["server.key_secret", "actors/actor-0.key_secret"])
@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
def test_a_secret_key_others_may_read_is_refused(tmp_path, secret, mode):
    keys = tmp_path / "keys"
    assert robotrl("keys", "generate", "--dir", str(keys)).returncode == 0
    os.chmod(keys / secret, mode)
    with pytest.raises(KeysError, match=f"permissions {mode:04o}.*chmod 600"):
        server_keys(keys) if secret.startswith("server") else client_keys(keys, "actor-0")


@pytest.mark.slow
def test_a_learner_whose_secret_key_others_may_read_stops_with_exit_2(tmp_path):
    keys = tmp_path / "keys"
    assert robotrl("keys", "generate", "--dir", str(keys)).returncode == 0
    os.chmod(keys / "server.key_secret", 0o644)
    out = robotrl(
        "learner",
        "transport.transitions_endpoint=tcp://0.0.0.0:0",
        "transport.weights_endpoint=tcp://*:0",  # differs from the other; neither is bound
        f"transport.keys_dir={keys}",
        f"run_dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert out.returncode == EXIT_USAGE, out.stderr[-2000:]
    assert "transport.keys_dir" in out.stderr and "permissions 0644" in out.stderr
