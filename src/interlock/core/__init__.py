"""What every stage and package stands on, and which imports nothing above it: errors, the
configuration (``params.yaml``), paths, Parquet I/O and schemas, seeds, the chat and backend
types every model-calling role shares, package resources, the stage runner and W&B tracking."""
