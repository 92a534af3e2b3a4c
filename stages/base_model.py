"""Stage `base_model`: the configured backbone as a checkpoint in the project's common form.

Its library side is `interlock.models.stage.base_model`."""

from interlock.core.runner import run_stage
from interlock.models.stage import base_model

if __name__ == "__main__":
    run_stage("base_model", base_model)
