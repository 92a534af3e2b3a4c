"""Fine-tuning: examples rendered as the rollout engine renders them, assistant-only weighted
loss, padding-free packing that attends within examples only, seeded runs, LoRA, and the
checkpoint with its training record loading back through a backend."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from interlock.core import schemas
from interlock.core.backend import ChatRequest
from interlock.core.config import LoraConfig, Params, Recipe, load_params, write_params
from interlock.core.errors import InterlockError
from interlock.core.io import write_row_groups
from interlock.core.paths import Paths
from interlock.core.tracking import log_stage
from interlock.evaluation.run import checkpoint_models
from interlock.intervention.shift import filter_corrections
from interlock.models.chat_template import CHAT_TEMPLATE, IM_END, openai_tools
from interlock.models.checkpoint import load_checkpoint, read_manifest, sha256, verify_checkpoint
from interlock.models.transformers_backend import TransformersBackend
from interlock.rollout.engine import TOOLS
from interlock.rollout.runs import scripted_rollouts
from interlock.rollout.trajectory import BadRow, Trajectory
from interlock.synthesis.tasks import TaskContext
from interlock.training.batching import pack, plan_rows
from interlock.training.examples import (
    ExampleSet,
    TrainingItem,
    encode_conversation,
    encode_trajectories,
    read_training_items,
)
from interlock.training.scoring import checkpoint_nll, conversation_nll
from interlock.training.stage import train
from interlock.training.trainer import fine_tune, process_rows, read_training, row_loss, step_plan

from helpers.config import defaults
from helpers.probe import pretend_measured
from helpers.repo import command_timeout

REPO = Path(__file__).resolve().parents[1]
RECIPE = Recipe(epochs=2, learning_rate=3e-3, batch_tokens=4096, gradient_accumulation=1, warmup_steps=0,
                weight_decay=0.0, max_grad_norm=1.0, lora=None, seed=11)


@pytest.fixture(scope="module")
def demos(tasks, tmp_path_factory) -> list[Trajectory]:
    contexts = [TaskContext(pack.task_id, pack, graph, domain) for domain, _, graph, pack in tasks]
    return scripted_rollouts(contexts, ["oracle"], seed=3, workdir=tmp_path_factory.mktemp("demos"))


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint):
    return AutoTokenizer.from_pretrained(tiny_checkpoint)


@pytest.fixture(scope="module")
def example_set(demos, tokenizer) -> ExampleSet:
    return encode_trajectories(demos, tokenizer, max_length=100_000)


@pytest.fixture(scope="module")
def trained(tiny_checkpoint, example_set, tmp_path_factory):
    out = tmp_path_factory.mktemp("trained") / "demo_sft"
    return out, fine_tune(tiny_checkpoint, example_set, RECIPE, out, name="demo_sft", max_context=4096)


@pytest.fixture(scope="module")
def trained_bf16(tiny_checkpoint, example_set, tmp_path_factory):
    """The same fine-tuning as :func:`trained`, computing in bf16 autocast."""
    out = tmp_path_factory.mktemp("trained-bf16") / "demo_sft"
    return out, fine_tune(tiny_checkpoint, example_set, RECIPE, out, name="demo_sft", max_context=4096,
                          compute_dtype="bfloat16")


# ----------------------------------------------------------------------------- examples

def test_loss_mask_covers_exactly_the_assistant_turns(demos, example_set, tokenizer) -> None:
    example, trajectory = example_set.examples[0], demos[0]
    pairs = list(zip(example.input_ids, example.loss_mask, strict=True))
    trained_text = tokenizer.decode([t for t, m in pairs if m])
    assistant = [m for m in trajectory.messages if m.role == "assistant"]
    assert trained_text.count(IM_END) == len(assistant)
    for message in assistant:
        assert message.content.strip() in trained_text
    context = tokenizer.decode([t for t, m in pairs if not m])
    assert "<tools>" in context and trajectory.messages[1].content[:40] in context
    assert "<tool_call>" not in context.split("<|im_start|>assistant")[1].split(IM_END)[0]


def test_examples_are_what_the_rollout_engine_feeds_the_model(demos, example_set, tiny_checkpoint) -> None:
    # the prompt of the first turn, as the transformers backend renders it, is the example's prefix
    backend = TransformersBackend(tiny_checkpoint)
    trajectory, example = demos[0], example_set.examples[0]
    first = trajectory.messages.index(next(m for m in trajectory.messages if m.role == "assistant"))
    prompt = backend.prompt_ids(ChatRequest("k", tuple(trajectory.messages[:first]), TOOLS))
    assert list(example.input_ids[:len(prompt)]) == prompt
    assert not any(example.loss_mask[:len(prompt)]) and example.loss_mask[len(prompt)]


def test_too_long_and_empty_trajectories_are_left_out_and_counted(demos, tokenizer) -> None:
    no_assistant = dataclasses.replace(demos[1], rollout_id="silent", messages=demos[1].messages[:2])
    data = encode_trajectories([demos[0], no_assistant], tokenizer, max_length=100_000)
    assert [e.example_id for e in data.examples] == [demos[0].rollout_id]
    assert data.nothing_to_learn == ["silent"]
    short = encode_trajectories(demos, tokenizer, max_length=50)
    assert short.examples == [] and len(short.too_long) == len(demos)


def test_the_data_hash_follows_ids_masks_and_weights(example_set) -> None:
    same = ExampleSet(list(example_set.examples), [], [])
    reweighted = ExampleSet([dataclasses.replace(example_set.examples[0], weight=0.5),
                             *example_set.examples[1:]], [], [])
    assert same.sha256() == example_set.sha256() != reweighted.sha256()


def test_loss_from_message_masks_the_turns_before_it(demos, tokenizer) -> None:
    messages = [m.to_dict() for m in demos[0].messages]
    assistant = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    start = assistant[-2]  # the last two assistant turns carry loss
    ids, full = encode_conversation(tokenizer, messages)
    same_ids, mask = encode_conversation(tokenizer, messages, loss_from_message=start)
    boundary = len(tokenizer.apply_chat_template(messages[:start], tools=openai_tools(TOOLS), tokenize=True,
                                                 return_dict=True)["input_ids"])
    assert same_ids == ids and encode_conversation(tokenizer, messages, 0) == (ids, full)
    assert mask == [m and i >= boundary for i, m in enumerate(full)] and any(mask) and mask != full
    trained_text = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert trained_text.count(IM_END) == 2
    for index in assistant:
        assert (messages[index]["content"].strip() in trained_text) == (index >= start), index
    # from the first message on is every assistant turn; from past the last one on, nothing
    assert encode_conversation(tokenizer, messages, 1)[1] == full
    assert not any(encode_conversation(tokenizer, messages, len(messages))[1])


def test_a_template_that_is_not_prefix_stable_is_a_clear_error(demos, tokenizer) -> None:
    shifty = copy.deepcopy(tokenizer)  # the number of messages first: a prefix renders differently
    shifty.chat_template = "{{- messages | length | string -}}" + CHAT_TEMPLATE
    messages = [m.to_dict() for m in demos[0].messages]
    assert any(encode_conversation(shifty, messages)[1])  # no boundary to find: fine
    with pytest.raises(InterlockError, match="not prefix-stable") as caught:
        encode_conversation(shifty, messages, loss_from_message=5)
    assert caught.value.field == "loss_from_message"
    with pytest.raises(InterlockError, match=">= 0"):
        encode_conversation(tokenizer, messages, loss_from_message=-1)


def test_training_items_carry_their_weight_and_first_trained_message(demos, tokenizer) -> None:
    start = [i for i, m in enumerate(demos[1].messages) if m.role == "assistant"][-1]
    data = encode_trajectories([demos[0], TrainingItem(demos[1], 0.25, start, "rti"),
                                TrainingItem(demos[2], 2.0, len(demos[2].messages), "rti")],
                               tokenizer, max_length=100_000)
    plain = encode_trajectories(demos[:2], tokenizer, max_length=100_000)
    assert [(e.weight, e.source) for e in data.examples] == [(1.0, None), (0.25, "rti")]
    assert data.nothing_to_learn == [demos[2].rollout_id]  # nothing left to learn after the last message
    assert data.examples[0] == plain.examples[0]
    corrected, whole = data.examples[1], plain.examples[1]
    assert corrected.input_ids == whole.input_ids and 0 < corrected.trained_tokens < whole.trained_tokens
    assert data.by_source == {"rti": 1} and plain.by_source == {}
    assert data.sha256() != encode_trajectories(demos[:2], tokenizer, max_length=100_000).sha256()


def training_row(trajectory: Trajectory, source: str = "policy", weight: float = 1.0,
                 loss_from: int = 0) -> dict:
    """A TRAINING_SET row."""
    return {**trajectory.to_row(), "source": source, "weight": weight, "loss_from_message": loss_from}


def test_one_reader_serves_trajectories_and_training_sets(demos, tmp_path) -> None:
    plain, training = tmp_path / "plain.parquet", tmp_path / "training.parquet"
    with write_row_groups(plain, schemas.TRAJECTORIES) as writer:
        writer.write([t.to_row() for t in demos[:2]])
    with write_row_groups(training, schemas.TRAINING_SET) as writer:
        writer.write([training_row(demos[0]), training_row(demos[1], "rti", 0.5, 7)])
    assert list(read_training_items(plain)) == [TrainingItem(t) for t in demos[:2]]
    assert list(read_training_items(training)) == [TrainingItem(demos[0], 1.0, 0, "policy"),
                                                   TrainingItem(demos[1], 0.5, 7, "rti")]
    bad = tmp_path / "bad.parquet"
    with write_row_groups(bad, schemas.TRAINING_SET) as writer:
        writer.write([training_row(demos[0], weight=-1.0), training_row(demos[1])])
    refused, kept = list(read_training_items(bad))  # a bad row is refused, the next one read
    assert isinstance(refused, BadRow) and "finite number >= 0" in refused.reason
    assert refused.field == "weight" and refused.rollout_id == demos[0].rollout_id and refused.row == 0
    assert kept == TrainingItem(demos[1], 1.0, 0, "policy")
    with pytest.raises(InterlockError, match="no trajectories table"):
        list(read_training_items(tmp_path / "missing.parquet"))


# ----------------------------------------------------------------------------- batching

def test_rows_respect_the_budget_hold_every_example_once_and_are_seeded() -> None:
    lengths = [900, 50, 300, 700, 120, 2500, 10, 400, 640, 333]
    rows = plan_rows(lengths, 1000, seed=5)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in row) <= 1000 or len(row) == 1 for row in rows)
    assert rows == plan_rows(lengths, 1000, seed=5) and rows != plan_rows(lengths, 1000, seed=6)
    assert len(rows) <= 5  # first-fit decreasing: 4,947 tokens in rows of 1,000 (one of them 2,500)


def test_a_step_is_the_same_rows_whatever_the_number_of_processes() -> None:
    """Each process takes every n-th row of each step, the processes together the whole step; a
    process the step has no row for runs one at scale 0 (it must join the gradient exchange)."""
    lengths = list(range(10, 300, 7))
    recipe = RECIPE.model_copy(update=dict(batch_tokens=200, gradient_accumulation=2))
    plan = step_plan(lengths, recipe, epoch=0)
    assert all(1 <= len(step) <= 2 for step in plan)
    for world in (1, 2, 3):
        for step in plan:
            shares = [process_rows(step, rank, world) for rank in range(world)]
            counted = [row for rows, scale in shares if scale for row in rows]
            assert sorted(map(tuple, counted)) == sorted(map(tuple, step))
            assert all(scale in (0.0, 1.0) and rows for rows, scale in shares)
            assert sum(scale == 0.0 for _, scale in shares) == max(0, world - len(step))


def test_a_packed_row_attends_within_each_example_only(tiny_checkpoint, example_set) -> None:
    model, _ = load_checkpoint(tiny_checkpoint)
    a, b = example_set.examples[:2]
    with torch.no_grad():
        alone = [model(input_ids=torch.tensor([e.input_ids])).logits[0] for e in (a, b)]
        row = pack([a, b])
        packed = model(input_ids=row.input_ids, position_ids=row.position_ids, use_cache=False).logits[0]
    torch.testing.assert_close(packed[:len(a)], alone[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(packed[len(a):], alone[1], rtol=1e-4, atol=1e-4)


def test_loss_is_on_target_tokens_only_and_weighted(tiny_checkpoint, example_set) -> None:
    model, _ = load_checkpoint(tiny_checkpoint)
    a, b = example_set.examples[:2]
    with torch.no_grad():
        full = model(input_ids=torch.tensor([a.input_ids])).logits[0]
        targets = [t - 1 for t in range(1, len(a)) if a.loss_mask[t]]
        labels = torch.tensor(a.input_ids)[[t + 1 for t in targets]]
        expected = torch.nn.functional.cross_entropy(full[targets], labels, reduction="sum")
        ignored = dataclasses.replace(b, weight=0.0)
        doubled = dataclasses.replace(a, weight=2.0)
        assert float(row_loss(model, pack([a]), "cpu")) == pytest.approx(float(expected), rel=1e-4)
        assert float(row_loss(model, pack([a, ignored]), "cpu")) == pytest.approx(float(expected), rel=1e-4)
        assert float(row_loss(model, pack([doubled]), "cpu")) == pytest.approx(2 * float(expected), rel=1e-4)
    assert pack([a, ignored]).weight_sum == a.trained_tokens


# ----------------------------------------------------------------------------- training

def test_training_lowers_the_loss_and_writes_a_complete_checkpoint(trained, tiny_checkpoint,
                                                                   example_set) -> None:
    out, result = trained
    record = read_training(out)
    assert record == result.record
    assert record["examples"] == len(example_set.examples) and record["data_sha256"] == example_set.sha256()
    assert record["steps"] == len(record["losses"]) == len(record["step_tokens"]) > 2
    assert record["tokens"] == example_set.tokens and record["epochs"] == 2
    assert sum(record["step_tokens"]) == 2 * example_set.tokens
    assert record["losses"][-1] < record["losses"][0]
    assert record["start_sha256"] == sha256(tiny_checkpoint / "model.safetensors")
    manifest = read_manifest(out)
    assert manifest["source"] == "finetuned" and "training.parquet" in {f["path"] for f in manifest["files"]}
    assert verify_checkpoint(out) == []
    assert load_checkpoint(out)[0].config.use_cache  # training turns the cache off; serving needs it
    assert sha256(out / "model.safetensors") != sha256(tiny_checkpoint / "model.safetensors")
    assert (manifest["dtype"], manifest["compute_dtype"]) == ("float32", "float32")


def test_bf16_autocast_trains_fp32_weights_and_its_losses_follow_fp32s(trained, trained_bf16) -> None:
    """bf16 autocast over fp32 weights: the same steps on the same tokens, the weights stored in
    fp32 and the manifest naming both dtypes. Agreement with fp32 is measured, not assumed: on the
    tiny model (16 steps) the first loss, the same weights before any update, was 10.34989 in fp32
    and 10.34487 in bf16 (4.9e-4 apart, relatively), the last 5.99488 and 5.98364, and no step's
    more than 3.9e-3 apart; the bounds (1e-2 for the first, 5e-2 for every step) leave room for
    other CPUs' kernels."""
    (_, fp32), (out_bf16, bf16) = trained, trained_bf16
    first, first_bf16 = fp32.record["losses"][0], bf16.record["losses"][0]
    print(f"first loss: fp32 {first:.6f}, bf16 {first_bf16:.6f}, relative {abs(first_bf16 / first - 1):.2e}; "
          f"last loss: fp32 {fp32.record['losses'][-1]:.6f}, bf16 {bf16.record['losses'][-1]:.6f}")
    assert bf16.record["steps"] == fp32.record["steps"]
    assert bf16.record["step_tokens"] == fp32.record["step_tokens"]
    assert first_bf16 != first  # autocast was on
    assert first_bf16 == pytest.approx(first, rel=1e-2)
    assert bf16.record["losses"] == pytest.approx(fp32.record["losses"], rel=5e-2)
    assert bf16.record["losses"][-1] < first_bf16
    manifest = read_manifest(out_bf16)
    assert (manifest["dtype"], manifest["compute_dtype"]) == ("float32", "bfloat16")
    assert next(load_checkpoint(out_bf16)[0].parameters()).dtype == torch.float32
    assert verify_checkpoint(out_bf16) == []


