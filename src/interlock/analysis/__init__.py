"""What no stage runs: the ``interlock`` command line, the results report and notebook helpers,
ablation collection across experiments, graph drawing, artifact readers and W&B offline runs."""
