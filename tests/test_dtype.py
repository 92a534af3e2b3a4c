"""``backbone.dtype: auto``: bf16 only where this machine runs it faster, measured once per
machine and read back after; explicit dtypes pass through; bad input names its file and field."""

from __future__ import annotations

import json

import pytest

from interlock.core.config import Params, compose_params
from interlock.core.errors import InterlockError
from interlock.models import dtype as dtype_module
from interlock.models.backends import make_backend, model_runtime
from interlock.models.dtype import (
    DTYPES,
    GIVE_UP,
    MARGIN,
    PROBE_LAYERS,
    cache_file,
    machine_key,
    measure,
    probe,
    probe_architecture,
    resolve_dtype,
)
from interlock.models.tiny import TINY_ARCHITECTURE

from helpers.probe import pretend_measured, probe_key

TINY = {"model_type": "llama", **TINY_ARCHITECTURE}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_explicit_dtype_is_taken_as_it_is(dtype) -> None:
    assert resolve_dtype(dtype, "generate") == dtype
    assert not cache_file().exists()  # nothing measured


def test_an_unknown_dtype_names_the_field() -> None:
    with pytest.raises(InterlockError, match="unknown dtype 'fp8'") as error:
        resolve_dtype("fp8", "generate")
    assert error.value.field == "backbone.dtype"


@pytest.mark.parametrize("workload", ["generate", "train"])
def test_the_probe_times_both_and_takes_bf16_only_past_the_margin(workload) -> None:
    found = measure(workload, TINY, budget_s=0.01)
    assert found.workload == workload and found.float32_s > 0 and found.bfloat16_s > 0
    assert found.chosen == ("bfloat16" if found.float32_s >= MARGIN * found.bfloat16_s else "float32")


