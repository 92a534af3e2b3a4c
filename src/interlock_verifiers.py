"""The Interlock environment under the name verifiers 0.4 imports it by: ``vf-eval
interlock-verifiers`` imports the top-level module ``interlock_verifiers`` (a plugin id is a
top-level module there; a dotted one is not found). The environment is
:mod:`interlock.frameworks.verifiers_env`."""

from interlock.frameworks.verifiers_env import *  # noqa: F403
from interlock.frameworks.verifiers_env import __all__  # noqa: F401
