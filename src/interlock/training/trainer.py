"""The fine-tuning loop: packed rows, a weighted loss on assistant tokens only, ``accelerate``.

One loop serves the demonstration warm start and rejection-sampling fine-tuning. Choices that
matter for cost and for what is learnt:

- **assistant tokens only**: the model is called with ``logits_to_keep`` set to the positions
  whose next token is an assistant token, so the vocabulary projection (28M of SmolLM2's 135M
  parameters) and the cross-entropy run on those positions alone, and the ``[tokens, vocab]``
  logits of prompts and tool results are never made;
- **per-example weights**: each target token's loss is multiplied by its example's weight, and a
  step's loss is that weighted sum divided by the step's number of target tokens (not by its
  weight sum, which would cancel the weight of an example alone in its step): weights 1 reduce to
  the plain token mean, and an example of weight w pulls w times as hard as one of weight 1;
- **loss from a message on**: an example may carry loss on the assistant turns from some message
  on only (a rollout corrected from an intervention point learns the corrected turns, its
  original prefix is context; :func:`~interlock.training.examples.encode_conversation`);
- **padding-free**: rows pack whole examples (:mod:`interlock.training.batching`);
- **seeded**: weights of LoRA adapters, the row plan of every epoch, dropout;
- **bf16 autocast where it pays**: the weights, their gradients and the optimizer stay fp32; with
  ``compute_dtype`` bfloat16 (``backbone.dtype`` resolved for the ``train`` workload: ``auto``
  takes it where this machine measured it faster, :mod:`interlock.models.dtype`) the forward runs
  under ``torch.autocast`` in bf16, the loss in fp32. float32 computes without autocast, exactly as
  before it existed. float16 is refused: fp16 gradients need loss scaling, which this loop does not
  do. The checkpoint's manifest records the compute dtype (``compute_dtype``) beside its weights';
- **several processes**: the same function under ``accelerate launch`` (DDP, FSDP or DeepSpeed as
  configured with ``accelerate config``; gloo on CPUs). An optimizer step is the same rows whatever
  the number of processes, each process taking every n-th row of it, and its loss is normalised by
  the step's target tokens over all processes: the steps, their tokens and (up to the order of
  float sums) their losses and updates are one process's. Only the main process writes the
  checkpoint.

The result is a checkpoint in the project's form with ``training.parquet`` beside the manifest:
the data hash, example and token counts, steps and the loss of every step.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from interlock.core import schemas
from interlock.core.config import LoraConfig, Recipe
from interlock.core.errors import InterlockError
from interlock.core.io import dumps, read_rows
from interlock.core.seeds import stable_seed
from interlock.models.checkpoint import load_checkpoint, save_checkpoint, weights_sha256
from interlock.rollout.trajectory import report_bad_rows
from interlock.training.batching import PackedRow, pack, plan_rows
from interlock.training.examples import ExampleSet, encode_trajectories, read_training_items

TRAINING_FILE = "training.parquet"


@dataclass(frozen=True)
class TrainingResult:
    record: dict  # the row of training.parquet
    seconds: float
    tokens_per_second: float  # tokens the model processed (context included) per wall second


def step_plan(lengths: list[int], recipe: Recipe, epoch: int) -> list[list[list[int]]]:
    """The optimizer steps of one epoch, the same in every process: each a list of up to
    ``gradient_accumulation`` rows (example indices)."""
    rows = plan_rows(lengths, recipe.batch_tokens, stable_seed(recipe.seed, "rows", epoch))
    size = recipe.gradient_accumulation
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def process_rows(step: list[list[int]], rank: int, world: int) -> tuple[list[list[int]], float]:
    """Process ``rank``'s rows of a step (every ``world``-th) and the scale of their loss: a
    process the step has no row for runs its first row at scale 0, because every process must
    take part in each exchange of gradients."""
    mine = step[rank::world]
    return (mine, 1.0) if mine else (step[:1], 0.0)


def fine_tune(start: Path, data: ExampleSet, recipe: Recipe, out_dir: Path, *, name: str,
              max_context: int, compute_dtype: str = "float32") -> TrainingResult:
    """Train the checkpoint at ``start`` on ``data``, computing in ``compute_dtype`` (bfloat16:
    autocast over fp32 weights); write the result to ``out_dir``.

    With no examples the checkpoint is written unchanged (zero steps, and ``training.parquet``
    says so; its manifest has no compute dtype), so the pipeline can finish and report that
    nothing was learnt."""
    import torch
    from transformers import get_scheduler

    autocast_to = autocast_dtype(compute_dtype)  # refused before anything loads
    accelerator = launched_accelerator()
    world, rank = accelerator.num_processes, accelerator.process_index
    random.seed(recipe.seed)
    torch.manual_seed(recipe.seed)
    model, tokenizer = load_checkpoint(start)
    model.config.use_cache = False
    if recipe.lora is not None:
        model = _with_lora(model, recipe.lora)
    lengths = [len(e) for e in data.examples]
    plans = [step_plan(lengths, recipe, e) for e in range(recipe.epochs)] if lengths else []
    total_steps = sum(len(plan) for plan in plans)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=recipe.learning_rate,
                                  weight_decay=recipe.weight_decay)
    scheduler = get_scheduler("linear", optimizer, num_warmup_steps=recipe.warmup_steps,
                              num_training_steps=max(1, total_steps))
    model, optimizer = accelerator.prepare(model, optimizer)
    model.train()
    losses, step_tokens, rates = [], [], []
    started = time.perf_counter()
    seen_tokens = 0
    bar = tqdm(total=total_steps, desc=f"train {name}", unit="step", dynamic_ncols=True,
               disable=not accelerator.is_main_process)
    for epoch, plan in enumerate(plans):
        for step in plan:
            mine, scale = process_rows(step, rank, world)
            rows = [pack([data.examples[i] for i in row]) for row in mine]
            targets = sum(data.examples[i].targets for row in step for i in row)
            loss = _optimizer_step(model, rows, scale / max(1, targets), accelerator, recipe.max_grad_norm,
                                   autocast_to)
            tokens = sum(lengths[i] for row in step for i in row)
            rates.append(scheduler.get_last_lr()[0])
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss)
            step_tokens.append(tokens)
            seen_tokens += tokens
            bar.update(1)
            bar.set_postfix(epoch=epoch + 1, loss=f"{loss:.4f}")
    bar.close()
    seconds = time.perf_counter() - started
    accelerator.wait_for_everyone()
    record = {"name": name, "start": str(start), "start_sha256": weights_sha256(start),
              "data_sha256": data.sha256(), "examples": len(data.examples), "too_long": len(data.too_long),
              "nothing_to_learn": len(data.nothing_to_learn), "tokens": data.tokens,
              "trained_tokens": data.trained_tokens, "epochs": recipe.epochs if plans else 0,
              "steps": total_steps, "seed": recipe.seed, "recipe": dumps(recipe.model_dump()),
              "losses": [round(x, 6) for x in losses], "step_tokens": step_tokens,
              "learning_rates": [float(f"{x:.8g}") for x in rates], "processes": world}
    if accelerator.is_main_process:
        trained = accelerator.unwrap_model(model)
        if recipe.lora is not None:
            trained = trained.merge_and_unload()
        trained.config.use_cache = True  # off for training only; `generate` on the checkpoint needs it
        notes = (f"fine-tuned from {start} on {len(data.examples)} examples, {total_steps} steps"
                 if total_steps else f"untrained copy of {start}: no examples to train on")
        save_checkpoint(trained.eval(), tokenizer, out_dir, source="finetuned", origin=str(start),
                        origin_sha256=record["start_sha256"], max_context=max_context, name=name, notes=notes,
                        compute_dtype=compute_dtype if total_steps else None,
                        tables={TRAINING_FILE: ([record], schemas.TRAINING_MANIFEST)})
    accelerator.wait_for_everyone()
    return TrainingResult(record, seconds, seen_tokens / seconds if seconds and seen_tokens else 0.0)


def launched_accelerator():
    """The Accelerator of this process, on the CPU where there is no GPU (gloo between processes:
    accelerate takes CPU processes as one job only when told they are on the CPU). A process
    started as one of several (``WORLD_SIZE``, as ``torchrun`` and ``accelerate launch --multi_gpu``
    set it) that accelerate sees alone is refused: each would train a whole model and write it."""
    import torch
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    if launched_processes() == 1 and os.environ.get("ACCELERATE_USE_CPU") == "True" \
            and "MASTER_PORT" in os.environ:
        # what `accelerate launch --cpu --num_processes N` leaves: the port for N, one process started
        print("warning: accelerate launch --cpu starts one process whatever --num_processes says; this "
              "trains in one. For several CPU processes: accelerate launch --multi_gpu --num_processes N",
              file=sys.stderr, flush=True)
    check_one_job(accelerator.num_processes)
    return accelerator


def launched_processes() -> int:
    """How many processes the launcher started (``WORLD_SIZE``; 1 where none ran)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def check_one_job(seen: int) -> None:
    """Refuse a process launched as one of several that accelerate sees as ``seen`` processes
    (alone: it would train a whole model and write it)."""
    launched = launched_processes()
    if launched != seen:
        raise InterlockError(f"this process was launched as one of {launched}, but accelerate sees "
                             f"{seen}; on CPUs launch with `accelerate launch --multi_gpu "
                             f"--num_processes N` or `torchrun --nproc_per_node N` (accelerate's --cpu "
                             f"starts one process)", field="train.launcher")


