"""The ``vllm`` backend: vLLM's offline engine for GPU machines (the ``gpu`` extra).

One ``LLM.chat`` call per turn carries every live episode; vLLM's automatic prefix caching
keeps each conversation's prefix, which is what the transformers backend does by hand on CPU.
Tensor parallelism comes from the config; data parallelism from running several engines (DVC
queue workers or Ray replicas).

A request with a ``response_format`` (a JSON schema: a model judge's answer) is decoded under
vLLM's structured outputs (``SamplingParams(structured_outputs=StructuredOutputsParams(json=
schema))``, the API since vLLM 0.12, which removed ``guided_decoding``); the caller still
validates the reply. Written against vLLM's current source, not run here (no GPU machine).
"""

from __future__ import annotations

from pathlib import Path

from interlock.core.backend import ChatRequest, Completion, EpisodeTask
from interlock.core.config import BackboneConfig
from interlock.core.registry import BACKENDS


class VLLMBackend:
    name = "vllm"

    def __init__(self, checkpoint: str, *, dtype: str = "bfloat16", tensor_parallel_size: int = 1,
                 max_model_len: int | None = None, gpu_memory_utilization: float = 0.85) -> None:
        from vllm import LLM  # the gpu extra: never imported on CPU machines

        self.llm = LLM(model=checkpoint, dtype=dtype, tensor_parallel_size=tensor_parallel_size,
                       max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization,
                       enable_prefix_caching=True, seed=0)
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len

    def begin(self, key: str, task: EpisodeTask) -> None:
        pass

    def end(self, key: str) -> None:
        pass

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        tokenizer = self.llm.get_tokenizer()
        prompts, fits = [], []
        for request in requests:
            ids = tokenizer.apply_chat_template([m.to_dict() for m in request.messages],
                                                tools=list(request.tools) or None,
                                                add_generation_prompt=True, tokenize=True)
            ids = ids["input_ids"] if isinstance(ids, dict) else ids
            fits.append(len(ids) + request.max_new_tokens <= self.max_model_len)
            prompts.append(ids)
        live = [i for i, fit in enumerate(fits) if fit]
        outputs = self.llm.generate(
            [{"prompt_token_ids": prompts[i]} for i in live],
            [SamplingParams(temperature=requests[i].temperature, max_tokens=requests[i].max_new_tokens,
                            seed=requests[i].seed, stop=["<|im_end|>"],
                            structured_outputs=None if requests[i].response_format is None
                            else StructuredOutputsParams(json=requests[i].response_format))
             for i in live],
            use_tqdm=False)
        completions = [Completion("", len(p), 0, "context") for p in prompts]
        for i, output in zip(live, outputs, strict=True):
            result = output.outputs[0]
            completions[i] = Completion(result.text, len(prompts[i]), len(result.token_ids),
                                        "length" if result.finish_reason == "length" else "stop")
        return completions


@BACKENDS.register("vllm")
def build(backbone: BackboneConfig, checkpoint: Path) -> VLLMBackend:
    return VLLMBackend(str(checkpoint), dtype=backbone.dtype, max_model_len=backbone.max_context)
