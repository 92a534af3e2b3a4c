"""Recursive synthesis (RST): rewrite verified tasks into harder ones, with transformation contracts."""