def row_loss(model, row: PackedRow, device) -> object:
    """The weighted sum of the row's target-token cross-entropies (a scalar tensor)."""
    import torch.nn.functional as F

    out = model(input_ids=row.input_ids.to(device), position_ids=row.position_ids.to(device),
                logits_to_keep=row.targets.to(device), use_cache=False)
    token_loss = F.cross_entropy(out.logits[0].float(), row.labels.to(device), reduction="none")
    return (token_loss * row.weights.to(device)).sum()


def autocast_dtype(compute_dtype: str):
    """The torch dtype the forward autocasts to for ``compute_dtype``: None for float32 (no
    autocast), bf16 for bfloat16; float16 (or anything else) is a clear error."""
    import torch

    if compute_dtype == "float32":
        return None
    if compute_dtype == "bfloat16":
        return torch.bfloat16
    raise InterlockError(f"training computes in float32, or in bfloat16 autocast over float32 weights, "
                         f"not {compute_dtype} (float16 gradients need loss scaling, which the trainer "
                         f"does not do); set backbone.dtype to auto, bfloat16 or float32",
                         field="backbone.dtype")


def _optimizer_step(model, rows: list[PackedRow], scale: float, accelerator, max_grad_norm: float,
                    autocast_to) -> float:
    """Accumulate this process's rows' gradients, each row's weighted target-token loss times
    ``scale`` (one over the step's target tokens in all processes: the token count, not the weight
    sum, so an example's weight scales its gradient even when it is alone in a step), the forward
    under autocast to ``autocast_to`` (a torch dtype; None: no autocast). DDP averages the
    processes' gradients, so each backward is multiplied by their number to sum them instead.
    Returns the step's loss over all processes."""
    import torch

    world = accelerator.num_processes
    total = 0.0
    for index, row in enumerate(rows):
        last = index == len(rows) - 1
        with accelerator.no_sync(model) if not last and world > 1 else nullcontext():
            with torch.autocast(accelerator.device.type, dtype=autocast_to) if autocast_to else nullcontext():
                loss = row_loss(model, row, accelerator.device) * scale
            accelerator.backward(loss * world)
            total += float(loss.detach())
    accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
    if world > 1:
        total = float(accelerator.reduce(torch.tensor(total, device=accelerator.device), "sum"))
    if not math.isfinite(total):
        raise InterlockError("the training loss is not finite; lower the learning rate",
                             field="train.learning_rate")
    return total


