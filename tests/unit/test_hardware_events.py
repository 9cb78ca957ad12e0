"""Human events: terminal keys and the buttons of a lerobot teleoperator."""

from __future__ import annotations

import os
import threading

from lerobot.teleoperators.utils import TeleopEvents
from robotrl.hardware.events import HumanEvents, HumanInput, KeyEvents, TeleopButtonEvents
from waiting import wait_until


class Buttons:
    """The ``get_teleop_events`` of lerobot's gamepad: TeleopEvents keys, bool values."""

    def __init__(self) -> None:
        self.pressed: dict[TeleopEvents, bool] = {}

    def get_teleop_events(self) -> dict[TeleopEvents, bool]:
        return dict(self.pressed)


def test_teleoperator_buttons_map_to_intervention_success_failure_and_estop():
    buttons = Buttons()
    human = HumanInput([TeleopButtonEvents(buttons, estop_event=TeleopEvents.RERECORD_EPISODE.value)])
    assert human.poll() == HumanEvents()  # nothing pressed
    buttons.pressed = {TeleopEvents.IS_INTERVENTION: True}
    assert human.poll().intervention
    buttons.pressed = {TeleopEvents.TERMINATE_EPISODE: True, TeleopEvents.SUCCESS: True}
    ev = human.poll()
    assert ev.success and not ev.failure
    buttons.pressed = {TeleopEvents.TERMINATE_EPISODE: True}
    assert human.poll().failure
    buttons.pressed = {TeleopEvents.RERECORD_EPISODE: True}
    assert human.poll().estop


def test_keys_toggle_intervention_and_an_estop_key_calls_back_at_once():
    read_fd, write_fd = os.pipe()
    keys = KeyEvents(fd=read_fd)
    stopped = threading.Event()
    keys.on_estop = stopped.set
    human = HumanInput([keys])
    os.write(write_fd, b"is")
    ev = wait_until(lambda: (e := human.poll()).success and e, 5, "the keys i and s")
    assert ev.intervention and not ev.estop
    assert human.poll().intervention  # a state, not an edge: still driving
    os.write(write_fd, b"I ")
    assert stopped.wait(5)  # the callback ran from the reader thread
    ev = wait_until(lambda: (e := human.poll()).estop and e, 5, "the e-stop key")
    assert not ev.intervention
    os.close(write_fd)