def test_float16_training_is_refused_with_the_field_to_change(tiny_checkpoint, example_set, tmp_path) -> None:
    with pytest.raises(InterlockError, match="not float16") as error:
        fine_tune(tiny_checkpoint, example_set, RECIPE, tmp_path / "fp16", name="fp16", max_context=4096,
                  compute_dtype="float16")
    assert error.value.field == "backbone.dtype" and not (tmp_path / "fp16").exists()


def test_a_trained_checkpoint_serves_through_the_transformers_backend(trained, demos) -> None:
    out, _ = trained
    backend = TransformersBackend(out)
    first = demos[0].messages[:2]
    [completion] = backend.complete([ChatRequest("k", tuple(first), TOOLS, max_new_tokens=8)])
    assert completion.completion_tokens > 0 and completion.finish_reason in {"stop", "length"}


def test_training_is_deterministic_given_the_seed(trained, tiny_checkpoint, example_set, tmp_path) -> None:
    out, _ = trained
    again = fine_tune(tiny_checkpoint, example_set, RECIPE, tmp_path / "again", name="demo_sft",
                      max_context=4096)
    assert sha256(tmp_path / "again" / "model.safetensors") == sha256(out / "model.safetensors")
    assert again.record["losses"] == read_training(out)["losses"]


def test_nothing_to_train_on_writes_an_untrained_copy(tiny_checkpoint, tmp_path) -> None:
    result = fine_tune(tiny_checkpoint, ExampleSet([], [], []), RECIPE, tmp_path / "rft", name="rft",
                       max_context=4096)
    assert result.record["steps"] == 0 and result.record["losses"] == []
    assert "untrained" in read_manifest(tmp_path / "rft")["notes"]
    assert read_manifest(tmp_path / "rft")["compute_dtype"] is None  # nothing was computed
    original, _ = load_checkpoint(tiny_checkpoint)
    copy, _ = load_checkpoint(tmp_path / "rft")
    for (name, p), (_, q) in zip(original.state_dict().items(), copy.state_dict().items(), strict=True):
        assert torch.equal(p, q), name


