"""Training throughput benchmark: the project's fine-tuning (padding-free packed rows under a token
budget, loss computed only at assistant-token positions) against a plain padded
``transformers.Trainer`` and, with TRL installed, TRL's ``SFTTrainer`` with assistant-only loss,
unpacked and packed; same model, same examples, same learning rate, side by side in one run.

Both sides train one epoch on the same examples: trajectories encoded once with
:func:`interlock.training.examples.encode_trajectories`, so they see identical token ids and the
same assistant-only targets. The baseline is the recipe a user would write: ``Trainer`` with
``per_device_train_batch_size`` examples per step in random order, a collator that pads to the
longest example of the batch (``attention_mask``; labels -100 on padding and on non-assistant
tokens), and the model's own ``labels`` loss over full logits; fp32, no gradient checkpointing.
The project side is :func:`interlock.training.trainer.fine_tune` itself with its default batching
(``batch_tokens`` of ``conf/train/full.yaml``). Not a test: it prints a table and checks the
target of the training issue (the project at least 1.3x the baseline's tokens per second).

The TRL sides train on the same trajectories as rows of the training-set export
(:func:`interlock.export.dataset.dataset_row`: conversational ``messages`` and ``tools``, cut
after the last assistant turn as the project's examples are), tokenized by TRL with the
checkpoint's chat template and ``assistant_only_loss=True``: unpacked (batches of
``--batch-size``, padded to the longest) and packed (``packing=True``, best-fit decreasing,
padding-free rows of ``max_length`` = each ``--batch-tokens``, one row a step, as the project).
Before any side is timed, the project and both TRL sides each take one optimizer step on the same
two examples from the same weights, and their losses must agree within :data:`LOSS_TOLERANCE`:
same tokens, same targets, same normalisation (a step's summed target-token loss over its target
count), so the sides are compared on the same objective.

    .venv/bin/python perf/training_throughput.py [--trajectories PATH]
        [--checkpoint data/models/base | --tiny] [--examples 8] [--batch-size 4]
        [--batch-tokens 2048 [4096 ...]] [--rounds 1] [--json PATH]

Tokens per second counts *real example tokens* (padding excluded) over the wall seconds of the
training loop (from the first optimizer step to the end of the last; model loading, the
Trainer's setup and the project's checkpoint writing are outside the clock). Before any side is
timed, one untimed forward and backward pass on a short slice warms the kernels. With
``--rounds 2`` the sides run again in the opposite order (A B B A), so a machine whose load
drifts slows both alike; the figures are totals over the rounds. Peak RSS is the process's while
a side runs, after memory earlier sides freed was handed back. The baseline is the hungry one:
full fp32 logits of every padded position (about 22 GiB at the default batch of 4 on SmolLM2-135M
at the default task size; a warning says when less is available).

On a CPU, packing two examples into one row costs more than it saves: transformers attends over a
packed row through an explicit block-diagonal mask, and the CPU attention kernel computes the
whole square under any explicit mask (only ``is_causal`` skips blocks). Try
``--batch-tokens 2048 4096`` to see both budgets against the baseline.

Without ``--trajectories`` the examples come from ``data/accepted/trajectories.parquet`` when it
holds at least ``--examples`` rows, else from ``data/demos/trajectories.parquet`` (the oracle
demonstrations, same format), else from oracle demonstrations of the admitted ``demo`` pool
written into a temporary folder (needs the ``review``, ``packs`` and ``graphs`` artifacts);
the run says which it used.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 1.3
#: how far the sides' first-step losses may differ (relative): fp32 sums of the same ~10^3 token
#: losses through other kernels (a padded batch under an attention mask, a packed row under a
#: block-diagonal one, one row alone) differ by ~1e-6, and the project logs its loss to 6 decimals;
#: a loss mask one token off (token losses spread over nats), or another normaliser, moves it ~1e-3
LOSS_TOLERANCE = 1e-4


@dataclass
class Side:
    """One way of training, summed over the rounds it ran."""

    name: str
    seconds: float = 0.0
    tokens: int = 0  # real example tokens the model processed
    computed_tokens: int = 0  # token positions the model ran (padding included)
    logit_positions: int = 0  # positions that went through the vocabulary projection
    steps: int = 0
    peak_rss_mib: float = 0.0
    round_seconds: list[float] = field(default_factory=list)
    rows: list[list[int]] = field(default_factory=list)  # example lengths per packed row (project)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def padding_fraction(self) -> float:
        return 1 - self.tokens / self.computed_tokens if self.computed_tokens else 0.0

    def report(self) -> dict:
        return {"seconds": self.seconds, "tokens": self.tokens, "computed_tokens": self.computed_tokens,
                "logit_positions": self.logit_positions, "steps": self.steps,
                "tokens_per_second": self.tokens_per_second, "padding_fraction": self.padding_fraction,
                "peak_rss_mib": self.peak_rss_mib, "round_seconds": self.round_seconds}


class PeakRss:
    """The process's peak resident memory while the block runs (sampled every 50 ms)."""

    def __init__(self) -> None:
        import psutil

        self._process = psutil.Process()
        self._stop = threading.Event()
        self.peak = 0

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._process.memory_info().rss)
            self._stop.wait(0.05)

    def __enter__(self) -> PeakRss:
        release_memory()
        self.peak = self._process.memory_info().rss
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mib(self) -> float:
        return self.peak / 2**20


