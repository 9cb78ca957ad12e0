"""Hostile and measured peers for the bounded-peers tests: `python hostile_peers.py ROLE ...`.

- ``pings ENDPOINT N``: send N pings, each from a different made-up actor id, then
  count the pongs (every ping answered means every ping was handled) and print
  ``{"pongs": k}``.
- ``receiver``: a transition receiver built from the default transport config (on a
  free port), its endpoint printed on the first line; on a line read from stdin it
  prints how much its peak resident memory (``VmHWM``, kB) grew since it started
  serving and its counters, then exits.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import zmq

from robotrl.config.transport import TransportConfig
from robotrl.transport import protocol as p
from robotrl.transport.transition_receiver import TransitionReceiver
from robotrl.wire.codec import decode, encode


def peak_rss_kb(pid: int | str = "self") -> int:
    """The process's peak resident memory (``VmHWM``), in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc status")


def reset_peak_rss(pid: int | str = "self") -> int:
    """Make the process's peak resident memory its current one (Linux's clear_refs 5); returns it, kB."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return peak_rss_kb(pid)


def pings(endpoint: str, n: str) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.connect(endpoint)
    for i in range(int(n)):
        sock.send_multipart(encode(p.control(p.PING, f"fake-{i}", stream=f"s{i}", next=i, dropped=0)))
    pongs, deadline = 0, time.monotonic() + 120.0
    while pongs < int(n) and time.monotonic() < deadline:
        if sock.poll(1000):
            pongs += decode(sock.recv_multipart()).kind == p.PONG
    print(json.dumps({"pongs": pongs}), flush=True)
    sock.close()
    ctx.term()


def receiver() -> None:
    rx = TransitionReceiver.from_config(TransportConfig(transitions_endpoint="tcp://127.0.0.1:0"))
    before = reset_peak_rss()
    print(rx.endpoint, flush=True)
    sys.stdin.readline()
    print(json.dumps({"peak_growth_kb": peak_rss_kb() - before, "stats": rx.stats()}), flush=True)
    rx.close()


if __name__ == "__main__":
    roles = {"pings": pings, "receiver": receiver}
    roles[sys.argv[1]](*sys.argv[2:])
