"""Static reviews that decide whether a task pack is admitted.

- :mod:`coverage`: every graph node and relation survives into the three artifacts;
- :mod:`critic`: every criterion is derivable from public material alone;
- :mod:`controls`: checks fail on the untouched workspace and pass on the oracle's.
"""