def release_memory() -> None:
    """Hand what earlier sides freed back to the system, so each side's peak is its own."""
    import contextlib
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL("libc.so.6").malloc_trim(0)


# ----------------------------------------------------------------------------- the examples

def choose_trajectories(data: Path | None, minimum: int, workdir: Path) -> tuple[Path, str]:
    """The accepted set when it holds ``minimum`` rows, else the demonstrations (made on the fly
    into ``workdir`` when the demos artifact is not there); ``data``: the artifacts' folder (None:
    the repository's)."""
    import pyarrow.parquet as pq

    from interlock.analysis.artifacts import repository_paths

    paths = repository_paths(ROOT, data=data)
    for path, what in ((paths.accepted_table, "accepted trajectories"),
                       (paths.demos_table, "oracle demonstrations")):
        if path.exists():
            rows = pq.ParquetFile(path).metadata.num_rows
            if rows >= minimum:
                return path, f"{what}, {path} ({rows} rows)"
            print(f"{path}: {rows} rows, fewer than {minimum}; not used", flush=True)
    from interlock.rollout.runs import write_demonstrations
    from interlock.synthesis.tasks import admitted_tasks, load_domains

    out = workdir / "demos.parquet"
    tasks = admitted_tasks(paths, load_domains(paths.domains), "demo")
    write_demonstrations(tasks, out, seed=1, workdir=workdir / "episodes")
    return out, f"oracle demonstrations of the admitted demo pool of {paths.data}, written to {out}"


def load_examples(trajectories: Path, checkpoint: Path, count: int, seed: int,
                  max_length: int) -> tuple[list, list[dict]]:
    """``count`` examples drawn (seeded) from the table, encoded with the checkpoint's tokenizer,
    and each one's conversation as TRL takes it (:func:`conversation`)."""
    from transformers import AutoTokenizer

    from interlock.training.examples import TrainingItem, encode_trajectories, read_training_items

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    items = [i for i in read_training_items(trajectories) if isinstance(i, TrainingItem)]
    trajectories_by_id = {i.trajectory.rollout_id: i.trajectory for i in items}
    encoded = encode_trajectories(trajectories_by_id.values(), tokenizer, max_length=max_length)
    if len(encoded.examples) < count:
        raise SystemExit(f"{trajectories}: {len(encoded.examples)} usable examples, fewer than {count} "
                         f"({len(encoded.too_long)} too long, {len(encoded.nothing_to_learn)} without an "
                         "assistant token)")
    examples = random.Random(seed).sample(encoded.examples, count)
    return examples, [conversation(trajectories_by_id[e.example_id]) for e in examples]


def conversation(trajectory) -> dict:
    """A trajectory as a row of the training-set export, cut after its last assistant turn (what
    the project's example of it holds: trailing tool results teach nothing)."""
    from interlock.export.dataset import dataset_row
    from interlock.training.examples import TrainingItem

    row = dataset_row(TrainingItem(trajectory))
    last = max(i for i, m in enumerate(row["messages"]) if m["role"] == "assistant")
    return {"messages": row["messages"][:last + 1], "tools": row["tools"]}


