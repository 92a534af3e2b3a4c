"""Judging (stages ``judge``, ``accept``): grade what a rollout did, criterion by criterion.

- :mod:`~interlock.judging.sandbox`: compiled checks and model-written check scripts in separate,
  limited processes (CPU, memory, file size, wall clock; no network; none of the parent's
  environment); model-written scripts only behind the operating-system boundary that
  :mod:`~interlock.judging.boundary` records as available (its own namespaces, as ``nobody``);
- :mod:`~interlock.judging.agent`: the agent judge, on the workspace that replaying the
  transcript's tool calls gives, with the diff against the initial one and a collateral-damage
  report;
- :mod:`~interlock.judging.inspection`: the agent judge's model review of a criterion, an
  environment of the rollout engine;
- :mod:`~interlock.judging.text`: the text judge, which sees only the transcript;
- :mod:`~interlock.judging.verdicts`: the judgement record, acceptance, transcripts as text;
- :mod:`~interlock.judging.metrics`: cost, and each judge's errors against the compiled checks;
- :mod:`~interlock.judging.stage`: the ``judge`` and ``accept`` stages.

Nothing here is imported by this package module, so a sandbox child starts light.
"""
