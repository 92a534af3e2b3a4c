"""How likely a model finds the assistant turns of a conversation: mean token negative
log-likelihood (NLL).

Rollout-time intervention scores each correction's corrected turns under the starting checkpoint,
and the policy's own accepted turns as the reference: a correction far less likely than what the
policy writes itself is a distribution shift the filter drops (:mod:`interlock.intervention.shift`).
Conversations are rendered as training renders them
(:func:`~interlock.training.examples.encode_conversation`), so the scored tokens are exactly the
tokens that would carry loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from interlock.training.examples import encode_conversation

#: from this many conversations on, scoring shows a progress bar
PROGRESS_FROM = 32


def conversation_nll(model, tokenizer, items: Sequence[tuple[list[dict], int]], *,
                     max_length: int) -> list[float | None]:
    """For each ``(messages, loss_from_message)`` (messages as :meth:`Message.to_dict` dicts), the
    mean NLL (nats per token) of the assistant tokens of messages ``loss_from_message`` on under
    ``model`` (in eval mode; the log-softmax in fp32); None where there is no such token or the
    conversation is longer than ``max_length`` tokens. One forward pass per conversation, with the
    vocabulary projection on the target positions only."""
    import torch
    import torch.nn.functional as F

    device = next(model.parameters()).device
    scores: list[float | None] = []
    with torch.inference_mode():
        for messages, loss_from in tqdm(items, desc="nll", unit="conversation", dynamic_ncols=True,
                                        disable=len(items) < PROGRESS_FROM):
            ids, mask = encode_conversation(tokenizer, list(messages), loss_from)
            targets = [t - 1 for t in range(1, len(ids)) if mask[t]]  # token t is predicted at t - 1
            if not targets or len(ids) > max_length:
                scores.append(None)
                continue
            positions = torch.tensor(targets, device=device)
            out = model(input_ids=torch.tensor([ids], device=device), logits_to_keep=positions,
                        use_cache=False)
            labels = torch.tensor(ids, device=device)[positions + 1]
            scores.append(float(F.cross_entropy(out.logits[0].float(), labels, reduction="mean")))
    return scores


def checkpoint_nll(checkpoint: Path | str, items: Sequence[tuple[list[dict], int]], max_length: int, *,
                   device: str | None = None, dtype: str = "float32") -> list[float | None]:
    """:func:`conversation_nll` under the checkpoint at ``checkpoint`` (loaded in ``dtype``; on
    ``device``, default the CPU)."""
    from interlock.models.checkpoint import load_checkpoint

    model, tokenizer = load_checkpoint(checkpoint, device=device, dtype=dtype)
    return conversation_nll(model, tokenizer, items, max_length=max_length)