# ----------------------------------------------------------------------------- the sides

def warm_up(checkpoint: Path, examples: list, tokens: int = 256) -> None:
    """One untimed forward and backward pass on a short slice (one-off kernel and thread-pool costs)."""
    import torch

    from interlock.models.checkpoint import load_checkpoint

    model, _ = load_checkpoint(checkpoint)
    model.train()
    ids = torch.tensor([examples[0].input_ids[:tokens]])
    model(input_ids=ids, labels=ids, use_cache=False).loss.backward()


def trainer_arguments(workdir: Path, *, batch_size: int, learning_rate: float, warmup_steps: int,
                      weight_decay: float, max_grad_norm: float, seed: int) -> dict:
    """What the ``Trainer`` sides share: the project's recipe, fp32, no checkpoints, no logging."""
    import torch

    return {"output_dir": str(workdir), "per_device_train_batch_size": batch_size, "num_train_epochs": 1,
            "learning_rate": learning_rate, "lr_scheduler_type": "linear", "warmup_steps": warmup_steps,
            "weight_decay": weight_decay, "max_grad_norm": max_grad_norm, "seed": seed, "data_seed": seed,
            "gradient_checkpointing": False, "bf16": False, "fp16": False, "save_strategy": "no",
            "eval_strategy": "no", "logging_strategy": "no", "report_to": "none", "disable_tqdm": True,
            "dataloader_num_workers": 0, "dataloader_pin_memory": torch.cuda.is_available()}


def clock():
    """A ``Trainer`` callback timing the training loop (``seconds``), setup excluded."""
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()

        def on_train_end(self, args, state, control, **kwargs):
            self.seconds = time.perf_counter() - self.started

    return Clock()


def add_round(side: Side, seconds: float, steps: int, batches: list[tuple[int, int, int]],
              peak_mib: float) -> None:
    """Add a round to a side: its seconds, steps, peak memory and, per batch, (real tokens, computed
    positions, logit rows)."""
    side.seconds += seconds
    side.round_seconds.append(seconds)
    side.tokens += sum(real for real, _, _ in batches)
    side.computed_tokens += sum(computed for _, computed, _ in batches)
    side.logit_positions += sum(logits for _, _, logits in batches)
    side.steps += steps
    side.peak_rss_mib = max(side.peak_rss_mib, peak_mib)


def run_baseline(side: Side, checkpoint: Path, examples: list, *, batch_size: int, workdir: Path,
                 **common) -> None:
    """The plain padded ``Trainer`` recipe, one epoch."""
    import torch
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    model.config.use_cache = False
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else model.config.eos_token_id
    rows = [{"input_ids": list(e.input_ids),
             "labels": [t if m else -100 for t, m in zip(e.input_ids, e.loss_mask, strict=True)]}
            for e in examples]
    batches: list[tuple[int, int, int]] = []  # (real tokens, padded tokens, logit rows) of every batch

    def collate(features: list[dict]) -> dict:
        width = max(len(f["input_ids"]) for f in features)
        ids = torch.full((len(features), width), pad_id, dtype=torch.long)
        labels = torch.full((len(features), width), -100, dtype=torch.long)
        mask = torch.zeros((len(features), width), dtype=torch.long)
        for i, f in enumerate(features):
            n = len(f["input_ids"])
            ids[i, :n] = torch.tensor(f["input_ids"])
            labels[i, :n] = torch.tensor(f["labels"])
            mask[i, :n] = 1
        batches.append((int(mask.sum()), ids.numel(), ids.numel()))  # the model's loss: full logits
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    timer = clock()
    arguments = TrainingArguments(**trainer_arguments(workdir / "trainer", batch_size=batch_size, **common),
                                  remove_unused_columns=False)
    trainer = Trainer(model=model, args=arguments, train_dataset=rows, data_collator=collate,
                      callbacks=[timer])
    with PeakRss() as rss:
        output = trainer.train()
    add_round(side, timer.seconds, output.global_step, batches, rss.mib)
    del trainer, model


