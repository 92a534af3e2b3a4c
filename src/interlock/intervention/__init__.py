"""Rollout-time intervention (RTI): diagnose failed rollouts, correct them, verify, filter and reweight."""
