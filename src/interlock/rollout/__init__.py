"""Rollouts (stages ``demos``, ``rollouts``): episodes of a policy on tasks, through one engine.

- :mod:`.engine`: the rollout engine (lockstep batches for local models, asynchronous requests
  for servers; tool calls, limits) and the :class:`~interlock.rollout.engine.Environment` an
  episode acts in: every role that calls a model in a tool-calling loop (the solver, the agent
  judge's review, external benchmarks) runs here;
- :mod:`.trajectory`: a rollout's record;
- :mod:`.scripted`: scripted solvers (oracle, noisy; adversaries' plans come from
  :mod:`interlock.testing.adversaries`) behind the chat interface;
- :mod:`.solvers`: who acts in a stage's episodes (a checkpoint or a scripted solver);
- :mod:`.runs`: planning episodes, resumable runs, demonstrations;
- :mod:`.stage`: the ``demos`` and ``rollouts`` stages.
"""
