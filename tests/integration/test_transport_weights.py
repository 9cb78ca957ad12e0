"""The weight channel between real processes: latest wins, pieces, verification, restarts."""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from robotrl.actor.slots import PolicySlots
from robotrl.transport import weight_segments
from robotrl.transport.hotswap import expected_layout, install, module_tensors
from robotrl.transport.weight_segments import SEGMENT_DIR
from robotrl.transport.weight_subscriber import WeightSubscriber
from robotrl.transport.weights import WeightPublisher

sys.path.insert(0, str(Path(__file__).parent))
from doubles import LinearChunkPolicy
from transport_peers import HEARTBEAT_S, TIMEOUT_S
from waiting import wait_until as wait_for

PEERS = str(Path(__file__).with_name("transport_peers.py"))
LAYOUT = {"w": ((64, 64), np.dtype(np.float32)), "b": ((64,), np.dtype(np.float32))}


def start_publisher(out: Path, endpoint: str, versions: int) -> tuple[subprocess.Popen[bytes], str]:
    out.with_suffix(".endpoint").unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, PEERS, "publisher", endpoint, str(out), str(versions)])
    wait_for(lambda: out.with_suffix(".endpoint").exists(), 30, "the publisher to bind")
    return proc, out.with_suffix(".endpoint").read_text()


def subscriber(endpoint: str, **kwargs: object) -> WeightSubscriber:
    return WeightSubscriber(endpoint, heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S, **kwargs)


def test_a_late_subscriber_gets_only_the_newest_version(tmp_path):
    pub, endpoint = start_publisher(tmp_path / "pub", "tcp://127.0.0.1:0", versions=5)
    sub = subscriber(endpoint, expected=LAYOUT, shared_memory=False)
    try:
        update = sub.recv(20.0)
        assert update is not None and update.policy_version == 104
        assert float(update.tensors["w"][0, 0]) == 4.0
        assert sub.recv(0.5) is None  # no backlog follows
        assert sub.stats()["pieces"] == 1
    finally:
        sub.close()
        pub.kill()


def test_a_restarted_publisher_is_noticed_and_picked_up_again(tmp_path):
    pub, endpoint = start_publisher(tmp_path / "pub", "tcp://127.0.0.1:0", versions=1)
    sub = subscriber(endpoint, expected=LAYOUT)
    try:
        assert sub.recv(20.0) is not None
        pub.send_signal(signal.SIGKILL)
        pub.wait(10)
        wait_for(
            lambda: not sub.stats()["publisher_alive"], 5 * TIMEOUT_S, "the dead publisher to be noticed"
        )
        pub, _ = start_publisher(tmp_path / "pub", endpoint, versions=3)
        update = sub.recv(20.0)
        # its newest, though its versions restarted
        assert update is not None and update.policy_version == 102
    finally:
        sub.close()
        pub.kill()


def test_a_large_update_arrives_in_pieces_and_is_reassembled_exactly():
    rng = np.random.default_rng(0)
    tensors = {f"layer{i}.w": rng.standard_normal((256, 256), dtype=np.float32) for i in range(10)}
    layout = {k: (v.shape, v.dtype) for k, v in tensors.items()}
    pub = WeightPublisher(
        "tcp://127.0.0.1:0", piece_bytes=600_000, heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S
    )
    sub = subscriber(pub.endpoint, expected=layout, shared_memory=False)
    try:
        pub.publish(tensors)
        update = sub.recv(20.0)
    finally:
        sub.close()
        pub.close()
    assert update is not None and sub.stats()["pieces"] == 5
    for name, arr in tensors.items():
        np.testing.assert_array_equal(update.tensors[name], arr)


def test_a_trainable_subset_installs_only_those_tensors():
    torch.manual_seed(0)
    learner = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 4))
    learner[0].requires_grad_(False)  # a frozen backbone
    actor = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 4))
    pub = WeightPublisher("tcp://127.0.0.1:0", heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S)
    sub = subscriber(pub.endpoint, expected=expected_layout(actor))
    try:
        pub.publish(module_tensors(learner, trainable_only=True), subset="trainable")
        update = sub.recv(20.0)
    finally:
        sub.close()
        pub.close()
    assert update is not None and sorted(update.tensors) == ["1.bias", "1.weight"]
    frozen_before = actor[0].weight.clone()
    install(actor, update)
    assert torch.equal(actor[1].weight, learner[1].weight) and torch.equal(actor[0].weight, frozen_before)


