"""GRPO on verified tasks through TRL's ``GRPOTrainer``: the rollout engine plays each step's
groups of episodes (TRL's ``rollout_func``) and the agent judge's verdicts are the reward.

TRL hands the rollout function the step's prompts, each already repeated ``group_size`` times;
:class:`GroupRollouts` finds each prompt's task (:class:`~interlock.rl.environment.TaskPool`),
plays one episode per prompt from a fresh workspace with the policy being trained, judges every
episode (:func:`~interlock.rl.environment.score`), and returns the token ids the policy sampled
with tool results masked out (``env_mask``), each sampled token's log-probability, and the
rewards, which reach TRL's reward functions as keyword arguments.

Who plays (``train.rl.generation``): ``transformers``, the trained weights of this step
themselves (exactly on-policy); or ``vllm``, an engine (:class:`PolicyEngine`: in this process on a
CPU, a managed ``vllm serve`` on a GPU, as ``train.rl.vllm_engine`` says) built once from the
starting checkpoint and given the trained weights after every optimizer step
(TRL calls its ``sync_weights`` before each step's rollouts, as it does for its own vLLM
generation), whose sampling log-probabilities TRL's importance-sampling correction compares with
the trained weights' own (``vllm_importance_sampling_correction``). Each
episode's sampling seed comes from the run's seed, the step and its place in the batch, so a run
resumed from a checkpoint plays the steps after it as an uninterrupted run would.

Under ``train.launcher`` (several processes) a step's prompts are shared out by TRL: each process
plays and judges its share, seeded by each episode's place in the whole step (so the episodes are
one process's), the step's figures are gathered to the main process, which alone writes the step
log and the policy.

Trainer checkpoints (weights, optimizer, scheduler, RNG states) go under ``work`` every
``save_steps``; a run killed at any point starts again from the last one, and a run under other
settings starts afresh. The trained policy is written like every checkpoint of the project
(safetensors, GGUF, manifest).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from interlock.core.backend import ChatBackend
from interlock.core.config import RLConfig, ServerConfig
from interlock.core.errors import InterlockError
from interlock.core.io import fingerprint, write_json
from interlock.core.seeds import stable_seed
from interlock.judging.judges import Judge
from interlock.models.checkpoint import load_checkpoint, save_checkpoint, weights_sha256
from interlock.rl.environment import ScoredEpisode, TaskPool, play, policy_tokens, sampling_logprobs, score
from interlock.rl.reward import FAILED_ENDS
from interlock.rollout.engine import RolloutLimits
from interlock.training.trainer import check_one_job, launched_processes

STEPS_FILE = "steps.json"
RUN_FILE = "run.json"


@dataclass(frozen=True)
class GRPOSettings:
    """What decides a GRPO run besides its starting weights and tasks."""

    rl: RLConfig
    seed: int
    limits: RolloutLimits  # the episodes' rules and sampling (max_turns is ``rl.max_turns``)
    compute_dtype: str  # bfloat16: autocast over fp32 weights, where this machine measured it faster
    max_context: int
    max_grad_norm: float
    #: the backbone's server settings: a policy server's client limits and start-up time
    #: (``rl.generation: vllm`` with ``rl.vllm_engine`` resolving to ``server``)
    server: ServerConfig | None = None


class StepLog:
    """One row per step (step, reward and pass rate means, episodes, failed and untrained episodes,
    rollout and judge seconds, seconds per episode), kept beside the trainer checkpoints so a resumed
    run's record holds the steps before the kill; rewritten whole, atomically, after each step."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[dict] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []

    def resume_at(self, step: int) -> None:
        """Forget the steps after the checkpoint a run resumes from (they will be played again)."""
        self.rows = [row for row in self.rows if row["step"] <= step]

    def add(self, row: dict, *, write: bool = True) -> None:
        self.rows = [r for r in self.rows if r["step"] != row["step"]] + [row]
        if write:
            write_json(self.path, self.rows)


