#!/usr/bin/env bash
# Two-host setup, robot side: the actor drives the arm (or the sim) and connects to the learner.
#   LEARNER_HOST=gpu-box launch/robot_pc.sh [extra Hydra overrides]
# Needs keys/server.key and keys/actors/$ACTOR_ID.key* (default actor-0) from the learner host.
# On a real arm add: actor=real_arm (wall-clock time, inference in a worker process).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LEARNER_HOST:?set LEARNER_HOST to the learner's host name or address}"
KEYS=${KEYS:-keys}
ACTOR_ID=${ACTOR_ID:-actor-0}
for f in server.key "actors/$ACTOR_ID.key" "actors/$ACTOR_ID.key_secret"; do
  [[ -f "$KEYS/$f" ]] || { echo "robot_pc: $KEYS/$f is missing (copy it from the learner host)"; exit 2; }
done
exec .venv/bin/robotrl actor transport=two_hosts \
  "transport.keys_dir=$KEYS" "actor.actor_id=$ACTOR_ID" \
  "transport.transitions_endpoint=tcp://${LEARNER_HOST}:${PORT_T:-5555}" \
  "transport.weights_endpoint=tcp://${LEARNER_HOST}:${PORT_W:-5556}" \
  "actor.episodes=${EPISODES:-0}" \
  "run_dir=${RUN_DIR:-runs/actor}" "$@"