@pytest.mark.parametrize("shared_memory", [True, False], ids=["segment", "pieces"])
def test_nan_or_wrong_shape_updates_are_refused_the_old_weights_stay_and_inference_goes_on(shared_memory):
    torch.manual_seed(0)
    learner = torch.nn.Linear(16, 4)
    slots = PolicySlots(LinearChunkPolicy(16, 4), LinearChunkPolicy(16, 4))
    pub = WeightPublisher("tcp://127.0.0.1:0", heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S)
    sub = subscriber(pub.endpoint, expected=expected_layout(learner), shared_memory=shared_memory)

    def installed() -> int | None:  # what the inference worker does between two inferences
        update = sub.latest()
        if update is not None:
            slots.stage(update)
        return slots.policy_version if slots.swap_if_staged() else None

    x = torch.ones(1, 16)
    try:
        good = pub.publish(module_tensors(learner))
        assert wait_for(installed, 20, "the first update") == good
        before = slots.active.net(x).detach().clone()
        nan = {k: v.copy() for k, v in module_tensors(learner).items()}
        nan["weight"][0, 0] = np.nan
        pub.publish(nan)
        wait_for(lambda: sub.stats()["refused_non_finite"] == 1, 20, "the NaN update to be refused")
        pub.publish({"weight": np.zeros((4, 15), np.float32), "bias": np.zeros(4, np.float32)})
        wait_for(lambda: sub.stats()["refused_shape"] == 1, 20, "the wrong shape to be refused")
        pub.publish({"weight": np.zeros((4, 16), np.float64), "bias": np.zeros(4, np.float32)})
        wait_for(lambda: sub.stats()["refused_dtype"] == 1, 20, "the wrong dtype to be refused")
        for _ in range(10):  # the control side keeps inferring with the old weights
            assert installed() is None
            assert torch.equal(slots.active.net(x), before)
        with torch.no_grad():
            learner.weight.add_(1.0)
        newer = pub.publish(module_tensors(learner))
        assert wait_for(installed, 20, "a good update after the bad ones") == newer
        assert torch.equal(slots.active.net.weight, learner.weight) and slots.policy_version == newer
    finally:
        sub.close()
        pub.close()


def local_subscriber(pub: WeightPublisher, layout) -> WeightSubscriber:
    """A subscriber the publisher knows to be on its host: its versions go by shared memory."""
    sub = subscriber(pub.endpoint, expected=layout)
    wait_for(lambda: pub.stats()["local_subscribers"] == 1, 20, "the subscriber to offer shared memory")
    return sub


def test_on_one_host_an_update_arrives_as_one_segment_and_segments_are_reused_once_let_go():
    tensors = {f"layer{i}.w": np.full((256, 256), float(i), np.float32) for i in range(4)}
    layout = {k: (v.shape, v.dtype) for k, v in tensors.items()}
    pub = WeightPublisher("tcp://127.0.0.1:0", heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S)
    sub = local_subscriber(pub, layout)
    ours = f"robotrl-weights-{os.getpid()}-*"
    before = set(SEGMENT_DIR.glob(ours))  # other tests' publishers' files, if any
    files = set()
    try:
        kept = None
        for version in range(1, 21):
            tensors["layer0.w"][0, 0] = version  # training changed the weights
            assert pub.publish(tensors) == version
            update = sub.recv(20.0)  # the one before is dropped here: its segment may be written again
            assert update is not None and update.policy_version == version
            assert float(update.tensors["layer0.w"][0, 0]) == version
            kept = kept or update  # version 1, still in use: never written again
            files |= set(SEGMENT_DIR.glob(ours)) - before
        assert float(kept.tensors["layer0.w"][0, 0]) == 1.0
        linked = len(list(SEGMENT_DIR.glob(ours)))
    finally:
        sub.close()
        pub.close()
    assert sub.stats()["segments"] == 20 and sub.stats()["pieces"] == 0
    assert pub.stats()["segments_sent"] == 20 and pub.stats()["pieces_sent"] == 0
    for name, arr in tensors.items():
        np.testing.assert_array_equal(update.tensors[name], arr)
    # reused: the one kept, the newest, the one dropped last (its release on its way), two spares,
    # spares not yet trimmed
    assert linked <= 8 and len(files) <= 10
    assert set(SEGMENT_DIR.glob(ours)) <= before  # close removes every file it made