class GroupRollouts:
    """TRL's ``rollout_func``: one judged episode per prompt it is handed."""

    def __init__(self, pool: TaskPool, judge: Judge, settings: GRPOSettings, workdir: Path, log: StepLog,
                 backend: ChatBackend | None = None, engine: PolicyEngine | None = None) -> None:
        self.pool, self.judge, self.settings = pool, judge, settings
        self.workdir, self.log = workdir, log
        self.backend = backend  # None: the trained weights themselves (tests hand a scripted policy)
        self.engine = engine  # the vLLM engine that plays instead of the trained weights, if any
        self.last: list[ScoredEpisode] = []  # the latest step's judged episodes

    def __call__(self, prompts: Sequence, trainer) -> dict[str, list]:
        step = trainer.state.global_step + 1
        accelerator = trainer.accelerator
        tasks = [self.pool.task_for(prompt) for prompt in prompts]
        first = accelerator.process_index * len(tasks)  # this share's place in the step
        seeds = [stable_seed(self.settings.seed, "rl", step, first + index) % 2**31
                 for index in range(len(tasks))]
        tokenizer = trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training
        start = time.perf_counter()
        try:
            if self.engine is not None:
                self.engine.synced(trainer.state.global_step)
            backend = self.backend or (self.engine.backend if self.engine is not None else
                                       _policy_backend(model, tokenizer, self.settings.max_context))
            trajectories = play(tasks, seeds, backend, self.settings.limits,
                                self.workdir / f"process-{accelerator.process_index}", prefix=f"step{step}")
        finally:
            model.train(was_training)
        played = time.perf_counter()
        scored = self.last = score(trajectories, tasks, self.judge, self.settings.rl.reward)
        judged = time.perf_counter()
        tokens = [policy_tokens(s.trajectory, tokenizer, self.settings.max_context) for s in scored]
        rewards, passed = [s.reward for s in scored], [float(s.passed) for s in scored]
        share = {"rewards": rewards, "passed": passed,
                 "failed": sum(s.trajectory.finish_reason in FAILED_ENDS or s.problem is not None
                               for s in scored),
                 "untrained": sum(t.problem is not None for t in tokens),
                 "rollout_seconds": played - start, "judge_seconds": judged - played}
        shares = accelerator.gather_for_metrics([share], use_gather_object=True) \
            if accelerator.num_processes > 1 else [share]
        every = [x for s in shares for x in s["rewards"]]
        self.log.add({"step": step, "reward": _mean(every),
                      "pass_rate": _mean([x for s in shares for x in s["passed"]]), "episodes": len(every),
                      "failed": sum(s["failed"] for s in shares),
                      "untrained": sum(s["untrained"] for s in shares),
                      # the processes play at once: a step takes as long as its slowest share
                      "rollout_seconds": round(max(s["rollout_seconds"] for s in shares), 3),
                      "judge_seconds": round(max(s["judge_seconds"] for s in shares), 3),
                      "seconds_per_episode": round((judged - start) / max(1, len(scored)), 3)},
                     write=accelerator.is_main_process)
        return {"prompt_ids": [t.prompt_ids for t in tokens],
                "completion_ids": [t.completion_ids for t in tokens],
                "logprobs": [sampling_logprobs(s.trajectory, tokenizer, t) for s, t in zip(scored, tokens,
                                                                                          strict=True)],
                "env_mask": [t.env_mask for t in tokens],
                "reward": rewards, "passed": passed}