def test_lora_trains_adapters_and_merges_them_into_a_plain_checkpoint(tiny_checkpoint, example_set,
                                                                      tmp_path) -> None:
    lora = LoraConfig(rank=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"])
    recipe = RECIPE.model_copy(update=dict(lora=lora, epochs=1))
    fine_tune(tiny_checkpoint, example_set, recipe, tmp_path / "lora", name="lora", max_context=4096)
    original, _ = load_checkpoint(tiny_checkpoint)
    merged, _ = load_checkpoint(tmp_path / "lora")
    before, after = original.state_dict(), merged.state_dict()
    assert before.keys() == after.keys()  # no adapter weights left: a plain checkpoint
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed and all("q_proj" in n or "v_proj" in n for n in changed)


def test_an_examples_weight_scales_its_pull_even_alone_in_its_step(tiny_checkpoint, example_set,
                                                                  tmp_path) -> None:
    # two short examples, one optimizer step each (every example outgrows the row budget)
    short = [dataclasses.replace(e, input_ids=e.input_ids[:end], loss_mask=e.loss_mask[:end])
             for e in example_set.examples[:2] for end in [e.loss_mask.index(True) + 40]]
    recipe = RECIPE.model_copy(update=dict(epochs=1, batch_tokens=1, gradient_accumulation=1))
    plan = step_plan([len(e) for e in short], recipe, epoch=0)
    assert [[len(row) for row in step] for step in plan] == [[1], [1]]
    second = plan[1][0][0]
    # AdamW's first update does not depend on the gradient's scale, so the example that differs is the
    # one of the second step: there its gradient meets the moments the first step left

    def run(weight: float, name: str) -> tuple[dict, list[float]]:
        examples = list(short)
        examples[second] = dataclasses.replace(examples[second], weight=weight)
        result = fine_tune(tiny_checkpoint, ExampleSet(examples, [], []), recipe, tmp_path / name, name=name,
                           max_context=4096)
        assert result.record["steps"] == 2
        return load_checkpoint(tmp_path / name)[0].state_dict(), result.record["losses"]

    (full, full_losses), (again, again_losses), (light, light_losses) = (
        run(1.0, "full"), run(1.0, "again"), run(0.25, "light"))
    assert all(torch.equal(full[k], again[k]) for k in full) and full_losses == again_losses
    assert not all(torch.equal(full[k], light[k]) for k in full)
    # the same first step; the second step's loss is a quarter (a token mean, not a weighted mean)
    assert light_losses[0] == full_losses[0]
    assert light_losses[1] == pytest.approx(full_losses[1] / 4, rel=1e-5)


#: the reference run of the GPU test: the same fine-tuning in a process that sees no GPU
CPU_RUN = """
import json, pickle, sys
from pathlib import Path
import torch
from interlock.core.config import Recipe
from interlock.training.trainer import fine_tune
examples = pickle.loads(Path(sys.argv[1]).read_bytes())
recipe = Recipe.model_validate_json(Path(sys.argv[2]).read_text())
assert not torch.cuda.is_available(), "the reference run must not see the GPU"
result = fine_tune(Path(sys.argv[3]), examples, recipe, Path(sys.argv[4]), name="cpu", max_context=4096)
record = result.record
print(json.dumps({key: record[key] for key in ("steps", "step_tokens", "learning_rates", "losses")}))
"""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_multi_step_training_on_a_gpu_follows_the_cpu_run(tiny_checkpoint, example_set, tmp_path) -> None:
    """Twelve steps of the same recipe on the GPU and on the CPU (a process with no GPU visible):
    the same steps, tokens and learning rates; the first loss (the same weights on the same tokens,
    before any update: float32 both, only the order of sums differs) equal within 1e-4; every
    later one within 1e-2, as rounding differences grow with each update (the CPU run itself is
    bit-for-bit the same at 1 and 2 threads: 10.336 falling to 6.061); and falling on both."""
    recipe = RECIPE.model_copy(update=dict(epochs=3, gradient_accumulation=2))
    torch.cuda.reset_peak_memory_stats()
    gpu = fine_tune(tiny_checkpoint, example_set, recipe, tmp_path / "gpu", name="gpu",
                    max_context=4096).record
    assert torch.cuda.max_memory_allocated() > 0, "trained on the GPU"
    (tmp_path / "examples.pkl").write_bytes(pickle.dumps(example_set))
    (tmp_path / "recipe.json").write_text(recipe.model_dump_json())
    done = subprocess.run([sys.executable, "-c", CPU_RUN, str(tmp_path / "examples.pkl"),
                           str(tmp_path / "recipe.json"), str(tiny_checkpoint), str(tmp_path / "cpu")],
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, capture_output=True, text=True,
                          timeout=command_timeout())
    assert done.returncode == 0, done.stderr[-3000:]
    cpu = json.loads(done.stdout.strip().splitlines()[-1])
    assert gpu["steps"] == cpu["steps"] >= 3
    assert (gpu["step_tokens"], gpu["learning_rates"]) == (cpu["step_tokens"], cpu["learning_rates"])
    assert gpu["losses"][0] == pytest.approx(cpu["losses"][0], rel=1e-4)
    assert gpu["losses"] == pytest.approx(cpu["losses"], rel=1e-2)
    assert gpu["losses"][-1] < gpu["losses"][0] and cpu["losses"][-1] < cpu["losses"][0]


# ----------------------------------------------------------------------------- NLL scoring

@pytest.fixture(scope="module")
def tiny_model(tiny_checkpoint):
    return load_checkpoint(tiny_checkpoint)


def test_conversation_nll_is_the_mean_nll_of_the_trained_tokens(tiny_model, demos) -> None:
    model, tokenizer = tiny_model
    messages = [m.to_dict() for m in demos[0].messages]
    start = [i for i, m in enumerate(messages) if m["role"] == "assistant"][-1]
    ids, mask = encode_conversation(tokenizer, messages)
    _, last_only = encode_conversation(tokenizer, messages, start)
    with torch.no_grad():
        logprobs = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), dim=-1)

    def by_hand(mask: list[bool]) -> float:
        return -sum(float(logprobs[t - 1, ids[t]]) for t in range(1, len(ids)) if mask[t]) / sum(mask[1:])

    scores = conversation_nll(model, tokenizer, [(messages, 0), (messages, start)], max_length=100_000)
    assert scores == pytest.approx([by_hand(mask), by_hand(last_only)], abs=1e-5)
    assert abs(scores[0] - scores[1]) > 1e-4  # the last turn alone is another set of tokens
    nothing, too_long = conversation_nll(model, tokenizer, [(messages, len(messages)), (messages, 0)],
                                         max_length=len(ids) - 1)
    assert nothing is None and too_long is None


