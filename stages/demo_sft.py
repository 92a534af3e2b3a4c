"""Stage `demo_sft`: the base checkpoint fine-tuned on the reference demonstrations: the warm
start of RFT and the "SFT on demonstrations" baseline.

Its library side is `interlock.training.stage.demo_sft`."""

from interlock.core.runner import run_stage
from interlock.training.stage import demo_sft

if __name__ == "__main__":
    run_stage("demo_sft", demo_sft)
