"""The dtype a model computes in, chosen by measuring this machine rather than believing a rule.

Whether bf16 pays on a CPU depends on the CPU: one 2-core machine of this project's class ran
bf16 about 100x slower than fp32, another (AMX) 5-20x faster, a third (AVX512-BF16, no AMX)
faster on bare matrix products and yet 0.6-0.7x as fast end to end on generation (the benchmark
in docs/measurements.md): what decides is the whole model's step, attention over the KV cache
and the small operations included, not one product. ``backbone.dtype: auto`` therefore runs the
checkpoint's own architecture (its ``config.json``; random weights, :data:`PROBE_LAYERS` of its
layers, its full vocabulary) in both dtypes and takes bf16 only where it is faster by a margin:
for ``generate``, a turn of the rollout engine (a prompt prefilled, then decode steps of a batch
of rows over a long KV cache); for ``train``, a packed row forward and backward under autocast
over fp32 weights, as the trainer runs it. On a GPU, ``auto`` is bf16 where the device supports it.

The probe takes a few seconds and its answer is kept per machine (CPU model and flags, torch
version and thread count, the probed architecture) in ``$XDG_CACHE_HOME/interlock/dtype-probe.json``,
so every stage on one machine resolves ``auto`` the same way. Everything that runs a model
resolves it through :func:`interlock.models.backends.model_runtime`: the transformers and vllm
backends (and the intervention scorer) when they load, for ``generate``; the trainer for
``train``, where bf16 means autocast over fp32 weights (:mod:`interlock.training.trainer`). The
record that function returns (backend, configured and resolved dtype) goes into the metrics and
the W&B config of every stage that runs a model, and training's compute dtype into the
checkpoint's manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from interlock.core.errors import InterlockError
from interlock.core.io import atomic_output

DTYPES = ("float32", "bfloat16", "float16")
WORKLOADS = ("generate", "train")
#: bf16 is taken only when it is at least this much faster (timing noise must not flip it)
MARGIN = 1.15
#: layers of the checkpoint's architecture the probe builds: enough that the blocks, not the
#: vocabulary's projection alone, weigh in; few enough that the probe takes seconds
PROBE_LAYERS = 4
#: a rollout turn as the probe times it, per row: prompt tokens prefilled (in chunks of
#: PREFILL_TOKENS, one row at a time as the engine prefills), tokens decoded (DECODE_ROWS rows
#: a step, each over a KV cache of CACHE_TOKENS)
TURN_PROMPT_TOKENS, TURN_NEW_TOKENS = 256, 64
PREFILL_TOKENS, DECODE_ROWS, CACHE_TOKENS = 128, 16, 1024
#: tokens of the packed row the training probe runs forward and backward
TRAIN_TOKENS = 256
#: a step is not called again once its timed calls have taken this many times the budget (or
#: the other dtype's seconds per unit so far, where larger): a dtype that slow has been measured
#: slower (bf16 ran about 100x slower than fp32 on one such machine)
GIVE_UP = 8
#: SmolLM2-135M's architecture, probed where no checkpoint is named
DEFAULT_ARCHITECTURE = {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
                        "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
                        "num_hidden_layers": 30}


@dataclass(frozen=True)
class Probe:
    """Seconds per unit of one workload (a rollout turn per row; a training row) in each dtype,
    and what ``auto`` made of them."""

    workload: str
    float32_s: float
    bfloat16_s: float
    chosen: str

    @property
    def speedup(self) -> float:
        """How many times faster bf16 ran than fp32 (below 1: slower)."""
        return self.float32_s / self.bfloat16_s


def cache_file() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "interlock" / "dtype-probe.json"


def probe_architecture(config: dict) -> dict:
    """The architecture the probe builds from a checkpoint's ``config.json`` content: the same,
    cut to :data:`PROBE_LAYERS` layers, without what only names or initialises it."""
    kept = {k: v for k, v in config.items()
            if k not in ("_name_or_path", "architectures", "transformers_version", "torch_dtype", "dtype")}
    return kept | {"num_hidden_layers": min(int(config.get("num_hidden_layers", PROBE_LAYERS)), PROBE_LAYERS)}


def machine_key(architecture: dict) -> str:
    """What the probe's answer depends on: the CPU, torch, its threads and the probed model."""
    import torch

    cpu = platform.processor()
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        cpu = next((line for line in info.splitlines() if line.startswith("model name")), cpu)
        cpu += next((line for line in info.splitlines() if line.startswith("flags")), "")
    except OSError:
        pass
    parts = [cpu, torch.__version__, str(torch.get_num_threads()),
             json.dumps(probe_architecture(architecture), sort_keys=True, default=str)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _seconds_per_call(step, budget_s: float, give_up_s: float) -> float:
    """The fastest of the calls made within the budget: a call another process slowed down says
    nothing of the dtype (the mean of calls taken beside the test suite once chose fp32 for
    decoding on a machine where bf16 is 1.9x faster, docs/measurements.md)."""
    step()  # warm-up: kernels chosen, memory touched
    fastest, start = float("inf"), time.perf_counter()
    calls = 0
    while True:
        began = time.perf_counter()
        step()
        calls += 1
        now = time.perf_counter()
        fastest = min(fastest, now - began)
        if (now - start >= budget_s and calls >= 2) or now - start >= give_up_s:
            return fastest


def _build(architecture: dict, dtype):
    """A model of ``architecture`` in ``dtype`` with the attention the transformers backend runs."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from interlock.models.attention import use_gqa_attention

    fields = probe_architecture(architecture)
    config = AutoConfig.for_model(fields.pop("model_type", "llama"), **fields)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(dtype).eval()
    use_gqa_attention(model)
    return model


def _turn_steps(model):
    """A prefill chunk of one row and a decode step of a batch over a long cache, as the rollout
    engine runs them (:mod:`interlock.models.transformers_backend` and
    :mod:`interlock.models.attention`: one row's prompt at a time,
    then every row's step in one forward over a preallocated cache)."""
    import torch

    from interlock.models.attention import SlabLayer, slab_cache

    generator = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    prompt = torch.randint(vocab, (1, PREFILL_TOKENS), generator=generator)
    seed_cache = model(input_ids=prompt, use_cache=True, logits_to_keep=1).past_key_values
    repeats = -(-CACHE_TOKENS // PREFILL_TOKENS)
    buffers = [tuple(kv.repeat(DECODE_ROWS, 1, repeats + 1, 1) for kv in (layer.keys, layer.values))
               for layer in seed_cache.layers]
    tokens = torch.randint(vocab, (DECODE_ROWS, 1), generator=generator)
    positions = torch.full((DECODE_ROWS, 1), CACHE_TOKENS)
    dtype = next(model.parameters()).dtype
    mask = torch.zeros((DECODE_ROWS, 1, 1, CACHE_TOKENS + 1), dtype=dtype)

    def prefill():
        model(input_ids=prompt, use_cache=True, logits_to_keep=1)

    def decode():  # the step writes its token at CACHE_TOKENS, in place, every call alike
        cache = slab_cache([SlabLayer(keys, values, CACHE_TOKENS) for keys, values in buffers])
        model(input_ids=tokens, position_ids=positions, attention_mask=mask, past_key_values=cache,
              use_cache=True)

    return [(prefill, TURN_PROMPT_TOKENS / PREFILL_TOKENS), (decode, TURN_NEW_TOKENS / DECODE_ROWS)]


def _train_steps(model, dtype):
    import torch

    model.train()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(model.config.vocab_size, (1, TRAIN_TOKENS), generator=generator)

    def train_step():  # fp32 weights under autocast, as the trainer runs them
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        model.zero_grad(set_to_none=True)
    return [(train_step, 1.0)]


def measure(workload: str, architecture: dict, budget_s: float = 0.2) -> Probe:
    """Time fp32 against bf16 on ``workload`` with a model of ``architecture`` (a ``config.json``'s
    content), alternating so load hits both alike: seconds per unit of the workload, each step's
    seconds per call times the calls a unit makes of it."""
    import torch

    if workload not in WORKLOADS:
        raise InterlockError(f"unknown workload {workload!r}; one of {', '.join(WORKLOADS)}",
                             field="workload")
    # built outside inference mode, as the backends load them: weights made under it ran bf16
    # 3-6x slower here (AMX, torch 2.13)
    dtypes = (torch.float32, torch.bfloat16)
    if workload == "generate":
        models = {dtype: _build(architecture, dtype) for dtype in dtypes}
    else:  # one model of fp32 weights, run under each autocast in turn
        models = dict.fromkeys(dtypes, _build(architecture, torch.float32))
    with torch.inference_mode(workload == "generate"):
        plans = {dtype: _turn_steps(model) if workload == "generate" else _train_steps(model, dtype)
                 for dtype, model in models.items()}
        totals = dict.fromkeys(plans, 0.0)
        for _ in range(2):
            for dtype, steps in plans.items():
                give_up = GIVE_UP * max(budget_s, *(totals[d] for d in totals if d != dtype))
                totals[dtype] += sum(_seconds_per_call(step, budget_s, give_up) * calls
                                     for step, calls in steps)
    fp32, bf16 = totals[torch.float32], totals[torch.bfloat16]
    return Probe(workload, fp32 / 2, bf16 / 2, "bfloat16" if fp32 >= MARGIN * bf16 else "float32")


def probe(workload: str, architecture: dict) -> Probe:
    """:func:`measure`, once per machine and probed model: later calls read the cached answer."""
    path, key = cache_file(), f"{workload}:{machine_key(architecture)}"
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cached = {}
    entry = cached.get(key) if isinstance(cached, dict) else None
    if isinstance(entry, dict) and set(entry) == {"workload", "float32_s", "bfloat16_s", "chosen"} \
            and entry["chosen"] in ("float32", "bfloat16"):
        return Probe(**entry)
    found = measure(workload, architecture)
    cached = {**(cached if isinstance(cached, dict) else {}), key: asdict(found)}
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(cached, indent=1, sort_keys=True), encoding="utf-8")
    return found


def checkpoint_architecture(checkpoint: Path | str) -> dict:
    """A checkpoint's ``config.json`` content; an unreadable one names the file."""
    config_path = Path(checkpoint) / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        for size in ("hidden_size", "intermediate_size", "vocab_size"):
            int(config[size])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InterlockError(f"cannot read the model's sizes: {error}", file=str(config_path),
                             field="hidden_size") from None
    return config


def resolve_dtype(requested: str, workload: str, checkpoint: Path | str | None = None, *,
                  device: str = "cpu") -> str:
    """The dtype to compute in: ``requested`` itself unless it is ``auto``; then bf16 on a GPU
    that supports it, and on a CPU what :func:`probe` measured faster for ``workload`` with the
    checkpoint's architecture (its ``config.json``; SmolLM2-135M's where none is named)."""
    if requested in DTYPES:
        return requested
    if requested != "auto":
        raise InterlockError(f"unknown dtype {requested!r}; one of auto, {', '.join(DTYPES)}",
                             field="backbone.dtype")
    import torch

    if device != "cpu":
        return "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"
    architecture = DEFAULT_ARCHITECTURE if checkpoint is None else checkpoint_architecture(checkpoint)
    return probe(workload, architecture).chosen
