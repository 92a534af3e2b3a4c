"""The prepared GPU check (``make gpu-check``): everything a lent GPU should confirm, as one short
command that prints its figures, and runs here too, with each GPU part skipped and the reason said.

1. **The device**: torch's view of it (name, memory, bf16), and whether vLLM imports.
2. **The GPU tests**: ``pytest -m gpu`` (training and GRPO on CUDA, against the CPU's numbers),
   then the vLLM tests (the in-process engine, a managed ``vllm serve``, and GRPO generating
   through an engine kept in step with the trained weights, on this device).
3. **Served against offline**: the same prompts through vLLM's offline engine in this process and
   through a managed ``vllm serve`` (``backbone.serve: vllm``) driven by the ``openai`` backend, at
   greedy decoding: generated tokens per second of each and their ratio, and how many completions
   are the same text.
4. **Training**: tokens per second of the fine-tuning loop on the same checkpoint, and the peak
   GPU memory (GPU only).
5. **A short served run of the pipeline** (GPU only): the smoke run, in a copy of the repository,
   with every decoding stage serving its checkpoint through vLLM (``-S backbone.serve=vllm``), by
   ``dvc repro``; its seconds.

The checkpoint is ``--checkpoint`` (default: the default run's ``data/models/base`` where it
exists, else the tiny test model, built in seconds). Each part's seconds are printed; the whole
is meant to fit 8 minutes on one GPU. ``--json PATH`` writes the figures.

    .venv/bin/python perf/gpu_check.py [--checkpoint DIR] [--prompts 64] [--skip-tests]
        [--skip-pipeline] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

#: tests that run vLLM on whatever device there is (on a GPU the RL ones run the policy server:
#: ``train.rl.vllm_engine: auto``; the resumed run kills its trainer, and so its server, with SIGKILL)
VLLM_TESTS = ["tests/test_vllm_backend.py", "tests/test_rl_vllm.py",
              "tests/test_rl_grpo.py::test_a_run_killed_with_sigkill_resumes_from_its_last_checkpoint_to_the_same_weights"]


def device() -> dict:
    import torch

    info = {"cuda": torch.cuda.is_available(), "vllm": _imports("vllm")}
    if info["cuda"]:
        props = torch.cuda.get_device_properties(0)
        info.update(name=props.name, memory_gib=round(props.total_memory / 2**30, 1),
                    bf16=torch.cuda.is_bf16_supported(), count=torch.cuda.device_count())
    return info


def _imports(module: str) -> bool:
    try:
        __import__(module)
    except Exception:  # noqa: BLE001 (any failure to import means: not usable here)
        return False
    return True


def skipped(reason: str) -> dict:
    print(f"  skipped: {reason}")
    return {"skipped": reason}


def run_tests(info: dict) -> dict:
    """The GPU tests, then vLLM's; pytest's own summary line of each."""
    figures = {}
    for name, args in {"gpu": ["-m", "gpu"], "vllm": VLLM_TESTS}.items():
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *args],
                              cwd=ROOT, capture_output=True, text=True)
        last = [line for line in done.stdout.splitlines() if line.strip()][-1:] or ["(no output)"]
        figures[name] = {"exit": done.returncode, "summary": last[0],
                         "seconds": round(time.perf_counter() - started)}
        print(f"  pytest {' '.join(args)}: {last[0]} ({figures[name]['seconds']} s)")
        if done.returncode not in (0, 5):  # 5: nothing collected (no test of that kind)
            print(done.stdout[-4000:])
    return figures


def checkpoint_for(arg: str | None, work: Path) -> Path:
    if arg:
        return Path(arg)
    base = ROOT / "data" / "models" / "base"
    if (base / "config.json").is_file():
        return base
    from interlock.models.tiny import build_tiny, pack_texts
    from interlock.synthesis.catalog import load_catalog
    from interlock.testing.templates import template_packs

    packs = [pack for _, _, pack in template_packs(load_catalog(), per_pool=1)]
    return build_tiny(work / "tiny", pack_texts(packs), seed=7)


def prompts(count: int, max_new_tokens: int):
    from interlock.core.backend import ChatRequest
    from interlock.core.chat import Message
    from interlock.synthesis.workspace import TOOL_SPECS

    return [ChatRequest(f"p{i}", (Message("system", "You are an agent that completes back-office tasks."),
                                  Message("user", f"Case {i}: read the policy, then process the pending "
                                                  f"rows of ledger {i % 7} and report." * (1 + i % 3))),
                        tuple(TOOL_SPECS), max_new_tokens, 0.0, i) for i in range(count)]


def throughput(checkpoint: Path, count: int, info: dict) -> dict:
    """The same prompts through the offline engine and through a managed server."""
    if not info["vllm"]:
        return skipped("vLLM does not import here (`make vllm` on a CPU, the gpu extra on a GPU)")
    from interlock.core.backend import releasing
    from interlock.core.config import GenerationConfig, default_params
    from interlock.models.backends import make_backend
    from interlock.models.vllm_backend import VLLMBackend

    requests = prompts(count, 128)
    dtype = "bfloat16" if info["cuda"] and info.get("bf16") else "float32"
    figures = {}
    engine = VLLMBackend(str(checkpoint), dtype=dtype, max_model_len=4096,
                         gpu_memory_utilization=0.4 if info["cuda"] else 0.85)
    figures["offline"], offline = _timed(engine.complete, requests)
    del engine
    from interlock.evaluation.run import free_memory

    free_memory()
    backbone = default_params(["backbone=tiny"]).backbone.replace(
        name="check", weights={"source": "pretrained", "model": str(checkpoint)}, serve="vllm", dtype=dtype,
        max_context=4096, generation=GenerationConfig(temperature=0.0, max_new_tokens=128))
    started = time.perf_counter()
    with releasing(make_backend(backbone, checkpoint)) as served:
        figures["server_start_seconds"] = round(time.perf_counter() - started, 1)
        figures["served"], answers = _timed(served.complete, requests)
    figures["ratio_served_to_offline"] = round(figures["served"]["tokens_per_second"]
                                               / max(1e-9, figures["offline"]["tokens_per_second"]), 3)
    figures["same_text"] = sum(a.text.rstrip("\ufffd") == b.text.rstrip("\ufffd")
                               for a, b in zip(answers, offline, strict=True))
    print(f"  offline {figures['offline']['tokens_per_second']} tokens/s, served "
          f"{figures['served']['tokens_per_second']} tokens/s (ratio {figures['ratio_served_to_offline']}; "
          f"server up in {figures['server_start_seconds']} s); {figures['same_text']} of {count} "
          f"completions the same text")
    return figures


def _timed(complete, requests) -> tuple[dict, list]:
    started = time.perf_counter()
    answers = complete(requests)
    seconds = time.perf_counter() - started
    tokens = sum(a.completion_tokens for a in answers)
    return {"seconds": round(seconds, 2), "generated_tokens": tokens,
            "tokens_per_second": round(tokens / seconds, 1)}, answers


def training(checkpoint: Path, info: dict, work: Path) -> dict:
    if not info["cuda"]:
        return skipped("no GPU: training's CPU throughput is in perf/training_throughput.py")
    import torch
    from transformers import AutoTokenizer

    from interlock.core.config import Recipe
    from interlock.training.examples import Example, ExampleSet
    from interlock.training.trainer import fine_tune

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    ids = tokenizer("the payroll refund is paid and the ledger row is posted. " * 60)["input_ids"][:2000]
    examples = [Example(f"e{i}", tuple(ids), tuple([False] * 200 + [True] * (len(ids) - 200)))
                for i in range(32)]
    recipe = Recipe(epochs=1, learning_rate=1e-5, batch_tokens=4096, gradient_accumulation=1, warmup_steps=0,
                    weight_decay=0.0, max_grad_norm=1.0, lora=None, seed=0)
    torch.cuda.reset_peak_memory_stats()
    result = fine_tune(checkpoint, ExampleSet(examples, [], []), recipe, work / "trained", name="check",
                       max_context=4096, compute_dtype="bfloat16" if info.get("bf16") else "float32")
    figures = {"tokens_per_second": round(result.tokens_per_second, 1), "steps": result.record["steps"],
               "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}
    print(f"  {figures['tokens_per_second']} tokens/s over {figures['steps']} steps, peak "
          f"{figures['peak_memory_gib']} GiB")
    return figures


def served_pipeline(info: dict, work: Path) -> dict:
    if not info["cuda"] or not info["vllm"]:
        return skipped("needs a GPU with vLLM; on a CPU, tests/test_served_pipeline.py runs the served "
                       "evaluation in make test")
    copy = work / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(copy)], check=True)
    env_python = str(Path(sys.executable).parent)
    started = time.perf_counter()
    overrides = ["experiment=smoke", "backbone.serve=vllm", "eval.models=[base,demo_sft]"]
    subprocess.run([f"{env_python}/interlock", "params", *[f"-S{o}" for o in overrides]], cwd=copy,
                   check=True)
    done = subprocess.run([f"{env_python}/dvc", "repro"], cwd=copy, capture_output=True, text=True,
                          env={"PATH": f"{env_python}:/usr/bin:/bin", "WANDB_MODE": "offline"})
    seconds = round(time.perf_counter() - started)
    print(f"  dvc repro (smoke, served): exit {done.returncode} in {seconds} s")
    if done.returncode:
        print(done.stdout[-3000:], done.stderr[-3000:])
    return {"exit": done.returncode, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--skip-pipeline", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    started = time.perf_counter()
    report = {"device": device()}
    print(f"device: {report['device']}")
    with tempfile.TemporaryDirectory(prefix="interlock-gpu-check-") as tmp:
        work = Path(tmp)
        checkpoint = checkpoint_for(args.checkpoint, work)
        parts = {"tests": lambda: (skipped("--skip-tests") if args.skip_tests
                                   else run_tests(report["device"])),
                 "throughput": lambda: throughput(checkpoint, args.prompts, report["device"]),
                 "training": lambda: training(checkpoint, report["device"], work),
                 "pipeline": lambda: (skipped("--skip-pipeline") if args.skip_pipeline
                                      else served_pipeline(report["device"], work))}
        for name, part in parts.items():
            print(f"{name}:")
            begun = time.perf_counter()
            report[name] = part()
            print(f"  ({time.perf_counter() - begun:.0f} s)")
    report["seconds"] = round(time.perf_counter() - started)
    print(f"gpu check: {report['seconds']} s in all")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
