"""Judges: grade what a rollout did, criterion by criterion.

- :mod:`~interlock.judges.sandbox`: compiled checks and model-written check scripts in separate,
  limited processes (CPU, memory, file size, wall clock; no network; none of the parent's
  environment);
- :mod:`~interlock.judges.agent`: the agent judge, on a copy of the final workspace, with the
  diff against the initial one and a collateral-damage report;
- :mod:`~interlock.judges.text`: the text judge, which sees only the transcript;
- :mod:`~interlock.judges.base`: the judgement record, acceptance, transcripts as text;
- :mod:`~interlock.judges.metrics`: cost, and each judge's errors against the compiled checks;
- :mod:`~interlock.judges.run`: the ``judge`` and ``accept`` stages as library functions.

Nothing here is imported by this package module, so a sandbox child starts light.
"""
