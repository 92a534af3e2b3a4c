"""Exports: what the pipeline made (the training set, tasks, trajectories) in formats other tools
read without this package."""
