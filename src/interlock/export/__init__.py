"""Exports: what the pipeline made, written in formats other tools read without this package."""
