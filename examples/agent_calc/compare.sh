#!/usr/bin/env bash
# The calculator task trained two ways from the same warm start, seed and sampling: the built-in multi-turn
# rollout (examples/tool_calc/rl.yaml) and examples/agent_calc/agent.py through the agent proxy (the same config
# with multi_turn off and rollout.agent.path on). Needs examples/tool_calc's SFT warm start (build/tool_calc/sft:
# run examples/tool_calc/run.sh, or its three `hybridrl sft` lines, first). Extra arguments: overrides for both.
# Writes build/agent_calc/{built_in,agent}/ and build/agent_calc/curves.png. See examples/agent_calc/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
STEPS=${STEPS:-15}
test -d build/tool_calc/sft || { echo "no warm start: run examples/tool_calc/run.sh (its SFT stages) first" >&2; exit 2; }
common=(--config examples/tool_calc/rl.yaml trainer.total_training_steps="$STEPS" trainer.val_before_train=false
        trainer.test_freq=0 data.val_files=[] trainer.save_freq=0)
.venv/bin/hybridrl train "${common[@]}" trainer.default_local_dir=build/agent_calc/built_in \
  trainer.experiment_name=built_in "$@" &
.venv/bin/hybridrl train "${common[@]}" trainer.default_local_dir=build/agent_calc/agent trainer.experiment_name=agent \
  actor_rollout_ref.rollout.multi_turn.enable=false actor_rollout_ref.rollout.agent.path=examples/agent_calc/agent.py \
  actor_rollout_ref.rollout.agent.max_turns=2 "$@" &
wait -n && wait -n
.venv/bin/hybridrl plot build/agent_calc/built_in build/agent_calc/agent -o build/agent_calc/curves.png
.venv/bin/hybridrl compare build/agent_calc/built_in build/agent_calc/agent
