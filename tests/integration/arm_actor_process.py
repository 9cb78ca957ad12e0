"""An actor process driving a served fake SO-101 (a pty) through the real factory, supervisor on.

Run as ``python arm_actor_process.py PTY CALIBRATION_DIR SUPERVISOR_S [run|hang|close N [limp]]``
(``limp``: ``hardware.safety.disable_torque_on_stop``). It prints
``supervisor PID`` once connected and ``tick N`` after every step. With ``hang N``, the bus's
serial read blocks for ever after N steps, as a wedged USB adapter does: the main thread stays
inside a bus call while the heartbeat thread keeps running. With ``close N`` it closes the env
after N steps and exits, as a stopped actor does.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
from robotrl.hardware.env import LerobotRobotEnv
from robotrl.hardware.factory import make_hardware_env

from robotrl.config.schema import RobotRLConfig


def hang_serial_reads(env: object) -> None:
    """Every later read of the port never returns."""
    port = env.robot.bus.port_handler  # type: ignore[attr-defined]
    never = threading.Event()

    def read(length: int) -> bytes:
        never.wait()
        return b""

    port.ser.read = read


def connect(cfg: RobotRLConfig, tries: int = 5) -> LerobotRobotEnv:
    """The env; connecting is retried because on a loaded test machine the pty's answer to one of
    lerobot's handshake pings or configuration writes (sent without retries) can miss the SDK's
    50 ms (lerobot raises ConnectionError or, for the motor check, RuntimeError)."""
    for attempt in range(1, tries + 1):
        try:
            return make_hardware_env(cfg)
        except (ConnectionError, RuntimeError) as exc:
            print(f"connect {attempt}/{tries} failed: {exc}", file=sys.stderr, flush=True)
    raise SystemExit(f"could not connect in {tries} tries")


def main() -> None:
    port, calibration_dir, supervisor_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
    mode, after = (sys.argv[4], int(sys.argv[5])) if len(sys.argv) > 5 else ("run", -1)
    cfg = RobotRLConfig()
    cfg.hardware.robot_type = "robotrl_fake_so101"
    cfg.hardware.robot_port = port
    cfg.hardware.robot_options = {"served": True}
    cfg.hardware.calibration_dir = calibration_dir
    cfg.hardware.keys = False
    cfg.hardware.safety.supervisor_s = supervisor_s
    cfg.hardware.safety.disable_torque_on_stop = sys.argv[6:] == ["limp"]
    cfg.actor.virtual_time = False
    cfg.env.cameras = []
    cfg.env.max_episode_ticks = 1_000_000
    env = connect(cfg)
    assert env.supervisor is not None
    print(f"supervisor {env.supervisor.process.pid}", flush=True)
    env.reset()
    far = np.array([80, -80, 80, 80, 80, 90], np.float32)  # the joints keep moving toward it
    tick = 0
    while True:
        if tick == after and mode == "hang":
            hang_serial_reads(env)
        if tick == after and mode == "close":
            env.close()
            return
        env.step(far)
        tick += 1
        print(f"tick {tick}", flush=True)


if __name__ == "__main__":
    main()