def _with_lora(model, lora: LoraConfig):
    from peft import LoraConfig as PeftLora
    from peft import get_peft_model

    config = PeftLora(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                      target_modules=list(lora.target_modules), task_type="CAUSAL_LM")
    return get_peft_model(model, config)


def read_training(folder: Path | str) -> dict:
    """The training record of a fine-tuned checkpoint (``training.parquet``)."""
    path = Path(folder) / TRAINING_FILE
    if not path.exists():
        raise InterlockError(f"no {TRAINING_FILE}: not a fine-tuned checkpoint", file=str(path))
    return read_rows(path, schemas.TRAINING_MANIFEST)[0]


def fine_tune_on_trajectories(trajectories: Path, start: Path, out_dir: Path, recipe: Recipe, *, name: str,
                              max_context: int, compute_dtype: str) -> dict:
    """A fine-tuning stage: the table (a training set, or plain trajectories: weight 1, loss on
    every assistant turn) encoded with ``start``'s tokenizer, trained on in ``compute_dtype``,
    written to ``out_dir``; returns the stage's metrics (with the examples per source where the
    table has one). An empty table is not an error: the checkpoint is an untrained copy and the
    metrics say ``trained: false`` and why."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(start)
    data = encode_trajectories(read_training_items(trajectories), tokenizer, max_length=max_context)
    report_bad_rows(name, data.refused)
    result = fine_tune(start, data, recipe, out_dir, name=name, max_context=max_context,
                       compute_dtype=compute_dtype)
    record = result.record
    losses = record["losses"]
    trained = record["steps"] > 0
    message = (f"trained {name} on {record['examples']} trajectories ({record['trained_tokens']} of "
               f"{record['tokens']} tokens carry loss), {record['steps']} steps" if trained else
               f"nothing to train {name} on: {trajectories} holds no usable trajectory; {out_dir} is an "
               f"untrained copy of {start}")
    return {"trained": trained, "message": message,
            **{k: record[k] for k in ("examples", "too_long", "nothing_to_learn", "tokens", "trained_tokens",
                                      "epochs", "steps")},
            "refused": data.refused, "assistant_turns": data.turns.summary(),
            "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
            "mean_last_epoch_loss": _last_epoch_mean(losses, record["epochs"]),
            "seconds": round(result.seconds, 2), "tokens_per_second": round(result.tokens_per_second, 1),
            **({"by_source": data.by_source} if data.by_source else {})}


def loss_curve(folder: Path | str) -> list[dict]:
    """Step, loss and learning rate of a fine-tuned checkpoint, for a plot."""
    record = read_training(folder)
    return [{"step": step + 1, "loss": loss, "learning_rate": rate}
            for step, (loss, rate) in enumerate(zip(record["losses"], record["learning_rates"], strict=True))]


def _last_epoch_mean(losses: list[float], epochs: int) -> float | None:
    if not losses or not epochs:
        return None
    tail = losses[-max(1, len(losses) // epochs):]
    return round(sum(tail) / len(tail), 6)