def test_refused_segments_are_written_again_not_piled_up():
    pub = WeightPublisher("tcp://127.0.0.1:0", heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S)
    sub = local_subscriber(pub, LAYOUT)
    ours = f"robotrl-weights-{os.getpid()}-*"
    before = set(SEGMENT_DIR.glob(ours))  # other tests' publishers' files, if any
    nan = {"w": np.full((64, 64), np.nan, np.float32), "b": np.zeros(64, np.float32)}
    files = set()
    try:
        for refused in range(1, 21):
            pub.publish(nan)
            wait_for(
                lambda n=refused: sub.stats()["refused_non_finite"] == n, 20, "the NaN version to be refused"
            )
            files |= set(SEGMENT_DIR.glob(ours)) - before
        good = pub.publish({"w": np.ones((64, 64), np.float32), "b": np.zeros(64, np.float32)})
        update = sub.recv(20.0)
    finally:
        sub.close()
        pub.close()
    assert update is not None and update.policy_version == good
    assert len(files) <= 8  # for 20 refused versions (each in a file of its own before)


def test_a_late_joiner_after_a_forgotten_subscriber_still_maps_the_newest_version():
    pub = WeightPublisher("tcp://127.0.0.1:0", heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S)
    first = local_subscriber(pub, LAYOUT)
    try:
        version = pub.publish({"w": np.full((64, 64), 2.0, np.float32), "b": np.zeros(64, np.float32)})
        assert first.recv(20.0) is not None
        first.close()  # silent from now on: forgotten after the peer timeout, its segment retired
        wait_for(lambda: pub.stats()["subscribers"] == 0, 20, "the silent subscriber to be forgotten")
        late = subscriber(pub.endpoint, expected=LAYOUT)
        update = late.recv(20.0)
        late.close()
    finally:
        pub.close()
    assert update is not None and update.policy_version == version and float(update.tensors["w"][0, 0]) == 2.0
    assert late.stats()["segments"] == 1 and late.stats()["pieces"] == 0


def test_with_no_room_in_dev_shm_versions_go_over_the_socket(monkeypatch):
    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    pub = WeightPublisher("tcp://127.0.0.1:0", heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S)
    sub = local_subscriber(pub, LAYOUT)
    try:
        version = pub.publish({"w": np.full((64, 64), 5.0, np.float32), "b": np.zeros(64, np.float32)})
        update = sub.recv(20.0)
    finally:
        sub.close()
        pub.close()
    assert update is not None and update.policy_version == version and update.digest
    assert sub.stats()["segments"] == 0 and sub.stats()["pieces"] == 1


def test_a_segment_that_cannot_be_mapped_is_asked_for_again_then_given_up(monkeypatch, caplog):
    def unreadable(*_: object) -> None:  # as where the two sides see different /dev/shm (containers)
        raise FileNotFoundError("no such segment here")

    monkeypatch.setattr(weight_segments, "open_segment", unreadable)
    tensors = {"w": np.full((64, 64), 3.0, np.float32), "b": np.zeros(64, np.float32)}
    pub = WeightPublisher("tcp://127.0.0.1:0", heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S)
    sub = subscriber(pub.endpoint, expected=LAYOUT)
    try:
        with caplog.at_level(logging.WARNING):
            for version in (1, 2, 3, 4):
                expected_local = 1 if version <= 3 else 0  # three failures in a row: pieces for good
                wait_for(lambda n=expected_local: pub.stats()["local_subscribers"] == n, 20, "the want")
                assert pub.publish(tensors) == version
                update = sub.recv(20.0)
                assert update is not None and update.policy_version == version
                assert update.digest and float(update.tensors["w"][0, 0]) == 3.0  # pieces, checked
    finally:
        sub.close()
        pub.close()
    assert sub.stats()["segments"] == 3 and sub.stats()["pieces"] == 4
    assert "this version over the socket" in caplog.text and "over the socket from now on" in caplog.text
