#!/usr/bin/env bash
# Two-host setup, GPU side: the learner binds both links with CURVE on.
#   launch/learner_host.sh [extra Hydra overrides]
# First time: keys for ACTORS (comma-separated, default actor-0) are generated here; copy
# keys/server.key and keys/actors/<id>.key* to each robot PC (launch/robot_pc.sh).
# Environment: RUN_DIR (default runs/learner), KEYS (default keys), PORT_T/PORT_W (5555/5556).
# Several GPUs: RANKS=N starts N data-parallel learner ranks here under torchrun (one per GPU).
# Several nodes: run this on each with NNODES=M NODE_RANK=k MASTER_ADDR=<node 0's address>
# (MASTER_PORT, default 29500) and the same overrides; node 0 holds rank 0, which alone binds
# the links, so the actors' LEARNER_HOST is node 0. Only node 0 needs keys and the run folder.
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS=${KEYS:-keys}
RANKS=${RANKS:-1}
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
if [[ $NODE_RANK == 0 && ! -f "$KEYS/server.key_secret" ]]; then
  echo "learner_host: no CURVE keys in $KEYS; creating them (copy each actor's pair to its robot PC)"
  .venv/bin/robotrl keys generate --dir "$KEYS" --actors "${ACTORS:-actor-0}"
fi
learner=(.venv/bin/robotrl learner)
if (( RANKS > 1 || NNODES > 1 )); then
  learner=(.venv/bin/python -m robotrl.learner.torchrun "--nproc-per-node=$RANKS")
  if (( NNODES > 1 )); then
    : "${MASTER_ADDR:?set MASTER_ADDR to the address of node 0 (NODE_RANK=0 there)}"
    learner+=("--nnodes=$NNODES" "--node-rank=$NODE_RANK" "--master-addr=$MASTER_ADDR"
              "--master-port=${MASTER_PORT:-29500}")
  else
    learner+=(--standalone)
  fi
  learner+=(-m robotrl.cli learner)
fi
exec "${learner[@]}" transport=two_hosts \
  "transport.keys_dir=$KEYS" \
  "transport.transitions_endpoint=tcp://0.0.0.0:${PORT_T:-5555}" \
  "transport.weights_endpoint=tcp://0.0.0.0:${PORT_W:-5556}" \
  "run_dir=${RUN_DIR:-runs/learner}" "$@"
