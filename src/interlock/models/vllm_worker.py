"""What vLLM's workers learn from Interlock: taking a trainer's weights in place
(:class:`PolicyWeights`, a vLLM worker extension).

vLLM mixes the class named by ``worker_extension_cls`` into its worker and lets callers reach its
methods by name through ``collective_rpc``: the in-process engine calls them directly
(:meth:`~interlock.models.vllm_backend.VLLMBackend.load_weights`), a managed server through its
``/collective_rpc`` endpoint (:meth:`~interlock.models.serving.ServedBackend.load_weights`), so the
two take new weights by one code path. This module is imported by vLLM's worker, in whichever
process runs the model; it imports nothing of Interlock's.
"""

from __future__ import annotations

#: the extension as vLLM's ``worker_extension_cls`` names it
POLICY_WEIGHTS = "interlock.models.vllm_worker.PolicyWeights"
#: the method a caller asks for through ``collective_rpc``
LOAD_POLICY = "load_policy"


class PolicyWeights:
    """Mixed into vLLM's worker: load a policy's weights into the running model."""

    def load_policy(self, weights_path: str | None = None, weights: list | None = None) -> None:
        """Reload the model in place from ``weights`` (name and tensor pairs, as a transformers
        model's ``named_parameters`` gives them: in-process callers) or from the safetensors files
        in the folder ``weights_path`` (a server's callers, which can send only text), then make a
        tied output layer read the new embeddings (:func:`tie_output_embeddings`). vLLM's reload
        undoes what loading did to the weights first (a CPU repacks them for its kernels), which a
        model's own ``load_weights`` cannot take again."""
        from vllm.config import set_current_vllm_config

        self.reload_weights(weights_iterator=weights, weights_path=weights_path, is_checkpoint_format=True)
        with set_current_vllm_config(self.vllm_config):
            tie_output_embeddings(self.model_runner.get_model())


def tie_output_embeddings(model) -> None:
    """Where the model ties its output layer to its input embeddings (SmolLM2, the tiny model), make
    the output layer read the embeddings again: vLLM 0.32's in-place reload gives the embeddings a
    new tensor and leaves the output layer on the old one (it logs "ParallelLMHead: Failed to load
    weights"), so the engine would sample through the weights it started with."""
    head, inner = getattr(model, "lm_head", None), getattr(model, "model", None)
    embeddings = getattr(inner, "embed_tokens", None)
    if head is None or embeddings is None or not model.config.tie_word_embeddings:
        return
    head.weight = embeddings.weight
    method = getattr(head, "quant_method", None)
    if method is not None:  # a CPU's logits kernel packs the weight it reads (vLLM's cpu_linear)
        method.process_weights_after_loading(head)
