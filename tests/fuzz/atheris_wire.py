"""Coverage-guided fuzzing of what a peer can send, with atheris (not run by pytest).

    .venv/bin/pip install atheris
    .venv/bin/python tests/fuzz/atheris_wire.py -atheris_runs=100000

Each input picks a valid message of one kind (tests/fuzz_targets.py) and a list of
damages, or is split into raw frames; the arrival checks must refuse it with a known
reason or accept it whole. Any other exception is reported by atheris as a crash.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
with atheris.instrument_imports():
    from fuzz_targets import mutate, parse, valid_messages

VALID = valid_messages()
CASES = 0


def one_input(data: bytes) -> None:
    global CASES
    CASES += 1
    fdp = atheris.FuzzedDataProvider(data)
    if fdp.ConsumeBool():
        frames = [fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 300)) for _ in range(fdp.ConsumeIntInRange(1, 5))]
    else:
        frames = VALID[fdp.ConsumeIntInRange(0, len(VALID) - 1)]
        for _ in range(fdp.ConsumeIntInRange(1, 4)):
            how, at = fdp.ConsumeIntInRange(0, 7), fdp.ConsumeIntInRange(0, 1 << 20)
            blob = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 32))
            value = fdp.PickValueInList([None, -1, 0, 1 << 62, -(1 << 63), "x", [1, 2], {"a": 1}, 1.5, True])
            frames = mutate(frames, how, at, blob, value) or [b""]
    parse(frames)


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    try:
        atheris.Fuzz()
    finally:
        print(f"atheris_wire: {CASES} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
