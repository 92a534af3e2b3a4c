"""Task admission (stage ``review``): a task pack is admitted only if its reviews are clean.

- :mod:`.coverage`: every graph node and relation survives into the three artifacts;
- :mod:`.critic`: every criterion is derivable from public material alone;
- :mod:`.controls`: checks fail on the untouched workspace and pass on the oracle's;
- :mod:`.execution`: the execution gate, a judged validation rollout per statically admitted task;
- :mod:`.stage`: the ``review`` stage.
"""
