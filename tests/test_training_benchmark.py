"""The training throughput benchmark's core on the tiny test backbone: both sides train on the same
real tokens and the comparison reports both rates and their ratio (no speed target here)."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from interlock.rollout.runs import scripted_rollouts
from interlock.synthesis.tasks import TaskContext
from interlock.training.examples import encode_trajectories

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "training_throughput.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("training_throughput", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def examples(tasks, tiny_checkpoint, tmp_path_factory) -> list:
    contexts = [TaskContext(pack.task_id, pack, graph, domain) for domain, _, graph, pack in tasks]
    demos = scripted_rollouts(contexts[:3], ["oracle"], seed=3, workdir=tmp_path_factory.mktemp("demos"))
    encoded = encode_trajectories(demos, AutoTokenizer.from_pretrained(tiny_checkpoint), max_length=100_000)
    assert len(encoded.examples) == 3
    # cut 150 tokens after the first assistant token (the tools' schema comes first), so the test is fast
    ends = [e.loss_mask.index(True) + 150 for e in encoded.examples]
    cut = [dataclasses.replace(e, input_ids=e.input_ids[:end], loss_mask=e.loss_mask[:end])
           for e, end in zip(encoded.examples, ends, strict=True)]
    assert all(e.trained_tokens for e in cut)
    return cut


def test_both_sides_train_on_the_same_real_tokens(bench, tiny_checkpoint, examples, tmp_path, capsys) -> None:
    longest = max(len(e) for e in examples)
    result = bench.compare(tiny_checkpoint, examples, batch_size=2, batch_tokens=(longest,),
                           learning_rate=1e-3, seed=1, max_context=100_000, workdir=tmp_path,
                           log=lambda _: None)
    baseline, (project,) = result["baseline"], result["project"]
    real = sum(len(e) for e in examples)
    assert baseline["tokens"] == project["tokens"] == real
    assert baseline["steps"] == 2 and project["steps"] == 3  # batches of 2; one example per row
    assert baseline["computed_tokens"] >= real == project["computed_tokens"]
    assert 0 <= baseline["padding_fraction"] < 1 and project["padding_fraction"] == 0
    assert project["logit_positions"] == sum(e.trained_tokens for e in examples) < baseline["logit_positions"]
    assert baseline["tokens_per_second"] > 0 and project["tokens_per_second"] > 0
    assert sorted(len(row) for row in project["rows"]) == [1, 1, 1]
    bench.print_table(result)
    table = capsys.readouterr().out
    assert baseline["name"] in table and project["name"] in table and f"{project['ratio']:.2f}x" in table
