"""The training throughput benchmark's core on the tiny test backbone: every side (the padded
Trainer, the project, TRL's SFTTrainer unpacked and packed) trains on the same real tokens, the
project and TRL agree on the first step's loss, and the comparison reports every rate and ratio (no
speed target here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from interlock.rollout.runs import scripted_rollouts
from interlock.synthesis.tasks import TaskContext
from interlock.training.examples import encode_trajectories

from helpers.artifacts import loaded_script

SCRIPT = Path(__file__).resolve().parents[1] / "perf" / "training_throughput.py"


@pytest.fixture(scope="module")
def bench():
    with loaded_script(SCRIPT, "training_throughput") as module:
        yield module


@pytest.fixture(scope="module")
def examples(tasks, tiny_checkpoint, tmp_path_factory, bench) -> tuple[list, list[dict]]:
    """Three oracle demonstrations as the project encodes them, and as TRL takes them."""
    contexts = [TaskContext(pack.task_id, pack, graph, domain) for domain, _, graph, pack in tasks]
    demos = scripted_rollouts(contexts[:3], ["oracle"], seed=3, workdir=tmp_path_factory.mktemp("demos"))
    encoded = encode_trajectories(demos, AutoTokenizer.from_pretrained(tiny_checkpoint), max_length=100_000)
    assert len(encoded.examples) == 3
    return encoded.examples, [bench.conversation(t) for t in demos]


def test_every_side_trains_on_the_same_tokens_with_the_same_first_step_loss(bench, tiny_checkpoint, examples,
                                                                            tmp_path, capsys) -> None:
    examples, conversations = examples
    longest = max(len(e) for e in examples)
    result = bench.compare(tiny_checkpoint, examples, conversations=conversations, batch_size=2,
                           batch_tokens=(longest,), learning_rate=1e-3, seed=1, max_context=100_000,
                           workdir=tmp_path, log=lambda _: None)
    baseline, (project,), (trl_padded, trl_packed) = result["baseline"], result["project"], result["trl"]
    real, targets = sum(len(e) for e in examples), sum(e.trained_tokens for e in examples)
    assert baseline["tokens"] == project["tokens"] == trl_padded["tokens"] == trl_packed["tokens"] == real
    assert baseline["steps"] == trl_padded["steps"] == 2  # batches of 2
    assert project["steps"] == trl_packed["steps"] == 3  # one example per row, a row a step
    assert project["computed_tokens"] == trl_packed["computed_tokens"] == real  # padding-free
    assert baseline["computed_tokens"] >= real and trl_padded["computed_tokens"] >= real
    # the project and TRL's fused LM head project target positions only; the plain Trainer every position
    assert project["logit_positions"] == trl_padded["logit_positions"] == targets
    assert trl_packed["logit_positions"] == targets < baseline["logit_positions"]
    assert all(side["tokens_per_second"] > 0 for side in (baseline, project, trl_padded, trl_packed))
    assert sorted(len(row) for row in project["rows"]) == [1, 1, 1]
    losses = result["first_step_losses"]  # the two shortest examples in one step, every side
    assert set(losses) == {"fine_tune", "TRL, padded", "TRL, packed"}
    assert max(losses.values()) - min(losses.values()) <= bench.LOSS_TOLERANCE * losses["fine_tune"]
    bench.print_table(result)
    table = capsys.readouterr().out
    for side in (baseline, project, trl_padded, trl_packed):
        assert side["name"] in table
    assert f"{project['ratio']:.2f}x" in table

