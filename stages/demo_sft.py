"""Stage `demo_sft`: the base checkpoint fine-tuned on the reference demonstrations: the warm start of
RFT (where scale.rollouts.policy is demo_sft) and the "SFT on demonstrations" baseline."""

from common import run_stage

from interlock.training.stage import run_fine_tuning

if __name__ == "__main__":
    run_stage("demo_sft", lambda params, data: run_fine_tuning(params, data, "demo"))
