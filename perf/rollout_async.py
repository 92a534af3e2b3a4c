"""Asynchronous rollouts benchmark: the rollout engine's two schedules against the same OpenAI-
compatible servers, side by side in one run: ``lockstep`` (every live episode waits for the
slowest reply of its turn) and ``async`` (each episode advances as soon as its own reply came,
at most ``--in-flight`` requests out).

The servers are real HTTP servers on 127.0.0.1 (``interlock.testing.loopback_server``, two
endpoints by default, bounded in requests and time) that play a scripted agent: it lists the
workspace, reads one to four files, submits, so the episodes are real (tools run on real
workspaces of the default scale's kind of task). Reply lengths are lognormal (median
``--median-tokens``, shape ``--sigma``: the skew) and each reply takes ``--ms-per-token`` per token;
a share ``--error-rate`` of tries is answered 429 or 500 and retried by the client. Every draw
comes from the seed and the request, and each side gets a fresh server, so both sides see the
same replies and the same errors: their trajectories must be identical, and are checked to be.
Not a test: it prints a table and checks the target of issue 17 (async at least 2x lockstep).

Then the timings behind what tests/test_async_rollouts.py checks without a clock (there, the
server's journal of arrivals and answers says what happened; here, the seconds say how long it
took), each as seconds and a ratio: one task whose replies take ``--slow-ms`` among quick ones
(under async the others' longest episode against one slow reply, below 1x; under lockstep the
others' seconds a turn against one slow reply, at least 1x: every turn waited for it); a 429 with
``Retry-After: 0.3`` before every reply (the seconds each retry waited against the 0.3 told); a
server that answers byte by byte (the seconds until the client gave up against its two tries'
``timeout_s`` of 0.4).

    .venv/bin/python perf/rollout_async.py [--tasks 16] [--attempts 8] [--in-flight 32]
        [--endpoints 2] [--median-tokens 40] [--sigma 1.0] [--ms-per-token 2] [--error-rate 0.01]
        [--slow-ms 400] [--seed 0] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's library, whatever the venv has installed
TARGET_RATIO = 2.0
SCHEDULES = ("lockstep", "async")


def tasks(count: int, seed: int) -> list:
    """``count`` compiled tasks of the training domains, at the default scale's task size."""
    from interlock.core.config import default_params
    from interlock.core.seeds import stable_seed
    from interlock.synthesis.blueprints import make_blueprint
    from interlock.synthesis.catalog import load_catalog
    from interlock.synthesis.graph import build_graph
    from interlock.synthesis.packs import compile_pack
    from interlock.synthesis.tasks import TaskContext

    size = default_params().scale.task_size
    domains = [d for d in load_catalog().domains if d.split == "train"][:count]
    built = []
    for domain in domains:
        blueprint = make_blueprint(domain, "rft", 0, size.build(), stable_seed(seed, domain.id))
        graph = build_graph(blueprint, domain)
        pack = compile_pack(graph, domain)
        built.append(TaskContext(pack.task_id, pack, graph, domain))
    return built


def run_side(schedule: str, contexts: list, args: argparse.Namespace) -> tuple[dict, list[dict]]:
    """One schedule on a fresh pair of servers: its figures and its trajectories' rows."""
    from interlock.models.openai_backend import OpenAIBackend
    from interlock.rollout.engine import RolloutLimits, run_episodes
    from interlock.rollout.runs import plan_episodes
    from interlock.testing.loopback_server import LoopbackServer, ScriptedAgent, client_limits

    agent = ScriptedAgent(seed=args.seed, median_tokens=args.median_tokens, sigma=args.sigma,
                          seconds_per_token=args.ms_per_token / 1000, error_rate=args.error_rate)
    episodes = list(plan_episodes(iter(contexts), policy="loopback", attempts=args.attempts, seed=args.seed))
    with (LoopbackServer(agent, args.endpoints, max_requests=50 * len(episodes), max_seconds=600) as server,
          tempfile.TemporaryDirectory(prefix="interlock-bench-") as work):
        backend = OpenAIBackend(server.urls, "loopback", **client_limits(max_in_flight=args.in_flight))
        start = time.perf_counter()
        trajectories = list(run_episodes(episodes, backend, RolloutLimits(), Path(work),
                                         batch_size=args.in_flight, schedule=schedule))
        seconds = time.perf_counter() - start
    figures = {"episodes": len(trajectories), "seconds": seconds,
               "episodes_per_second": len(trajectories) / seconds,
               "turns": sum(t.turns for t in trajectories), "requests_by_endpoint": server.served,
               "peak_in_flight": server.peak_in_flight, "retries": backend.retries,
               "finish_reasons": dict(sorted(Counter(t.finish_reason for t in trajectories).items()))}
    return figures, sorted((t.to_row() for t in trajectories), key=lambda row: row["rollout_id"])