class PolicyEngine:
    """``train.rl.generation: vllm``: a vLLM engine that plays the episodes, built from the
    starting checkpoint and given the trained weights whenever the optimizer has stepped since it
    last had them: in this process (handed the tensors), or a managed ``vllm serve`` on loopback
    (sent them through a file and its weight-update call: :func:`~interlock.models.serving.serve_policy`),
    as ``rl.vllm_engine`` says. TRL calls :meth:`sync_weights` before each step's rollouts (its
    contract for a rollout function with ``use_vllm``); the rollout function checks it was."""

    def __init__(self, start: Path, settings: GRPOSettings, work: Path) -> None:
        import torch
        from accelerate import PartialState

        where, gpu = settings.rl.vllm_engine, torch.cuda.is_available()
        self.served = where == "server" or (where == "auto" and gpu)
        if self.served:
            from interlock.models.serving import serve_policy

            if settings.server is None:
                raise InterlockError("a policy server needs the backbone's server settings",
                                     field="train.rl.vllm_engine")
            process = PartialState()  # under a launcher, each process serves its own share on its device
            self.backend = serve_policy(start, settings.server, dtype=settings.compute_dtype,
                                        max_model_len=settings.max_context, gpu_memory_utilization=0.3,
                                        weights=work / f"policy-weights-{process.process_index}",
                                        device=process.local_process_index if gpu else None)
        else:
            from interlock.models.vllm_backend import VLLMBackend

            self.backend = VLLMBackend(str(start), dtype=settings.compute_dtype,
                                       max_model_len=settings.max_context, gpu_memory_utilization=0.3,
                                       in_process=True)
        self.trainer = None  # set once the trainer exists
        self.step = 0  # the optimizer step whose weights the engine holds (0: the starting checkpoint's)

    def sync_weights(self) -> None:
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        self.backend.load_weights(model.named_parameters())
        self.step = self.trainer.state.global_step

    def synced(self, step: int) -> None:
        """Make sure the engine holds the weights of ``step`` (TRL's call may be missing after a
        resume, or in a TRL that no longer makes it)."""
        if self.step != step:
            self.sync_weights()

    def close(self) -> None:
        self.backend.close()


def _policy_backend(model, tokenizer, max_context: int) -> ChatBackend:
    from interlock.models.transformers_backend import TransformersBackend

    # one backend a step: its prefix cache (each episode's earlier turns) never outlives the weights
    return TransformersBackend(model=model, tokenizer=tokenizer, max_context=max_context)


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 6) if values else 0.0


def judged_reward(prompts, completions, reward, **_) -> list[float]:
    """TRL reward function: the agent judge's reward the rollout function computed."""
    return list(reward)


def judged_pass(prompts, completions, passed, **_) -> list[float]:
    """TRL reward function of weight 0: whether every mandatory criterion passed (logged as
    ``rewards/judged_pass/mean``, the pass rate of the step)."""
    return list(passed)


