"""Transfer evaluation (stage ``evaluate``): every configured model on every benchmark, graded by
ground truth.

- :mod:`~interlock.evaluation.benchmarks`: the adapter interface (:class:`Benchmark`: tasks, own
  episode execution, own grading, standard per-episode results), how to plug in external
  benchmarks (AutomationBench-, JobBench-, Harvey-LAB-style, BFCL v4 multi-turn), and the
  built-in benchmark (:class:`AdmittedPool`: admitted tasks of the held-out ``benchmark`` pool, of
  the in-distribution ``indist`` pool or of ``dev``, graded by the agent judge's compiled checks);
- :mod:`~interlock.evaluation.bfcl`: BFCL v4's four multi-turn categories, one pool each, from the
  installed ``bfcl-eval`` (:class:`BfclMultiTurn`), graded by BFCL's own multi-turn checker;
- :mod:`~interlock.evaluation.metrics`: per-episode grades (pass, weighted score, criterion pass
  rate, completion gap), per-pool metrics, Wilson intervals for the binary rates, bootstrap
  intervals over tasks for the other metrics and paired ones for the deltas, and what each pool
  can detect (:func:`~interlock.evaluation.metrics.detectability`);
- :mod:`~interlock.evaluation.run`: every model on every benchmark, resumable (:func:`run_evaluation`);
- :mod:`~interlock.evaluation.stage`: the ``evaluate`` stage.
"""