def behaviours(contexts: list, args: argparse.Namespace) -> dict:
    """The timings of the behaviours the tests check by the server's journal (module docstring)."""
    from dataclasses import replace

    from interlock.core.backend import ChatRequest
    from interlock.core.chat import Message
    from interlock.models.openai_backend import OpenAIBackend
    from interlock.rollout.engine import RolloutLimits, run_episodes
    from interlock.rollout.runs import plan_episodes
    from interlock.testing.loopback_server import (
        Answer,
        LoopbackServer,
        ScriptedAgent,
        client_limits,
        completion_body,
        error_body,
    )

    agent = ScriptedAgent(seed=args.seed, median_tokens=8, first_token_s=0.002, seconds_per_token=0.0005)
    some, slow_s = contexts[:4], args.slow_ms / 1000
    slow = some[0].pack.request

    def slowed(request):
        answer = agent(request)
        return replace(answer, delay_s=slow_s) if request.body["messages"][1]["content"] == slow else answer

    def episodes(script, chosen, schedule, **settings):
        with (LoopbackServer(script, 2) as server,
              tempfile.TemporaryDirectory(prefix="interlock-bench-") as work):
            limits = {**client_limits(max_in_flight=4), "backoff_s": 0.01, **settings}
            backend = OpenAIBackend(server.urls, "loopback", **limits)
            planned = plan_episodes(iter(chosen), policy="loopback", attempts=1, seed=args.seed)
            start = time.perf_counter()
            done = list(run_episodes(planned, backend, RolloutLimits(max_turns=12), Path(work),
                                     batch_size=4, schedule=schedule))
            return done, time.perf_counter() - start, backend

    figures: dict = {"slow_reply_s": slow_s}
    if len(some) > 1:
        done, _, _ = episodes(slowed, some, "async")
        others = [t for t in done if t.task_id != some[0].task_id]
        figures["async"] = {"others_longest_episode_s": max(t.seconds for t in others),
                            "ratio_to_one_slow_reply": max(t.seconds for t in others) / slow_s,
                            "slow_episode_ended_last": done[-1].task_id == some[0].task_id}
        done, _, _ = episodes(slowed, some, "lockstep")
        (slow_turns,) = [t.turns for t in done if t.task_id == some[0].task_id]
        per_turn = min(t.seconds / min(t.turns, slow_turns) for t in done if t.task_id != some[0].task_id)
        figures["lockstep"] = {"others_fewest_seconds_per_turn": per_turn,
                               "ratio_to_one_slow_reply": per_turn / slow_s}
    told = Answer(429, error_body(429, "slow down"), headers=(("Retry-After", "0.3"),))
    done, seconds, backend = episodes(lambda r: told if r.attempt == 0 else agent(r), some[:1], "async")
    figures["retry_after"] = {"told_s": 0.3, "retries": backend.retries,
                              "seconds_per_retry": seconds / max(1, backend.retries),
                              "ratio_to_told": seconds / max(1, backend.retries) / 0.3}
    with LoopbackServer(lambda r: Answer(200, completion_body("hi"), drip_s=0.05), 1) as server:
        backend = OpenAIBackend(server.urls, "loopback", **client_limits(timeout_s=0.4, max_retries=1),
                                backoff_s=0.01)
        start = time.perf_counter()
        completion = backend.complete_one(ChatRequest("k", (Message("user", "hi"),)))
        seconds = time.perf_counter() - start
    figures["byte_by_byte"] = {"timeout_s": 0.4, "tries": 2, "seconds_until_given_up": seconds,
                               "ratio_to_two_timeouts": seconds / (2 * 0.4),
                               "finish_reason": completion.finish_reason}
    return figures