class Clock:
    """A clock that moves only when a probed step says it took time: the probe's stopping rules
    are tested on counts of calls, not on this machine's seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_a_dtype_far_slower_is_given_up_after_one_timed_call(monkeypatch) -> None:
    """bf16 ran about 100x slower than fp32 on one machine: the probe must not spend the budget's
    worth of calls on each of its steps there, nor call the slow dtype faster."""
    import torch

    clock, calls = Clock(), {torch.float32: 0, torch.bfloat16: 0}
    seconds_per_call = {torch.float32: 0.0625, torch.bfloat16: 1024.0}  # exact in binary
    monkeypatch.setattr(dtype_module, "time", clock)
    monkeypatch.setattr(dtype_module, "_build", lambda architecture, dtype: dtype)

    def steps(dtype):
        def step():
            calls[dtype] += 1
            clock.now += seconds_per_call[dtype]
        return [(step, 2.0), (step, 4.0)]

    monkeypatch.setattr(dtype_module, "_turn_steps", steps)
    found = measure("generate", TINY, budget_s=0.25)
    assert found.chosen == "float32" and found.speedup == pytest.approx(0.0625 / 1024)
    # fp32: each step warmed up, then timed until the budget (4 calls); 2 rounds x 2 steps
    assert calls[torch.float32] == 2 * 2 * (1 + 4)
    # bf16: one timed call past the warm-up was over GIVE_UP times fp32's seconds, so it stopped
    assert calls[torch.bfloat16] == 2 * 2 * (1 + 1)
    assert seconds_per_call[torch.bfloat16] > GIVE_UP * 0.25  # past any round's give-up


def test_the_probe_runs_the_checkpoints_architecture_cut_to_a_few_layers() -> None:
    """Its sizes, attention and vocabulary are what the probe times (a different one is another
    question of the cache); names and the stored dtype are not, and depth is cut for seconds."""
    config = {**TINY, "num_hidden_layers": 30, "_name_or_path": "/somewhere", "torch_dtype": "float32"}
    probed = probe_architecture(config)
    assert probed["num_hidden_layers"] == PROBE_LAYERS and probed["vocab_size"] == TINY["vocab_size"]
    assert "_name_or_path" not in probed and "torch_dtype" not in probed
    assert machine_key(config) == machine_key({**config, "_name_or_path": "/elsewhere"})
    assert machine_key(config) == machine_key({**config, "num_hidden_layers": 8})  # both cut to the same
    for changed in ({"vocab_size": 4096}, {"num_key_value_heads": 4}, {"intermediate_size": 256}):
        assert machine_key(config) != machine_key({**config, **changed})


def test_the_answer_is_measured_once_per_machine_and_read_back(tiny_checkpoint) -> None:
    first = resolve_dtype("auto", "generate", tiny_checkpoint)
    stored = json.loads(cache_file().read_text(encoding="utf-8"))
    key = probe_key(tiny_checkpoint, "generate")
    assert list(stored) == [key] and stored[key]["chosen"] == first
    # the stored answer is what later calls get: flip it and they follow it, without measuring
    flipped = "float32" if first == "bfloat16" else "bfloat16"
    cache_file().write_text(json.dumps({key: {**stored[key], "chosen": flipped}}), encoding="utf-8")
    assert resolve_dtype("auto", "generate", tiny_checkpoint) == flipped
    # another workload is its own question
    resolve_dtype("auto", "train", tiny_checkpoint)
    assert len(json.loads(cache_file().read_text(encoding="utf-8"))) == 2


@pytest.mark.parametrize("content", ["not json {", "[1, 2]", "KEY", "x" * 100_000])
def test_a_broken_cache_is_measured_again_not_trusted(content) -> None:
    if content == "KEY":  # this machine's entry, malformed: a dtype no model loads in
        entry = {"workload": "generate", "float32_s": 1.0, "bfloat16_s": 1.0, "chosen": "int8"}
        content = json.dumps({f"generate:{machine_key(TINY)}": entry})
    cache_file().parent.mkdir(parents=True)
    cache_file().write_text(content, encoding="utf-8")
    found = probe("generate", TINY)
    assert found.chosen in ("float32", "bfloat16")
    stored = json.loads(cache_file().read_text(encoding="utf-8"))
    assert stored[f"generate:{machine_key(TINY)}"]["chosen"] == found.chosen


def test_a_checkpoint_without_its_sizes_names_the_file(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64}), encoding="utf-8")
    with pytest.raises(InterlockError, match="sizes") as error:
        resolve_dtype("auto", "generate", tmp_path)
    assert error.value.file == str(tmp_path / "config.json")


def _backbone(*overrides: str):
    from helpers.repo import REPO

    return Params.model_validate(compose_params(REPO / "conf", ["backbone=tiny", *overrides])).backbone


def test_auto_reaches_the_model_the_transformers_backend_loads(tiny_checkpoint) -> None:
    backend = make_backend(_backbone("backbone.dtype=auto"), tiny_checkpoint)
    chosen = resolve_dtype("auto", "generate", tiny_checkpoint)  # read back from the cache
    assert str(next(backend.model.parameters()).dtype) == f"torch.{chosen}"


@pytest.mark.parametrize("chosen", ["float32", "bfloat16"])
def test_the_runtime_record_is_what_the_backend_loads(tiny_checkpoint, chosen) -> None:
    """``auto`` as this machine's probe answered it (its cache, set here): the record says what the
    transformers backend then loads, and the configured dtype beside it."""
    pretend_measured(tiny_checkpoint, "generate", chosen)
    backbone = _backbone("backbone.dtype=auto")
    record = model_runtime(backbone, "generate", tiny_checkpoint)
    assert record == {"backend": "transformers", "engine": "transformers", "served": False, "dtype": "auto",
                      "resolved_dtype": chosen}
    assert str(next(make_backend(backbone, tiny_checkpoint).model.parameters()).dtype) == f"torch.{chosen}"


def test_the_runtime_record_of_each_kind_of_backend(tiny_checkpoint) -> None:
    """An explicit dtype is taken as it is; training asks its own question of the probe (through
    transformers, whatever the backend); llamacpp computes in its GGUF's precision and openai in
    its servers' dtype, so neither resolves one; a served checkpoint is recorded by its server's
    engine."""
    pretend_measured(tiny_checkpoint, "generate", "float32")
    pretend_measured(tiny_checkpoint, "train", "bfloat16")
    explicit = model_runtime(_backbone("backbone.dtype=bfloat16"), "generate", tiny_checkpoint)
    assert explicit["resolved_dtype"] == "bfloat16"
    auto = _backbone("backbone.dtype=auto", "backbone.backend=llamacpp")
    assert model_runtime(auto, "train", tiny_checkpoint, backend="transformers") == {
        "backend": "transformers", "engine": "transformers", "served": False, "dtype": "auto",
        "resolved_dtype": "bfloat16"}
    assert model_runtime(auto, "generate", tiny_checkpoint) == {
        "backend": "llamacpp", "engine": "llamacpp", "served": False, "dtype": "auto", "resolved_dtype": None,
        "gguf": "Q8_0"}
    assert model_runtime(_backbone("backbone.backend=openai"), "generate", tiny_checkpoint) == {
        "backend": "openai", "engine": "openai", "served": False, "dtype": "float32",
        "resolved_dtype": None}
    # a stage that serves its checkpoint records the server's engine, in the dtype it loads
    assert model_runtime(_backbone("backbone.serve=vllm"), "generate", tiny_checkpoint) == {
        "backend": "vllm", "engine": "vllm", "served": True, "dtype": "float32",
        "resolved_dtype": "float32"}
