#!/usr/bin/env bash
# Two-host setup, robot side: the actor drives the arm (or the sim) and connects to the learner.
#   LEARNER_HOST=gpu-box launch/robot_pc.sh [extra Hydra overrides]
# Needs keys/server.key, keys/client.key and keys/client.key_secret from the learner host.
# On a real arm add: actor=real_arm (wall-clock time, inference in a worker process).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LEARNER_HOST:?set LEARNER_HOST to the learner's host name or address}"
KEYS=${KEYS:-keys}
for f in server.key client.key client.key_secret; do
  [[ -f "$KEYS/$f" ]] || { echo "robot_pc: $KEYS/$f is missing (copy it from the learner host)"; exit 2; }
done
exec .venv/bin/robotrl actor transport=two_hosts \
  "transport.keys_dir=$KEYS" \
  "transport.transitions_endpoint=tcp://${LEARNER_HOST}:${PORT_T:-5555}" \
  "transport.weights_endpoint=tcp://${LEARNER_HOST}:${PORT_W:-5556}" \
  "actor.episodes=${EPISODES:-0}" \
  "run_dir=${RUN_DIR:-runs/actor}" "$@"