def sft_trainer(checkpoint: Path, conversations: list[dict], workdir: Path, *, packed_tokens: int | None,
                batch_size: int, max_steps: int = -1, **common):
    """TRL's ``SFTTrainer`` with assistant-only loss on the conversations: unpacked (padded batches
    of ``batch_size``) where ``packed_tokens`` is None, else packed (best-fit decreasing, padding-
    free rows of ``packed_tokens``, one a step); ``max_steps`` > 0 logs each step's loss."""
    import torch
    from datasets import Dataset, Features, Json, List
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    data = Dataset.from_list(conversations,
                             features=Features({"messages": List(Json()), "tools": List(Json())}))
    arguments = trainer_arguments(workdir, batch_size=1 if packed_tokens else batch_size, **common)
    arguments.update(assistant_only_loss=True, max_steps=max_steps, packing=bool(packed_tokens),
                     max_length=packed_tokens)
    if packed_tokens:
        arguments.update(packing_strategy="bfd", shuffle_dataset=False)
    if max_steps > 0:
        arguments.update(logging_strategy="steps", logging_steps=1)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    model.config.use_cache = False
    return SFTTrainer(model=model, args=SFTConfig(**arguments), train_dataset=data,
                      processing_class=AutoTokenizer.from_pretrained(checkpoint))


def run_trl(side: Side, checkpoint: Path, conversations: list[dict], *, packed_tokens: int | None,
            batch_size: int, workdir: Path, **common) -> None:
    """TRL's ``SFTTrainer`` (:func:`sft_trainer`), one epoch."""
    trainer = sft_trainer(checkpoint, conversations, workdir / "trl", packed_tokens=packed_tokens,
                          batch_size=batch_size, **common)
    batches: list[tuple[int, int, int]] = []
    collate = trainer.data_collator

    def counting(features: list[dict]) -> dict:
        batch = collate(features)
        ids, labels = batch["input_ids"], batch["labels"]
        real = int(batch["attention_mask"].sum()) if "attention_mask" in batch else ids.numel()
        # TRL's fused LM head projects only the positions whose next token is a target
        batches.append((real, ids.numel(), int((labels[:, 1:] != -100).sum())))
        return batch

    trainer.data_collator = counting
    timer = clock()
    trainer.add_callback(timer)
    with PeakRss() as rss:
        output = trainer.train()
    add_round(side, timer.seconds, output.global_step, batches, rss.mib)
    del trainer


def fine_tune_examples(checkpoint: Path, examples: list, out: Path, *, batch_tokens: int,
                       gradient_accumulation: int, max_context: int, **common):
    """:func:`interlock.training.trainer.fine_tune` on ``examples``, one epoch under the given token
    budget; its result and the rows (example indices) it trained on."""
    from interlock.core.config import Recipe
    from interlock.training.examples import ExampleSet
    from interlock.training.trainer import fine_tune, step_plan

    recipe = Recipe(epochs=1, batch_tokens=batch_tokens, gradient_accumulation=gradient_accumulation,
                    lora=None, **common)  # full fine-tuning, as the baseline
    rows = [row for step in step_plan([len(e) for e in examples], recipe, 0) for row in step]
    result = fine_tune(checkpoint, ExampleSet(list(examples), [], []), recipe, out, name="benchmark",
                       max_context=max_context)
    return result, rows


def run_project(side: Side, checkpoint: Path, examples: list, *, batch_tokens: int, workdir: Path,
                **options) -> None:
    """The project's loop with the given token budget, one epoch."""
    with PeakRss() as rss:
        result, rows = fine_tune_examples(checkpoint, examples, workdir / f"project-{batch_tokens}",
                                          batch_tokens=batch_tokens, **options)
    trained = result.record
    tokens = sum(trained["step_tokens"])  # no padding; one logit row per target token
    add_round(side, result.seconds, trained["steps"], [(tokens, tokens, trained["trained_tokens"])], rss.mib)
    side.rows = [[len(examples[i]) for i in row] for row in rows]


