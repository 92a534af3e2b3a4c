"""The ``vllm`` backend: the same rollouts on a GPU. Skipped cleanly without a GPU or vLLM."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no GPU on this machine", allow_module_level=True)
pytest.importorskip("vllm", reason="the gpu extra (vLLM) is not installed")

from interlock.models.vllm_backend import VLLMBackend  # noqa: E402
from interlock.rollout.engine import RolloutLimits, run_episodes  # noqa: E402
from interlock.rollout.runs import plan_episodes  # noqa: E402
from interlock.rollout.trajectory import FINISH_REASONS  # noqa: E402
from interlock.synthesis.tasks import TaskContext  # noqa: E402

pytestmark = pytest.mark.gpu


def test_rollouts_run_through_vllm(tiny_checkpoint, tasks, tmp_path):
    backend = VLLMBackend(str(tiny_checkpoint), dtype="float32", max_model_len=4096,
                          gpu_memory_utilization=0.3)
    contexts = [TaskContext(p.task_id, p, g, d) for d, _, g, p in tasks[:4]]
    trajectories = list(run_episodes(plan_episodes(iter(contexts), policy="tiny/vllm", attempts=2, seed=1),
                                     backend, RolloutLimits(max_turns=3, max_new_tokens=32), tmp_path))
    assert len(trajectories) == 8
    assert all(t.finish_reason in FINISH_REASONS and t.generated_tokens > 0 for t in trajectories)
