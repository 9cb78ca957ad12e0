#!/usr/bin/env bash
# What `make demo` runs: the sim fine-tuning demo (robotrl/experiment/demo.py).
#   make demo                 the full demo (record, pretrain, evaluate, fine-tune with RAPI and
#                             with BC through real learner and actor processes, evaluate again)
#   DEMO_QUICK=1 make demo    every step at a few minutes' size (a smoke run, not a result)
# Extra Hydra overrides go in DEMO_ARGS, e.g. DEMO_ARGS="experiment.actors=2".
# Artefacts land in runs/demo (runs/demo_quick); finished steps are reused on the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=demo
if [[ "${DEMO_QUICK:-0}" != "0" ]]; then preset=demo_quick; fi
# shellcheck disable=SC2086  # DEMO_ARGS is a list of overrides
exec .venv/bin/robotrl experiment "experiment=${preset}" ${DEMO_ARGS:-}
