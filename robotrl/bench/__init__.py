"""Benchmarks: `robotrl bench NAME [--quick]`.

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
    args = parser.parse_args(list(argv))
    module = importlib.import_module(BENCHMARKS[args.name])
    module.run(quick=args.quick)
    sys.stdout.flush()
    return 0
