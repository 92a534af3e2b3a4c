"""Training (stages ``sample``, ``demo_sft``, ``train``): supervised fine-tuning on trajectories; the
demonstration warm start and rejection-sampling fine-tuning share one recipe.

- :mod:`.sampling`: the training set of one domain breadth;
- :mod:`.examples`: trajectories rendered with the checkpoint's chat template into token ids and an
  assistant-only loss mask (what the rollout engine feeds the model, byte for byte), with weights;
- :mod:`.batching`: padding-free packed micro-batches under a token budget;
- :mod:`.trainer`: the loop (``accelerate``, so ``accelerate launch`` runs it on several GPUs),
  a weighted loss over assistant tokens only, optional LoRA, and the checkpoint it writes;
- :mod:`.stage`: the ``sample``, ``demo_sft`` and ``train`` stages.
"""