def test_a_correction_the_model_would_not_write_scores_a_higher_nll(tiny_model, tiny_checkpoint,
                                                                    demos) -> None:
    """What the shift filter relies on: the model's own greedy turn is likelier than foreign text,
    so the filter as `intervention=rti` sets it, with the policy's own turn as the reference, keeps
    the first and drops the second."""
    model, tokenizer = tiny_model
    messages = [m.to_dict() for m in demos[0].messages]
    prompt = messages[:next(i for i, m in enumerate(messages) if m["role"] == "assistant")]
    ids = tokenizer.apply_chat_template(prompt, tools=openai_tools(TOOLS), add_generation_prompt=True,
                                        tokenize=True, return_dict=True)["input_ids"]
    with torch.no_grad():
        generated = model.generate(torch.tensor([list(ids)]), max_new_tokens=24, do_sample=False)
    own = tokenizer.decode(generated[0, len(ids):].tolist(), skip_special_tokens=True)
    noise = torch.randint(0, len(tokenizer), (24,), generator=torch.Generator().manual_seed(0))
    foreign = tokenizer.decode(noise.tolist(), skip_special_tokens=True)
    items = [([*prompt, {"role": "assistant", "content": text}], len(prompt)) for text in (own, foreign)]
    own_nll, foreign_nll = conversation_nll(model, tokenizer, items, max_length=100_000)
    assert own_nll + 1.0 < foreign_nll
    assert checkpoint_nll(tiny_checkpoint, items, 100_000) == pytest.approx([own_nll, foreign_nll], abs=1e-5)
    # the scorer in bf16 (backbone.dtype resolved so) measured 5.7437 / 10.1532 against fp32's
    # 5.7513 / 10.1620 (1.3e-3 apart, relatively): the same ranking, the same decisions
    in_bf16 = checkpoint_nll(tiny_checkpoint, items, 100_000, dtype="bfloat16")
    assert in_bf16 == pytest.approx([own_nll, foreign_nll], rel=2e-2)
    rti = defaults("intervention=rti").intervention
    decisions = filter_corrections([own_nll, foreign_nll], [own_nll], cap=rti.weight_cap,
                                   **rti.filter.model_dump())
    assert [d.kept for d in decisions] == [True, False]


