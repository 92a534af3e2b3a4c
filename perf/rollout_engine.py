"""Rollout engine benchmark: the ``transformers`` backend (KV cache kept per episode between
turns) against the naive loop (one batched ``model.generate`` per turn over the whole
conversation so far), same model, batch and episodes, side by side in one run.

Multi-turn episodes on the default tasks: each episode is a task's request, and after every
turn the task's reference solution supplies the next assistant call and its tool observation,
so both sides see exactly the same conversations whatever they generate (greedy decoding, so
they generate the same text too, up to floating-point ties; the agreement is reported). Not a
test: it prints a table and checks the target of issue 3 (engine at least 2x the naive loop).

    .venv/bin/python perf/rollout_engine.py [--checkpoint data/models/base]
        [--episodes 16] [--turns 6] [--max-new-tokens 48] [--packs data/packs] [--json PATH]

Tokens processed per second counts what each side actually runs through the model (the
engine: uncached prompt suffixes plus generated tokens; the naive loop: every prompt token,
padding included, plus generated tokens); the FLOP/s they imply is 2 x parameters x tokens
(attention excluded), against the ~110 GFLOP/s an fp32 matrix multiply reaches on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MATMUL_GFLOPS = 110.0
TARGET_RATIO = 2.0
SYSTEM = ("You are an agent working in a file workspace. Read the request and the files it names, "
          "make every change it asks for with the tools, then call submit.")


def load_packs(packs_dir: Path | None, episodes: int, turns: int) -> list:
    """Tasks with at least ``turns`` reference steps, from ``packs_dir`` or built at the default scale."""
    from interlock.synthesis.tasks import iter_packs

    if packs_dir is None or not packs_dir.is_dir():
        packs_dir = build_default_packs(Path(tempfile.mkdtemp(prefix="interlock-bench-")))
    chosen = []
    for packs in iter_packs(packs_dir):
        chosen += [p for p in packs if p.pool in ("rft", "demo") and len(p.reference) >= turns]
    if len(chosen) < episodes:
        raise SystemExit(f"only {len(chosen)} tasks with {turns} reference steps in {packs_dir}")
    return chosen[:episodes]


def build_default_packs(out: Path) -> Path:
    """The default scale's task packs, synthesized with the real stage functions into ``out``."""
    from interlock.core.config import Params, compose_params
    from interlock.synthesis.authors.stage import packs
    from interlock.synthesis.stage import blueprints, domains, graphs

    params = Params.model_validate(compose_params(ROOT / "conf"))
    paths = params.paths.rebase(data=out)
    for stage in (domains, blueprints, graphs, packs):
        stage(params, paths)
    return paths.packs


def conversations(packs: list, turns: int) -> list[list[tuple]]:
    """Per episode and turn, the messages the model sees before it generates."""
    from interlock.core.chat import Message, ToolCall

    episodes = []
    for pack in packs:
        messages = [Message("system", SYSTEM), Message("user", pack.request)]
        per_turn = []
        for step in pack.reference[:turns]:
            per_turn.append(tuple(messages))
            call = ToolCall(step["tool"], json.loads(step["arguments"]))
            messages += [Message("assistant", "", (call,)),
                         Message("tool", step["observation"], name=step["tool"])]
        episodes.append(per_turn)
    return episodes


