"""Benchmarks: `robotrl bench NAME [--quick]` (`robotrl bench learner --ranks N`: data-parallel).

Each benchmark prints a table for people and, as its last line, one JSON object
for machines. Each compares against a baseline measured in the same run (a
ratio), because these machines are noisy. Tests check behaviour; benchmarks
measure speed.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: Benchmark name -> module with ``run(quick: bool) -> dict``.
BENCHMARKS: dict[str, str] = {
    "codec": "robotrl.bench.codec",
    "sim": "robotrl.bench.sim",
    "transport": "robotrl.bench.transport",
    "learner": "robotrl.bench.learner",
    "policy": "robotrl.bench.policy",
    "actor": "robotrl.bench.actor",
    "hotswap": "robotrl.bench.hotswap",
    "soak": "robotrl.bench.soak",
    "vla": "robotrl.bench.vla",
}


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="robotrl bench", description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=sorted(BENCHMARKS), help="which benchmark")
    parser.add_argument("--quick", action="store_true", help="a short run (seconds, noisier)")
    parser.add_argument(
        "--ranks",
        type=int,
        default=1,
        help="learner only: compare one rank with this many data-parallel ranks (at least 2)",
    )
    args = parser.parse_args(list(argv))
    if args.ranks != 1:
        if args.name != "learner":
            parser.error("--ranks applies to the learner benchmark only")
        from robotrl.bench import learner_ranks

        learner_ranks.run(quick=args.quick, ranks=args.ranks)
        sys.stdout.flush()
        return 0
    module = importlib.import_module(BENCHMARKS[args.name])
    module.run(quick=args.quick)
    sys.stdout.flush()
    return 0
