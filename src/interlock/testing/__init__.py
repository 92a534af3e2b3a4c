"""Test doubles shipped for users who test their own extensions (a backend, a benchmark, a judge):
what the project's own tests and performance scripts (perf/) use, in a package no stage imports.

- :mod:`.loopback_server`: an OpenAI-compatible chat-completions server on 127.0.0.1, answering
  what a script makes of each request (:class:`~.loopback_server.ScriptedAgent` drives a real
  workspace episode), to test a client backend or the rollout engine against real HTTP;
- :mod:`.adversaries`: scripted solvers that try to game the judge (attacks on correct work, the
  no-work controls, benign variations), played by the pipeline's
  :class:`~interlock.rollout.scripted.ScriptedBackend` given their ``PLANS``;
- :mod:`.forgeries`: honest episodes' records changed around the policy's own turns.

Nothing under ``interlock`` outside this package imports it (``tests/test_layout.py`` holds it
above every other package), so no stage's dependencies include it and editing it reruns nothing.
"""
