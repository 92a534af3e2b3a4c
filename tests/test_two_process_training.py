"""Training across processes, actually run: the smoke run's `demo_sft`, `train` and `rl` stages again
under `train.launcher='accelerate launch --multi_gpu --num_processes 2 ...'`, two CPU processes
exchanging gradients over gloo, by DVC. (accelerate's own `--cpu` flag starts one process
whatever `--num_processes` says; on a machine without a GPU the trainer takes the processes
torchrun started as one CPU job.)

Two rows a step (``gradient_accumulation=2``), so both processes have rows to train on, they must
train what one process trains with the same settings: the same steps and tokens, the first loss
equal within 1e-4 and the last within 1e-2; GRPO (``train=grpo``, two short steps) the same
episodes and rewards step by step, each process playing its share; one checkpoint, one metrics
file and one W&B run per stage, from the main process only; and a rank killed with SIGKILL
mid-run leaves no checkpoint, half-written or otherwise. The twin of the first: processes that do
not form one job (each would train and write a whole model) are refused.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from interlock.analysis.artifacts import params_paths
from interlock.core.config import write_params
from interlock.training.trainer import read_training

from helpers.repo import BIN, SMOKE, command_timeout, commit, dvc, stages_run, user_env

TWO = ("train.launcher=accelerate launch --multi_gpu --num_processes 2 --num_machines 1 "
       "--mixed_precision no --dynamo_backend no")
#: one RFT seed (the smoke run trains two): what is compared is each fine-tuning, not how many
STEPS = ("train=grpo", "train.gradient_accumulation=2", "train.rl.steps=2", "train.rl.max_turns=3",
         "train.seeds=1")
FINE_TUNINGS = {"demo_sft": "demo_sft", "train": "rft/seed-0"}
STAGES = [*FINE_TUNINGS, "rl"]


def copy_of(smoke_repo: Path, root: Path, *overrides: str) -> Path:
    shutil.copytree(smoke_repo, root, ignore=shutil.ignore_patterns("wandb"))
    write_params(root / "conf", root / "params.yaml", [*SMOKE, *overrides])
    commit(root, "two processes")
    return root


def wandb_runs(root: Path) -> list[Path]:
    return sorted((root / "wandb").glob("offline-run-*")) if (root / "wandb").is_dir() else []


def trained(smoke_repo: Path, root: Path, *overrides: str) -> tuple[Path, dict[str, str]]:
    copy_of(smoke_repo, root, *STEPS, *overrides)
    logs = {stage: dvc("repro", "-s", stage, cwd=root, tracked=True) for stage in STAGES}
    assert all(stages_run(log) == [stage] for stage, log in logs.items()), logs
    return root, logs


@pytest.fixture(scope="module")
def one_process_run(smoke_repo, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    return trained(smoke_repo, tmp_path_factory.mktemp("one") / "smoke")


@pytest.fixture(scope="module")
def two_process_run(smoke_repo, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    return trained(smoke_repo, tmp_path_factory.mktemp("two") / "smoke", TWO)


def test_two_processes_train_what_one_trains(one_process_run, two_process_run) -> None:
    for stage, folder in FINE_TUNINGS.items():
        one = read_training(params_paths(one_process_run[0] / "params.yaml").models / folder)
        two = read_training(params_paths(two_process_run[0] / "params.yaml").models / folder)
        assert (one["processes"], two["processes"]) == (1, 2)
        assert two["steps"] == one["steps"] > 0, stage
        assert two["step_tokens"] == one["step_tokens"], stage
        assert two["learning_rates"] == one["learning_rates"], stage
        assert two["losses"][0] == pytest.approx(one["losses"][0], abs=1e-4), stage
        assert two["losses"][-1] == pytest.approx(one["losses"][-1], abs=1e-2), stage
        assert two["data_sha256"] == one["data_sha256"]


def test_two_processes_play_and_reward_the_episodes_one_plays(one_process_run, two_process_run) -> None:
    one, two = (json.loads((run[0] / "metrics" / "rl.json").read_text()) for run in (one_process_run,
                                                                                     two_process_run))
    assert (one["processes"], two["processes"]) == (1, 2)
    assert two["steps"] == one["steps"] == 2 and two["episodes"] == one["episodes"] > 0
    assert (two["reward"], two["pass_rate"]) == (one["reward"], one["pass_rate"])
    curves = [sorted(params_paths(run[0] / "params.yaml").rl_plot.glob("*.tsv"))
              for run in (one_process_run, two_process_run)]
    assert [p.read_text() for p in curves[0]] == [p.read_text() for p in curves[1]]


def test_the_main_process_alone_writes_the_checkpoint_metrics_and_run(one_process_run,
                                                                    two_process_run) -> None:
    """The checkpoint folders of one process and no temporary one beside them, each stage's
    metrics and timing written, one W&B run per stage."""
    root, logs = two_process_run
    models = params_paths(root / "params.yaml").models
    one = params_paths(one_process_run[0] / "params.yaml").models
    assert sorted(p.name for p in models.iterdir() if not p.name.startswith(".")) == \
        ["base", "demo_sft", "rft", "rl"]
    seeds = [sorted(p.name for p in (folder / "rft").iterdir()) for folder in (models, one)]
    assert seeds[0] == seeds[1] and seeds[0]
    for stage in STAGES:
        assert json.loads((root / "metrics" / f"{stage}.json").read_text())
        assert json.loads((root / "metrics" / "timing" / f"{stage}.json").read_text())["seconds"] > 0
        assert logs[stage].count("W&B run written to") == 1, logs[stage]
    runs = wandb_runs(root)
    assert len(runs) == len(STAGES), runs


def _rank_processes(launcher: int) -> dict[int, int]:
    """rank -> pid of the training processes under ``launcher`` (read from /proc)."""
    ranks = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        values = dict(item.split(b"=", 1) for item in environ if b"=" in item)
        if values.get(b"INTERLOCK_TEST_LAUNCH") == str(launcher).encode() and b"LOCAL_RANK" in values \
                and stat[0] != "Z":
            ranks[int(values[b"LOCAL_RANK"])] = int(entry.name)
    return ranks


def test_a_rank_killed_mid_run_leaves_nothing_half_written(smoke_repo, tmp_path) -> None:
    """SIGKILL to rank 1 while the ranks train: the launcher fails the stage, DVC records nothing,
    and the stage's output is absent (DVC removed the old one before the run), not half-written;
    the twin, the same command left alone, writes the checkpoint."""
    root = copy_of(smoke_repo, tmp_path / "smoke", TWO, *STEPS, "train.demo.epochs=20")
    locked = yaml.safe_load((root / "dvc.lock").read_text())["stages"]["demo_sft"]
    env = {**user_env(), "INTERLOCK_TEST_LAUNCH": "1"}
    stage = subprocess.Popen([str(BIN / "dvc"), "repro", "-s", "demo_sft"], cwd=root, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    deadline = time.monotonic() + command_timeout()
    killed = None
    try:
        for line in stage.stdout:  # the progress bar of rank 0: training has begun
            if "train demo_sft" in line and "step" in line:
                ranks = _rank_processes(1)
                if len(ranks) == 2:
                    os.kill(ranks[1], signal.SIGKILL)
                    killed = ranks[1]
                    break
            assert time.monotonic() < deadline
        stage.stdout.read()
        code = stage.wait(timeout=command_timeout())
    finally:
        if stage.poll() is None:
            os.killpg(stage.pid, signal.SIGKILL)
    assert killed is not None, "never saw both ranks training"
    assert code != 0
    models = params_paths(root / "params.yaml").models
    assert not (models / "demo_sft").exists()
    assert not [p for p in models.iterdir() if p.name not in ("base", "rft", "rl", ".gitignore")], \
        list(models.iterdir())
    assert yaml.safe_load((root / "dvc.lock").read_text())["stages"]["demo_sft"] == locked
    # the twin: nothing changed but the kill, and the checkpoint is there
    dvc("repro", "-s", "demo_sft", cwd=root)
    assert read_training(models / "demo_sft")["processes"] == 2


def test_a_process_launched_as_one_of_several_that_trains_alone_is_refused(monkeypatch) -> None:
    """The guard against each process training and writing a whole model: accelerate's state is
    already that of one process when the launcher's ``WORLD_SIZE`` says two."""
    from accelerate import PartialState

    from interlock.core.errors import InterlockError
    from interlock.training.trainer import launched_accelerator

    assert launched_accelerator().num_processes == 1 == PartialState().num_processes
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(InterlockError, match="launched as one of 2, but accelerate sees 1"):
        launched_accelerator()


def test_accelerates_cpu_flag_trains_in_one_process_and_says_so(tmp_path) -> None:
    """`accelerate launch --cpu --num_processes 2` starts one process (accelerate's simple
    launcher): it trains alone, correctly, and says how to get two."""
    script = tmp_path / "one.py"
    script.write_text("from interlock.training.trainer import launched_accelerator\n"
                      "print('processes', launched_accelerator().num_processes)\n")
    launch = [str(BIN / "accelerate"), "launch", "--cpu", "--num_processes", "2", "--num_machines", "1",
              "--mixed_precision", "no", "--dynamo_backend", "no"]
    done = subprocess.run([*launch, str(script)], cwd=tmp_path, env=user_env(), capture_output=True,
                          text=True, timeout=command_timeout())
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("processes") == 1 and "processes 1" in done.stdout
    assert "accelerate launch --cpu starts one process whatever --num_processes says" in done.stderr
