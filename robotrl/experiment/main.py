"""`robotrl experiment experiment=NAME [overrides]`: run a named experiment.

``experiment=demo`` (what `make demo` runs), ``demo_quick``, ``demo_pixels`` and ``vla_demo`` run
the fine-tuning demo; ``experiment=latency_sweep`` sweeps latency models and strategies.
"""

from __future__ import annotations

import sys

from robotrl.cli import EXIT_USAGE
from robotrl.config.load import ConfigError
from robotrl.config.schema import RobotRLConfig


def main(cfg: RobotRLConfig) -> int:
    from robotrl.experiment.steps import StepFailedError

    try:
        if cfg.experiment.name == "latency_sweep":
            from robotrl.experiment.sweep import run_sweep

            return run_sweep(cfg)
        from robotrl.experiment.demo import run_demo

        return run_demo(cfg)
    except (StepFailedError, FileNotFoundError) as exc:
        print(f"robotrl experiment: {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f"robotrl experiment: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(
            "robotrl experiment: interrupted; finished steps are kept and reused next time", file=sys.stderr
        )
        return 130
