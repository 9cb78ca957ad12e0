#!/usr/bin/env bash
# Behaviour cloning on the easy sim task from 50 expert demonstrations, then evaluation:
# the recipe measured at 95% success on 100 fixed eval seeds (robotrl/policy/README.md).
#   launch/reach_bc.sh [OUT]      artefacts in OUT (default runs/reach_bc); ~20-30 min on 2 cores
# 1. 50 DART demonstrations (noise executed, clean command recorded), seeds 0-49;
# 2. the small flow policy, 4000 steps on all 50 (no held-out episodes), rows after a
#    success trained to hold, state noise 0.05 std;
# 3. 100 eval episodes at seeds 1,000,000+ at 0 latency and at lognormal 150 ms.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/reach_bc}
robotrl=.venv/bin/robotrl
common=(env=so101_reach "env.cameras=[]")
[[ -d "$out/demos" ]] || $robotrl record "${common[@]}" policy=expert record.episodes=50 \
    record.dart_noise=0.02 record.output_dir="$out/demos" seed=0
$robotrl pretrain "${common[@]}" policy=flow_small dataset="$out/demos" run_dir="$out/pretrain" \
    pretrain.steps=4000 pretrain.batch_size=32 pretrain.warmup_steps=200 pretrain.val_every=500 \
    pretrain.checkpoint_every=500 pretrain.threads=1 pretrain.val_fraction=0 \
    pretrain.hold_after_success=true pretrain.state_noise=0.05 seed=0
for latency in "constant 0" "lognormal 0.15"; do
    read -r kind median <<<"$latency"
    $robotrl eval "${common[@]}" policy=flow_small policy.path="$out/pretrain/policy" \
        actor.episodes=100 actor.seed=1000000 actor.latency.kind="$kind" actor.latency.median_s="$median" \
        run_dir="$out/eval_${kind}_${median}"
done