# ----------------------------------------------------------------------------- the train stage

def stage_paths(root: Path, rows: list[dict], starting_policy: Path,
                overrides: list[str]) -> tuple[Params, Paths]:
    """Parameters, and the pipeline's paths under ``root`` holding the starting policy (the tiny
    model as demo_sft) and a training set of ``rows`` (TRAINING_SET)."""
    write_params(REPO / "conf", root / "params.yaml", ["experiment=smoke", *overrides])
    params = load_params(root / "params.yaml")
    paths = params.paths.under(root)
    if not paths.model("demo_sft").exists():
        shutil.copytree(starting_policy, paths.model("demo_sft"))
    with write_row_groups(paths.training_table, schemas.TRAINING_SET) as writer:
        if rows:
            writer.write(rows)
    return params, paths


def test_rft_trains_one_checkpoint_per_seed_and_evaluation_sees_them_as_one_model(
        demos, tiny_checkpoint, tmp_path) -> None:
    # the last trajectory stands for a kept correction: its own weight, loss on its last turn only
    last = [i for i, m in enumerate(demos[-1].messages) if m.role == "assistant"][-1]
    rows = [*map(training_row, demos[:-1]), training_row(demos[-1], "rti", 0.5, last)]
    params, paths = stage_paths(tmp_path, rows, tiny_checkpoint, ["train.seeds=2"])
    report = train(params, paths)
    metrics = report.metrics
    assert metrics["trained"] and metrics["seeds"] == 2 and sorted(metrics["by_seed"]) == ["seed-0", "seed-1"]
    assert metrics["examples"] == len(demos) and "2 seeds" in metrics["message"]
    assert metrics["by_source"] == {"policy": len(demos) - 1, "rti": 1}
    records = [read_training(paths.model("rft") / f"seed-{k}") for k in range(2)]
    assert records[0]["seed"] != records[1]["seed"] and records[0]["data_sha256"] == records[1]["data_sha256"]
    # what was trained on is the table's rows with their weights and masks, not the bare trajectories
    tokenizer = AutoTokenizer.from_pretrained(paths.model("rft") / "seed-0")
    assert records[0]["data_sha256"] == encode_trajectories(
        read_training_items(paths.training_table), tokenizer, max_length=params.backbone.max_context).sha256()
    assert records[0]["data_sha256"] != encode_trajectories(
        demos, tokenizer, max_length=params.backbone.max_context).sha256()
    assert records[0]["losses"] != records[1]["losses"]  # another seed, another order of the data
    assert sorted(p.name for p in paths.train_loss.iterdir()) == ["seed-0.tsv", "seed-1.tsv"]
    assert {row["seed"] for row in report.tables["loss"]} == {"seed-0", "seed-1"}
    models = checkpoint_models(["demo_sft", "rft"], paths.models, params.backbone)
    assert [(m.name, m.seed, m.key) for m in models] == [
        ("demo_sft", None, "demo_sft"), ("rft", 0, "rft.seed-0"), ("rft", 1, "rft.seed-1")]
    # a re-run with one seed leaves no checkpoint of the earlier seed behind
    train(*stage_paths(tmp_path, rows, tiny_checkpoint, ["train.seeds=1"]))
    assert sorted(p.name for p in paths.model("rft").iterdir()) == ["seed-0"]