class Side:
    """One way of running the turns, timed turn by turn (wall and own CPU seconds)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seconds = self.cpu_seconds = 0.0
        self.prompt_tokens = self.generated_tokens = self.processed_tokens = 0
        self.texts: list[list[str]] = []
        self.extra: dict = {}

    def timed(self, turn_fn, *args) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        turn_fn(*args)
        self.seconds += time.perf_counter() - wall
        self.cpu_seconds += time.process_time() - cpu

    def report(self) -> dict:
        return {"seconds": self.seconds, "cpu_seconds": self.cpu_seconds, "prompt_tokens": self.prompt_tokens,
                "generated_tokens": self.generated_tokens, "processed_tokens": self.processed_tokens,
                **self.extra}


def engine_turn(side: Side, backend, episodes: list[list[tuple]], turn: int, max_new: int) -> None:
    from interlock.core.backend import ChatRequest
    from interlock.synthesis.workspace import TOOL_SPECS

    requests = [ChatRequest(f"episode-{i}", convo[turn], tuple(TOOL_SPECS), max_new_tokens=max_new,
                            temperature=0.0, seed=i) for i, convo in enumerate(episodes)]
    done = backend.complete(requests)
    side.texts.append([c.text for c in done])
    side.prompt_tokens += sum(c.prompt_tokens for c in done)
    side.generated_tokens += sum(c.completion_tokens for c in done)
    stats = backend.stats
    side.processed_tokens = stats.prefilled_tokens + stats.generated_tokens
    side.extra = {"prefilled_tokens": stats.prefilled_tokens, "reused_tokens": stats.reused_tokens,
                  "prefill_seconds": stats.prefill_seconds, "decode_seconds": stats.decode_seconds}


def naive_turn(side: Side, model, tokenizer, episodes: list[list[tuple]], turn: int, max_new: int,
               stop_ids: list[int], pad_id: int) -> None:
    """One batched ``generate`` over the whole conversation so far (left padding)."""
    import torch

    from interlock.models.chat_template import openai_tools
    from interlock.synthesis.workspace import TOOL_SPECS

    tokenizer.padding_side = "left"
    tools = openai_tools(TOOL_SPECS)
    rendered = [tokenizer.apply_chat_template([m.to_dict() for m in convo[turn]], tools=tools,
                                              add_generation_prompt=True, tokenize=False)
                for convo in episodes]
    batch = tokenizer(rendered, add_special_tokens=False, return_tensors="pt", padding=True)
    with torch.inference_mode():
        out = model.generate(**batch, max_new_tokens=max_new, do_sample=False, eos_token_id=stop_ids,
                             pad_token_id=pad_id)
    width = batch["input_ids"].shape[1]
    turn_texts = []
    for row in out[:, width:].tolist():
        kept = []
        for token in row:
            if token in stop_ids:
                break
            kept.append(token)
        side.generated_tokens += len(kept) + (len(kept) < len(row))
        turn_texts.append(tokenizer.decode(kept))
    side.texts.append(turn_texts)
    side.prompt_tokens += int(batch["attention_mask"].sum())
    padded = batch["input_ids"].numel()
    side.extra["padded_prompt_tokens"] = side.extra.get("padded_prompt_tokens", 0) + padded
    side.processed_tokens += padded + out.shape[0] * (out.shape[1] - width)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=None, help="default: the run's base checkpoint")
    parser.add_argument("--packs", type=Path, default=None,
                        help="task packs (default: the repository's, else built at the default scale)")
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--naive-gqa", action="store_true",
                        help="also run the naive loop with the engine's attention (sdpa_gqa), to separate "
                             "what the KV reuse gains from what the attention kernel gains")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    from interlock.analysis.artifacts import repository_paths

    paths = repository_paths(ROOT)
    args.checkpoint = args.checkpoint or paths.base_model
    args.packs = args.packs or paths.packs

    import torch

    from interlock.models.checkpoint import load_checkpoint, read_manifest
    from interlock.models.transformers_backend import TransformersBackend

    torch.set_num_threads(args.threads)
    model, tokenizer = load_checkpoint(args.checkpoint)
    naive_model, _ = load_checkpoint(args.checkpoint)  # the same weights, with transformers' stock attention
    manifest = read_manifest(args.checkpoint)
    params = sum(p.numel() for p in model.parameters())
    packs = load_packs(args.packs, args.episodes, args.turns)
    episodes = conversations(packs, args.turns)
    backend = TransformersBackend(model=model, tokenizer=tokenizer)
    stop_ids = sorted(backend.stop_ids)
    print(f"model {manifest['name']} ({manifest['source']}, {params / 1e6:.1f}M parameters), "
          f"{args.episodes} episodes x {args.turns} turns, {args.max_new_tokens} new tokens per turn, "
          f"{torch.get_num_threads()} threads", flush=True)

    # warm every path once (first calls of a shape pay one-off costs)
    warm = conversations(packs[:2], 1)
    engine_turn(Side("warm"), TransformersBackend(model=model, tokenizer=tokenizer), warm, 0, 4)
    naive_turn(Side("warm"), naive_model, tokenizer, warm, 0, 4, stop_ids, backend.pad_id)

    # the sides take turns, turn by turn, so that whatever else runs on the machine slows both alike
    engine, naive = Side("engine (KV reuse)"), Side("naive generate")
    sides = [engine, naive]
    naive_gqa = Side("naive, sdpa_gqa") if args.naive_gqa else None
    if naive_gqa:
        sides.append(naive_gqa)
    for turn in range(args.turns):
        engine.timed(engine_turn, engine, backend, episodes, turn, args.max_new_tokens)
        naive.timed(naive_turn, naive, naive_model, tokenizer, episodes, turn, args.max_new_tokens, stop_ids,
                    backend.pad_id)
        if naive_gqa:
            naive_gqa.timed(naive_turn, naive_gqa, model, tokenizer, episodes, turn, args.max_new_tokens,
                            stop_ids, backend.pad_id)
        print(f"turn {turn + 1}/{args.turns}: " + ", ".join(f"{s.name} {s.seconds:.1f} s" for s in sides),
              flush=True)

    same = sum(a == b for ta, tb in zip(engine.texts, naive.texts, strict=True)
               for a, b in zip(ta, tb, strict=True))
    threads = torch.get_num_threads()
    print(f"\n{'':18} {'seconds':>8} {'gen tok/s':>10} {'processed tok/s':>16} {'GFLOP/s':>8} "
          f"{'of ' + str(int(MATMUL_GFLOPS)):>7} {'CPU use':>8}")
    for side in sides:
        gflops = 2 * params * side.processed_tokens / side.seconds / 1e9
        print(f"{side.name:18} {side.seconds:8.1f} {side.generated_tokens / side.seconds:10.1f} "
              f"{side.processed_tokens / side.seconds:16.0f} {gflops:8.1f} {gflops / MATMUL_GFLOPS:7.0%} "
              f"{side.cpu_seconds / side.seconds / threads:8.0%}")
    ratio = naive.seconds / engine.seconds
    print(f"\nprompt tokens (full prompts, both sides): {engine.prompt_tokens}; engine computed "
          f"{engine.extra['prefilled_tokens']} of them ({engine.extra['reused_tokens']} reused from its "
          f"caches); naive computed {naive.extra['padded_prompt_tokens']} (with padding)")
    print(f"generated tokens: engine {engine.generated_tokens}, naive {naive.generated_tokens}; "
          f"identical completions {same} of {args.episodes * args.turns}")
    print(f"engine time: prefill {engine.extra['prefill_seconds']:.1f} s, "
          f"decode {engine.extra['decode_seconds']:.1f} s")
    if naive_gqa:
        print(f"naive loop with the engine's attention (sdpa_gqa): {naive_gqa.seconds:.1f} s, "
              f"{naive_gqa.seconds / engine.seconds:.2f}x the engine's time")
    print("CPU use below 100% means threads waited (on memory, or on other processes on the machine)")
    print(f"speed-up (naive seconds / engine seconds): {ratio:.2f}x (target >= {TARGET_RATIO:.0f}x): "
          f"{'ok' if ratio >= TARGET_RATIO else 'BELOW TARGET'}")
    if args.json:
        report = {"model": manifest["name"], "parameters": params, "episodes": args.episodes,
                  "turns": args.turns, "max_new_tokens": args.max_new_tokens, "threads": threads,
                  "ratio": ratio, "identical_completions": same,
                  **{side.name: side.report() for side in sides}}
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if ratio >= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
