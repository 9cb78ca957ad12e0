"""Running one of `robotrl bench`'s benchmarks in its quick form, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys


def quick_bench(name: str, timeout_s: float) -> dict[str, object]:
    """`robotrl bench NAME --quick` to its end; the JSON line it prints last.

    A bench that fails fails the test with the end of its stderr."""
    out = subprocess.run(
        [sys.executable, "-m", "robotrl.cli", "bench", name, "--quick"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["bench"] == name
    return result