def _print_behaviours(figures: dict) -> None:
    slow = figures["slow_reply_s"]
    print(f"\ntimings behind the journal-checked tests (one slow task's replies: {slow:.2f} s)")
    if "async" in figures:
        a, lock = figures["async"], figures["lockstep"]
        print(f"async: the others' longest episode {a['others_longest_episode_s']:.3f} s = "
              f"{a['ratio_to_one_slow_reply']:.2f}x one slow reply (expected below 1x); the slow one ended "
              f"{'last' if a['slow_episode_ended_last'] else 'NOT last'}")
        print(f"lockstep: the others' fewest seconds a turn {lock['others_fewest_seconds_per_turn']:.3f} s = "
              f"{lock['ratio_to_one_slow_reply']:.2f}x one slow reply (expected at least 1x)")
    r = figures["retry_after"]
    print(f"Retry-After {r['told_s']:g} s: {r['retries']} retries, {r['seconds_per_retry']:.3f} s a retry = "
          f"{r['ratio_to_told']:.2f}x what the server told (expected at least 1x)")
    b = figures["byte_by_byte"]
    print(f"byte by byte: given up ({b['finish_reason']}) after {b['seconds_until_given_up']:.2f} s = "
          f"{b['ratio_to_two_timeouts']:.2f}x its {b['tries']} tries' timeout of {b['timeout_s']:g} s "
          "(expected about 1x)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--attempts", type=int, default=8)
    parser.add_argument("--in-flight", type=int, default=32,
                        help="requests out at once (lockstep: the batch)")
    parser.add_argument("--endpoints", type=int, default=2)
    parser.add_argument("--median-tokens", type=float, default=40.0)
    parser.add_argument("--sigma", type=float, default=1.0, help="lognormal shape of reply lengths")
    parser.add_argument("--ms-per-token", type=float, default=2.0)
    parser.add_argument("--error-rate", type=float, default=0.01, help="share of tries answered 429 or 500")
    parser.add_argument("--slow-ms", type=float, default=400.0,
                        help="the slow task's reply delay in the behaviour timings")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    contexts = tasks(args.tasks, args.seed)
    print(f"{len(contexts)} tasks x {args.attempts} attempts, {args.in_flight} in flight, {args.endpoints} "
          f"loopback endpoints; replies: lognormal tokens (median {args.median_tokens:g}, "
          f"sigma {args.sigma:g}) at {args.ms_per_token:g} ms a token, {args.error_rate:.0%} of tries "
          "answered 429/500", flush=True)
    sides, rows = {}, {}
    for schedule in SCHEDULES:
        sides[schedule], rows[schedule] = run_side(schedule, contexts, args)
    identical = sum(a == b for a, b in zip(rows["lockstep"], rows["async"], strict=True))

    print(f"\n{'':9} {'episodes':>8} {'seconds':>8} {'episodes/s':>11} {'turns':>6} {'retries':>8} "
          f"{'peak in flight':>15}  requests by endpoint")
    for schedule, side in sides.items():
        print(f"{schedule:9} {side['episodes']:8} {side['seconds']:8.2f} {side['episodes_per_second']:11.2f} "
              f"{side['turns']:6} {side['retries']:8} {side['peak_in_flight']:15}  "
              f"{side['requests_by_endpoint']}")
    for schedule, side in sides.items():
        print(f"{schedule} finish reasons: {side['finish_reasons']}")
    ratio = sides["async"]["episodes_per_second"] / sides["lockstep"]["episodes_per_second"]
    print(f"identical trajectories: {identical} of {len(rows['async'])}")
    print(f"speed-up (async episodes/s / lockstep episodes/s): {ratio:.2f}x (target >= {TARGET_RATIO:.0f}x): "
          f"{'ok' if ratio >= TARGET_RATIO else 'BELOW TARGET'}")
    timed = behaviours(contexts, args)
    _print_behaviours(timed)
    if args.json:
        report = {"settings": {k: v for k, v in vars(args).items() if k != "json"}, "ratio": ratio,
                  "identical_trajectories": identical, **sides, "behaviours": timed}
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if ratio >= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
