"""The soak bench's learner: `robotrl learner` with two test-only fault hooks, driven by signals.

``python -m robotrl.bench.soak_learner KEY=VALUE ...`` runs exactly the `robotrl learner`
role (same config, same code) after installing two signal handlers that only this
launcher has; `robotrl learner` itself has no such hook, so no user can trip them by
accident:

- ``SIGUSR1``: the next update group leaves the policy's trainable parameters NaN, as a
  diverged step would (one non-finite update; what the learner does next is what the
  soak audits);
- ``SIGUSR2``: toggles a full disk for the learner's journal folder: while on, every
  write of a spool file under ``<run_dir>/journal`` fails with ``ENOSPC`` as a full
  disk fails it (checkpoints, metrics and logs are untouched).

Each hook says in the log when it fires, so a run's log shows what was injected.
"""

from __future__ import annotations

import errno
import functools
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from robotrl.core import run_folder

log = logging.getLogger("robotrl.bench.soak_learner")
HOOKS_READY = "soak: fault hooks installed"


class FaultHooks:
    """The flags the signal handlers set; read by the patched update and spool write."""

    def __init__(self, journal_dir: Path) -> None:
        self.journal_dir = journal_dir.resolve()
        self.poison_next_update = False
        self.journal_disk_full = False
        self.journal_writes_refused = 0

    def on_nan_signal(self, *_: Any) -> None:
        self.poison_next_update = True

    def on_disk_full_signal(self, *_: Any) -> None:
        self.journal_disk_full = not self.journal_disk_full
        log.warning(
            "soak fault: journal disk full %s (%d writes refused so far)",
            "on" if self.journal_disk_full else "off",
            self.journal_writes_refused,
        )

    def wrap_update(self, learner: Any) -> None:
        """After the update group following SIGUSR1, set the policy's trainable parameters to NaN."""
        algorithm = learner.algorithm
        update = algorithm.update_group

        @functools.wraps(update)
        def update_group(*args: Any, **kwargs: Any) -> Any:
            result = update(*args, **kwargs)
            if self.poison_next_update:
                import torch

                self.poison_next_update = False
                with torch.no_grad():
                    for param in algorithm.policy.parameters():
                        if param.requires_grad:
                            param.fill_(float("nan"))
                log.warning(
                    "soak fault: this update group left the policy's parameters NaN (policy version %d "
                    "published last)",
                    learner.counters.policy_version,
                )
            return result

        algorithm.update_group = update_group

    def wrap_spool_write(self) -> None:
        """While the journal's disk is 'full', a spool write under the journal folder raises ENOSPC."""
        from robotrl.transport.spool import Spool

        write = Spool.write

        @functools.wraps(write)
        def refusing_write(spool: Spool, *args: Any, **kwargs: Any) -> Any:
            if self.journal_disk_full and Path(spool.directory).resolve() == self.journal_dir:
                self.journal_writes_refused += 1
                raise OSError(errno.ENOSPC, "No space left on device (soak fault)", str(spool.directory))
            return write(spool, *args, **kwargs)

        Spool.write = refusing_write  # type: ignore[method-assign,assignment]


def main(argv: list[str]) -> int:
    from robotrl.cli import main as cli_main
    from robotrl.learner import main as learner_main

    run_dir = next((a.split("=", 1)[1] for a in argv if a.startswith("run_dir=")), "runs")
    hooks = FaultHooks(Path(run_dir) / run_folder.JOURNAL)
    build = learner_main.build_learner

    @functools.wraps(build)
    def build_with_hooks(*args: Any, **kwargs: Any) -> Any:
        learner = build(*args, **kwargs)
        hooks.wrap_update(learner)
        return learner

    learner_main.build_learner = build_with_hooks
    hooks.wrap_spool_write()
    signal.signal(signal.SIGUSR1, hooks.on_nan_signal)
    signal.signal(signal.SIGUSR2, hooks.on_disk_full_signal)
    print(HOOKS_READY, flush=True)  # before this line the signals would kill the process
    return cli_main(["learner", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