def baseline_memory(checkpoint: Path, positions: int) -> float:
    """Rough bytes a padded batch of ``positions`` needs in training (fp32): the weights with
    their gradients and AdamW state, fp32 logits with their softmax and gradient copies, and about
    26 fp32 activations of the hidden size per layer (fitted to SmolLM2-135M: 20 GiB by this rule
    at 4 x 2,029 positions, 21.9-22.4 GiB peak RSS measured with the interpreter; 10.1 and 9.7 GiB at
    2 x 1,820)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(checkpoint)
    hidden, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
    parameters = vocab * hidden + layers * (4 * hidden * hidden + 3 * hidden * config.intermediate_size)
    return 4 * 4 * parameters + positions * (3 * 4 * vocab + 26 * 4 * layers * hidden)


def available_memory() -> float:
    import psutil

    return psutil.virtual_memory().available


# ----------------------------------------------------------------------------- the comparison

def first_step_losses(checkpoint: Path, examples: list, conversations: list[dict], workdir: Path, *,
                      max_context: int, **common) -> dict[str, float]:
    """The loss of one optimizer step of the project, TRL unpacked and TRL packed, each on the same
    two examples (the two shortest) from the same weights; refused unless they agree."""
    pair = sorted(range(len(examples)), key=lambda i: len(examples[i]))[:2]
    chosen, talks = [examples[i] for i in pair], [conversations[i] for i in pair]
    tokens = sum(len(e) for e in chosen)
    project, _ = fine_tune_examples(checkpoint, chosen, workdir / "project", batch_tokens=tokens,
                                    gradient_accumulation=1, max_context=max_context, **common)
    losses = {"fine_tune": project.record["losses"][0]}
    for name, packed in (("TRL, padded", None), ("TRL, packed", tokens)):
        trainer = sft_trainer(checkpoint, talks, workdir / name.replace(", ", "-"), packed_tokens=packed,
                              batch_size=len(talks), max_steps=1, **common)
        trainer.train()
        losses[name] = next(entry["loss"] for entry in trainer.state.log_history if "loss" in entry)
    spread = (max(losses.values()) - min(losses.values())) / abs(losses["fine_tune"])
    if spread > LOSS_TOLERANCE:
        raise RuntimeError(f"the sides' first-step losses differ by {spread:.2e} (relative), more than "
                           f"{LOSS_TOLERANCE:g}: {losses}; they do not train on the same objective")
    return losses


def compare(checkpoint: Path, examples: list, *, conversations: list[dict] | None = None,
            batch_size: int = 4, batch_tokens: tuple[int, ...] = (2048,), gradient_accumulation: int = 1,
            learning_rate: float = 5e-5, warmup_steps: int = 0, weight_decay: float = 0.0,
            max_grad_norm: float = 1.0, seed: int = 0, rounds: int = 1, max_context: int = 8192,
            workdir: Path | None = None, log=print) -> dict:
    """Train the baseline, the project (one side per token budget) and, given the examples'
    ``conversations`` and TRL installed, TRL's SFTTrainer (unpacked, and packed at each budget) on
    ``examples``, one epoch each, ``rounds`` times (alternating the order); tokens per second of
    each and the ratios."""
    import importlib.util

    import torch

    common = {"learning_rate": learning_rate, "warmup_steps": warmup_steps, "weight_decay": weight_decay,
              "max_grad_norm": max_grad_norm, "seed": seed}
    with_trl = conversations is not None and importlib.util.find_spec("trl") is not None
    with tempfile.TemporaryDirectory(prefix="interlock-train-bench-") as tmp:
        work = Path(workdir or tmp)
        warm_up(checkpoint, examples)
        losses = (first_step_losses(checkpoint, examples, conversations, work / "first-step",
                                    max_context=max_context, **common) if with_trl else {})
        if losses:
            log("first-step loss on the same two examples: "
                + ", ".join(f"{name} {loss:.6f}" for name, loss in losses.items()))
        baseline = Side(f"Trainer, padded, batch {batch_size}")
        projects = [Side(f"fine_tune, packed, {budget} tokens") for budget in batch_tokens]
        # TRL's rows hold at least the longest example (best-fit decreasing truncates what overflows)
        packed = [max(budget, *(len(e) for e in examples)) for budget in batch_tokens]
        trls = [Side(f"TRL SFTTrainer, padded, batch {batch_size}"),
                *(Side(f"TRL SFTTrainer, packed, {budget} tokens") for budget in packed)]
        trls = trls if with_trl else []
        runs = [(baseline, lambda s: run_baseline(s, checkpoint, examples, batch_size=batch_size,
                                                  workdir=work, **common))]
        for side, budget in zip(projects, batch_tokens, strict=True):
            runs.append((side, lambda s, b=budget: run_project(
                s, checkpoint, examples, batch_tokens=b, gradient_accumulation=gradient_accumulation,
                workdir=work, max_context=max_context, **common)))
        for side, budget in zip(trls, (None, *packed), strict=False):
            runs.append((side, lambda s, b=budget: run_trl(s, checkpoint, conversations, packed_tokens=b,
                                                           batch_size=batch_size, workdir=work, **common)))
        for index in range(rounds):
            for side, run in (runs if index % 2 == 0 else runs[::-1]):
                run(side)
                log(f"round {index + 1}/{rounds}: {side.name}: {side.round_seconds[-1]:.1f} s, "
                    f"{side.steps} steps so far")
    for side in [*projects, *trls]:
        if side.tokens != baseline.tokens:
            raise RuntimeError(f"{side.name} saw {side.tokens} real tokens, the baseline {baseline.tokens}")

    def report(side: Side, **extra) -> dict:
        rate = baseline.tokens_per_second
        return {"name": side.name, **extra, **side.report(),
                "ratio": side.tokens_per_second / rate if rate else 0.0}

    return {"examples": len(examples), "rounds": rounds, "threads": torch.get_num_threads(),
            "first_step_losses": losses, "baseline": {"name": baseline.name, **baseline.report()},
            "project": [report(s, batch_tokens=b, rows=s.rows)
                        for s, b in zip(projects, batch_tokens, strict=True)],
            "trl": [report(s, packed_tokens=b, batch_tokens=t)
                    for s, b, t in zip(trls, (None, *packed), (None, *batch_tokens), strict=False)]}


def print_table(result: dict) -> None:
    sides = [result["baseline"], *result["project"], *result["trl"]]
    print(f"\n{'':38} {'seconds':>8} {'steps':>6} {'real tokens':>12} {'computed':>9} {'padding':>8} "
          f"{'logit rows':>11} {'tokens/s':>9} {'peak RSS MiB':>13} {'ratio':>6}")
    for side in sides:
        ratio = side.get("ratio", 1.0)
        print(f"{side['name']:38} {side['seconds']:8.1f} {side['steps']:6d} {side['tokens']:12,d} "
              f"{side['computed_tokens']:9,d} {side['padding_fraction']:8.1%} {side['logit_positions']:11,d} "
              f"{side['tokens_per_second']:9.1f} {side['peak_rss_mib']:13.0f} {ratio:5.2f}x")
    if result["rounds"] > 1:
        for side in sides:
            print(f"{side['name']}: seconds per round {', '.join(f'{s:.1f}' for s in side['round_seconds'])}")
    for side in result["project"]:
        shapes = ", ".join("+".join(str(n) for n in row) for row in side["rows"])
        print(f"{side['name']}: rows (example lengths) {shapes}")


def main(argv: list[str] | None = None) -> int:
    from interlock.core.config import Params, compose_params

    train = Params.model_validate(compose_params(ROOT / "conf")).train
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None,
                        help="the artifacts' folder (default: the repository's)")
    parser.add_argument("--trajectories", type=Path,
                        help="a TRAJECTORIES table (default: see the module doc)")
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="the model every side trains (default: the run's base checkpoint)")
    parser.add_argument("--tiny", action="store_true",
                        help="train the tiny random test backbone instead, built in seconds from the run's "
                             "admitted demo tasks: a smoke-size run, for a machine that is busy")
    parser.add_argument("--examples", type=int, default=8, help="examples each side trains on (one epoch)")
    parser.add_argument("--batch-size", type=int, default=4,
                        help="the padded sides' examples per step (the baseline, TRL unpacked)")
    parser.add_argument("--batch-tokens", type=int, nargs="+", default=[train.batch_tokens],
                        help="the token budget per packed row (the project, TRL packed); several values run "
                             "several sides of each (default: the train config's)")
    parser.add_argument("--learning-rate", type=float, default=train.rft.learning_rate)
    parser.add_argument("--rounds", type=int, default=1, help="repeat the sides, alternating the order")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="interlock-train-bench-") as tmp:
        return run(args, train, Path(tmp))


def tiny_checkpoint(data: Path | None, workdir: Path) -> Path:
    """The tiny test backbone (:mod:`interlock.models.tiny`), its tokenizer trained on the text of
    the run's admitted demo tasks."""
    from interlock.analysis.artifacts import repository_paths
    from interlock.models.tiny import build_tiny, pack_texts
    from interlock.synthesis.tasks import admitted_tasks, load_domains

    paths = repository_paths(ROOT, data=data)
    packs = [context.pack for context in admitted_tasks(paths, load_domains(paths.domains), "demo")]
    return build_tiny(workdir / "tiny", pack_texts(packs), seed=7, max_context=32768)


