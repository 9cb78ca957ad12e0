"""A :class:`~robotrl.hardware.fake_serial.FakeServoChain` served on a pseudo-terminal.

Any process opens :attr:`ServoPty.path` as its serial port with lerobot's real port handler
(pyserial), so an actor and the arm supervisor in separate processes share one chain of fake
servos, as they would share a real USB serial adapter: every packet written by any process
reaches the servos in arrival order, and every reply lands in the one input queue that
whichever process reads first takes (two processes on one bus at once corrupt each other's
transactions, as on the real one).
"""

from __future__ import annotations

import os
import pty
import select
import threading
import tty
from collections.abc import Iterator

from robotrl.hardware.fake_serial import FakeServoChain

HEADER = b"\xff\xff"
MAX_PARAMS = 250


def take_packets(buffer: bytearray) -> Iterator[bytes]:
    """Whole instruction packets from the front of ``buffer`` (consumed); noise is skipped."""
    while True:
        start = buffer.find(HEADER)
        if start < 0:
            del buffer[: max(len(buffer) - 1, 0)]  # keep a trailing 0xFF: half a header
            return
        del buffer[:start]
        if len(buffer) < 4:
            return
        length = buffer[3]
        if length < 2 or length > MAX_PARAMS:
            del buffer[:1]  # not a packet: resynchronise on the next header
            continue
        if len(buffer) < 4 + length:
            return
        packet = bytes(buffer[: 4 + length])
        del buffer[: 4 + length]
        yield packet


class ServoPty:
    """Serves ``chain`` on a pty from a thread until :meth:`close`."""

    def __init__(self, chain: FakeServoChain) -> None:
        self.chain = chain
        self._master, self._slave = pty.openpty()
        tty.setraw(self._slave)  # no echo, no line editing, before any client configures it
        self.path = os.ttyname(self._slave)
        """Open this as the serial port (``hardware.robot_port``)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="fake-servo-pty", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        buffer = bytearray()
        while not self._stop.is_set():
            ready, _, _ = select.select([self._master], [], [], 0.05)
            if not ready:
                continue
            buffer += os.read(self._master, 4096)
            for packet in take_packets(buffer):
                reply = self.chain.handle(packet)
                if reply:
                    os.write(self._master, reply)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        os.close(self._master)
        os.close(self._slave)  # the server kept it open so a client's close is no hang-up