def test_auto_trains_in_what_the_probe_chose_and_the_stage_records_it(demos, tiny_checkpoint, tmp_path,
                                                                      monkeypatch) -> None:
    """``backbone.dtype: auto`` with this machine's probe answering bf16 for training (its cache, set
    here, so the test does not depend on this CPU): the trainer autocasts, the checkpoint's manifest
    says so, and the stage's metrics and its W&B run's config (a real offline run) record what ran."""
    for name in ("WANDB_MODE", "WANDB_DIR", "WANDB_DISABLED", "DVC_EXP_NAME", "DVC_STAGE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    pretend_measured(tiny_checkpoint, "train", "bfloat16")
    params, paths = stage_paths(tmp_path, [training_row(t) for t in demos[:2]], tiny_checkpoint,
                                ["backbone.dtype=auto", "tracking=offline", "train.seeds=1"])
    report = train(params, paths)
    runtime = {"backend": "transformers", "engine": "transformers", "served": False, "dtype": "auto",
               "resolved_dtype": "bfloat16"}
    assert report.config == {"runtime": runtime} and report.record["runtime"] == runtime
    assert report.metrics["trained"]
    assert read_manifest(paths.model("rft") / "seed-0")["compute_dtype"] == "bfloat16"
    assert log_stage(params, "train", report, cwd=tmp_path).config["runtime"] == runtime


def test_rft_with_nothing_to_train_writes_one_untrained_copy_for_every_seed(demos, tiny_checkpoint,
                                                                         tmp_path) -> None:
    params, paths = stage_paths(tmp_path, [], tiny_checkpoint, ["train.seeds=3"])
    metrics = train(params, paths).metrics
    assert not metrics["trained"] and metrics["seeds"] == 1
    assert "one copy, not one per seed" in metrics["message"]
    assert sorted(p.name for p in paths.model("rft").iterdir()) == ["seed-0"]