def train_grpo(start: Path, pool: TaskPool, judge: Judge, settings: GRPOSettings, out: Path, work: Path, *,
               backend: ChatBackend | None = None, callbacks: Sequence = ()) -> tuple[dict, list[dict]]:
    """Train the checkpoint at ``start`` with GRPO on ``pool``; write the result to ``out``; return
    the run's metrics and its per-step rows. ``backend``: who plays the episodes instead of the
    trained weights (tests); ``callbacks``: extra ``transformers`` trainer callbacks."""
    if settings.limits.temperature <= 0:
        raise InterlockError("GRPO compares the episodes of a group: at temperature 0 they are all alike "
                             "and nothing is learned; sample at a temperature above 0",
                             field="backbone.generation.temperature")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL 1.x
    import torch
    from accelerate import PartialState
    from datasets import Dataset
    from transformers.trainer_utils import get_last_checkpoint
    from trl import GRPOConfig, GRPOTrainer

    rl = settings.rl
    run_id = fingerprint(rl.model_dump(), settings.seed, dataclasses.asdict(settings.limits),
                         settings.compute_dtype, settings.max_context, settings.max_grad_norm,
                         weights_sha256(start), [task.task_id for task in pool.tasks],
                         "policy" if backend is None else backend.name)
    run_file = work / RUN_FILE
    gpu = torch.cuda.is_available()
    with PartialState(cpu=not gpu).main_process_first():  # the others find the main one's folder
        if not run_file.is_file() or json.loads(run_file.read_text(encoding="utf-8")) != {"run_id": run_id}:
            shutil.rmtree(work, ignore_errors=True)  # another run's checkpoints: start afresh
            work.mkdir(parents=True)
            write_json(run_file, {"run_id": run_id})
    trainer_dir = work / "trainer"
    resume = get_last_checkpoint(str(trainer_dir)) if trainer_dir.is_dir() else None
    resumed_at = int(resume.rsplit("-", 1)[1]) if resume else 0
    log = StepLog(work / STEPS_FILE)
    log.resume_at(resumed_at)

    processes = launched_processes()
    episodes = rl.tasks_per_step * rl.group_size
    if episodes % processes:
        raise InterlockError(f"a step's {episodes} episodes ({rl.tasks_per_step} tasks x {rl.group_size}) "
                             f"cannot be shared out evenly between {processes} processes",
                             field="train.rl.tasks_per_step")
    model, tokenizer = load_checkpoint(start, "cuda" if gpu else "cpu", "float32")
    args = GRPOConfig(
        # the episodes' sampling temperature: TRL scores the policy's log-probabilities (the loss,
        # the KL term and the importance ratio against the engine's) at this temperature
        temperature=settings.limits.temperature,
        output_dir=str(trainer_dir), per_device_train_batch_size=episodes // processes,
        num_generations=rl.group_size, max_steps=rl.steps, learning_rate=rl.learning_rate, beta=rl.kl,
        lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=settings.max_grad_norm,
        reward_weights=[1.0, 0.0], logging_steps=1, save_strategy="steps", save_steps=rl.save_steps,
        save_total_limit=1, report_to=[], seed=settings.seed, data_seed=settings.seed, use_cpu=not gpu,
        bf16=settings.compute_dtype == "bfloat16", disable_tqdm=False)
    engine = PolicyEngine(start, settings, work) if rl.generation == "vllm" and backend is None else None
    rollouts = GroupRollouts(pool, judge, settings, work / "episodes", log, backend, engine)
    trainer = GRPOTrainer(model=model, reward_funcs=[judged_reward, judged_pass], args=args,
                          train_dataset=Dataset.from_list([{"prompt": p} for p in pool.prompts()]),
                          processing_class=tokenizer, rollout_func=rollouts, callbacks=list(callbacks))
    check_one_job(trainer.accelerator.num_processes)
    if engine is not None:  # TRL's vLLM path, with this engine: weight sync and importance sampling
        engine.trainer = trainer
        trainer.use_vllm, trainer.vllm_generation, trainer._last_loaded_step = True, engine, -1
    started = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=resume)
    finally:
        if engine is not None:
            engine.close()
    seconds = time.perf_counter() - started
    main = trainer.accelerator.is_main_process
    if main:
        trained = trainer.accelerator.unwrap_model(trainer.model).eval()
        trained.config.use_cache = True
        save_checkpoint(trained.to("cpu"), tokenizer, out, source="finetuned", origin=str(start), name="rl",
                        max_context=settings.max_context, origin_sha256=weights_sha256(start),
                        compute_dtype=settings.compute_dtype,
                        notes=f"GRPO, {rl.steps} steps of {rl.tasks_per_step} tasks x {rl.group_size} "
                              f"episodes, reward {rl.reward}, {processes} process(es)")
    trainer.accelerator.wait_for_everyone()
    rows = log.rows
    played = [row for row in rows if row["step"] > resumed_at]
    metrics = {
        "trained": True, "steps": len(rows), "episodes": sum(r["episodes"] for r in rows),
        "tasks": len(pool.tasks), "resumed_from_step": resumed_at,
        **{key: {"first": rows[0][key], "last": rows[-1][key], "mean": _mean([r[key] for r in rows])}
           for key in ("reward", "pass_rate")},
        "failed_episodes": sum(r["failed"] for r in rows),
        # episodes no token of which was trained (the policy wrote nothing, too long, unrenderable)
        "untrained_episodes": sum(r["untrained"] for r in rows),
        # this run's own steps (a resumed run did not time the steps before the kill)
        "seconds_per_step": round(seconds / max(1, len(played)), 2),
        "seconds_per_episode": _mean([r["seconds_per_episode"] for r in played]),
        "loss_type": args.loss_type,
        "processes": processes,
        "generation": "scripted" if backend is not None else rl.generation,
    }
    if main:
        shutil.rmtree(work, ignore_errors=True)  # finished: nothing to resume
    return metrics, rows
