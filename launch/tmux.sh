#!/usr/bin/env bash
# A tmux layout for one host: `robotrl launch` (health table) on top, the learner's log and
# each actor's log below, so a crash or a slow role is visible at a glance.
#   launch/tmux.sh [Hydra overrides for robotrl launch, e.g. env=so101_pick_place launch.actors=2]
# Detach with C-b d; Ctrl-C in the top pane stops every role (actors first).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v tmux >/dev/null || { echo "tmux.sh: tmux is not installed (apt-get install tmux)"; exit 2; }
RUN_DIR=$(.venv/bin/robotrl config "$@" | sed -n 's/^run_dir: //p')
ACTORS=$(.venv/bin/robotrl config "$@" | awk '/^launch:/{f=1} f && /actors:/{print $2; exit}')
SESSION=${SESSION:-robotrl}
mkdir -p "$RUN_DIR/logs"
tmux new-session -d -s "$SESSION" -n robotrl ".venv/bin/robotrl launch $*; read -rp 'launch ended; Enter closes'"
tmux split-window -v -t "$SESSION" "touch $RUN_DIR/logs/learner.log; tail -F $RUN_DIR/logs/learner.log"
for ((i = 0; i < ACTORS; i++)); do
  tmux split-window -h -t "$SESSION" "touch $RUN_DIR/logs/actor-$i.log; tail -F $RUN_DIR/logs/actor-$i.log"
done
tmux select-layout -t "$SESSION" main-horizontal
tmux select-pane -t "$SESSION:0.0"
exec tmux attach -t "$SESSION"
