"""`python -m robotrl.learner.torchrun [torchrun arguments]`: torchrun as `robotrl launch`
starts a learner's ranks.

torchrun answers SIGINT or SIGTERM by sending the signal on to every rank and waiting for them
(rank 0 checkpoints and tells the others to stop), then raises the signal as a traceback. Here
that ends quietly with the shell's code for the signal, so a stopped learner's log ends with
its own last line.
"""

from __future__ import annotations

import sys

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.run import main as torchrun


def main(argv: list[str] | None = None) -> int:
    try:
        torchrun(argv)
    except SignalException as stop:
        print(f"torchrun: {stop.sigval.name}: every rank was asked to stop", file=sys.stderr)
        return 128 + int(stop.sigval)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
