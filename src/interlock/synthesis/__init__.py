"""Task synthesis (stages ``domains``, ``blueprints``, ``graphs``, ``packs``): the domain catalog
and its kinds, blueprints, completion graphs, the workspace and its tools, compiled checks, the
three generators that compile a graph into a task pack, the oracle, and reading tasks back."""
