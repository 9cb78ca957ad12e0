#!/usr/bin/env bash
# What `make demo` runs. Until the End-to-end issue lands, the full job (record
# demonstrations, pretrain, evaluate, fine-tune online with RAPI, evaluate again)
# does not exist; this runs the most complete path that does, and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
ROBOTRL=.venv/bin/robotrl

cat <<'MSG'
robotrl demo
============
Built so far: the foundation (core types, wire codec, Hydra configs, CLI,
benchmarks). Not built yet: the sim, policies, actor, transport, learner, so the
fine-tuning demo cannot run. This demo shows what exists:
  1. the roles of the robotrl command,
  2. the composed config of the default run (the contract the next parts build on),
  3. the wire codec benchmark (transition batches with two 96x96 cameras).
MSG

echo; echo "== 1. robotrl --help"; $ROBOTRL --help
echo; echo "== 2. robotrl config env=so101_pick_place"; $ROBOTRL config env=so101_pick_place
echo; echo "== 3. robotrl bench codec"; $ROBOTRL bench codec
echo
echo "demo: done. The end-to-end fine-tuning demo replaces this script when its issue lands."
