"""Interlock's admitted tasks as environments of the RL frameworks practitioners train with: one
adapter a framework (:mod:`~interlock.frameworks.skyrl`), each over the same hosted episodes and
the same judge (:mod:`~interlock.frameworks.episodes`)."""