def run(args: argparse.Namespace, train, tmp: Path) -> int:
    """The benchmark the command line asks for; 0 if the project meets the speed-up target."""
    import torch
    from transformers import AutoConfig

    from interlock.analysis.artifacts import repository_paths

    if args.tiny:
        args.checkpoint = tiny_checkpoint(args.data, tmp)
    args.checkpoint = args.checkpoint or repository_paths(ROOT, data=args.data).base_model
    max_context = AutoConfig.from_pretrained(args.checkpoint).max_position_embeddings
    if args.trajectories:
        source, described = args.trajectories, f"{args.trajectories} (given)"
    else:
        source, described = choose_trajectories(args.data, args.examples, tmp)
    examples, conversations = load_examples(source, args.checkpoint, args.examples, args.seed, max_context)
    lengths = sorted(len(e) for e in examples)
    print(f"examples: {described}; {len(examples)} drawn, {sum(lengths):,} tokens "
          f"({sum(e.trained_tokens for e in examples):,} carry loss), lengths {lengths[0]}-{lengths[-1]}\n"
          f"checkpoint {args.checkpoint}; {torch.get_num_threads()} threads; learning rate "
          f"{args.learning_rate:g}; baseline batch {args.batch_size}; project batch_tokens "
          f"{' '.join(map(str, args.batch_tokens))}", flush=True)
    need, have = baseline_memory(args.checkpoint, args.batch_size * lengths[-1]), available_memory()
    if have < need:
        print(f"warning: the baseline's batch may need about {need / 2**30:.0f} GiB (full logits and the "
              f"activations of {args.batch_size} x {lengths[-1]} positions); {have / 2**30:.0f} GiB is "
              "available: lower --batch-size if it is killed", flush=True)
    result = compare(args.checkpoint, examples, conversations=conversations, batch_size=args.batch_size,
                     batch_tokens=args.batch_tokens,
                     gradient_accumulation=train.gradient_accumulation, learning_rate=args.learning_rate,
                     warmup_steps=train.warmup_steps, weight_decay=train.weight_decay,
                     max_grad_norm=train.max_grad_norm, seed=args.seed, rounds=args.rounds,
                     max_context=max_context)
    result["trajectories"] = described
    print_table(result)
    headline = result["project"][0]
    print(f"\nreal tokens per side: {result['baseline']['tokens']:,} (identical); baseline padding "
          f"{result['baseline']['padding_fraction']:.1%} of the tokens it computed")
    for side in result["project"]:
        print(f"{side['name']}: {side['ratio']:.2f}x the baseline's tokens/s")
    if not result["trl"]:
        print("TRL is not installed: no TRL sides (pip install -c constraints.txt -e '.[dev]')")
    for side in result["trl"]:
        match = next((p for p in result["project"] if p["batch_tokens"] == side["batch_tokens"]), headline)
        print(f"{match['name']}: {match['tokens_per_second'] / side['tokens_per_second']:.2f}x the tokens/s "
              f"of {side['name']}")
    ok = headline["ratio"] >= TARGET_RATIO
    print(f"speed-up at batch_tokens {headline['batch_tokens']} (project tokens/s / baseline tokens/s): "
          f"{headline['ratio']:.2f}x (target >= {TARGET_RATIO}x): {'ok' if ok else 'BELOW TARGET'}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
