#!/usr/bin/env bash
# Two-host setup, GPU side: the learner binds both links with CURVE on.
#   launch/learner_host.sh [extra Hydra overrides]
# First time: keys for ACTORS (comma-separated, default actor-0) are generated here; copy
# keys/server.key and keys/actors/<id>.key* to each robot PC (launch/robot_pc.sh).
# Environment: RUN_DIR (default runs/learner), KEYS (default keys), PORT_T/PORT_W (5555/5556).
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS=${KEYS:-keys}
if [[ ! -f "$KEYS/server.key_secret" ]]; then
  echo "learner_host: no CURVE keys in $KEYS; creating them (copy each actor's pair to its robot PC)"
  .venv/bin/robotrl keys generate --dir "$KEYS" --actors "${ACTORS:-actor-0}"
fi
exec .venv/bin/robotrl learner transport=two_hosts \
  "transport.keys_dir=$KEYS" \
  "transport.transitions_endpoint=tcp://0.0.0.0:${PORT_T:-5555}" \
  "transport.weights_endpoint=tcp://0.0.0.0:${PORT_W:-5556}" \
  "run_dir=${RUN_DIR:-runs/learner}" "$@"
