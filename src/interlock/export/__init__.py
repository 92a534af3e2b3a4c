"""Exports other tools read: tasks in Harbor's task layout, trajectories in ATIF."""
