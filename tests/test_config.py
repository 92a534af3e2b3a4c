"""The Hydra config under conf/ composes, and the committed params.yaml is its composed default.

`dvc repro` never composes: stages read the committed params.yaml. So params.yaml must be
exactly what DVC's Hydra integration (`dvc exp run`) would write for the default choices.
To regenerate it after changing conf/: `interlock params`.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest
import yaml

from interlock.config import Params, compose_params, params_text

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
PARAMS = ROOT / "params.yaml"

SCALE_TRAIN_DOMAINS = {"smoke": 4, "default": 16, "paper": 128}
DOMAIN_OPTIONS = ["d4", "d8", "d16", "d32", "d64", "d128"]


def compose_config(overrides: list[str] | None = None) -> dict:
    return compose_params(CONF, overrides)


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def test_params_yaml_is_composed_default() -> None:
    composed = compose_config()
    committed = yaml.safe_load(PARAMS.read_text(encoding="utf-8"))
    assert committed == composed, (
        "params.yaml differs from the composed default of conf/; regenerate it with `interlock params`"
    )


def test_params_yaml_text_matches_dvc_dump() -> None:
    # Byte-for-byte what DVC writes, so that `dvc exp run` with no overrides changes nothing.
    assert PARAMS.read_text(encoding="utf-8") == params_text(compose_config())


def test_scale_options_are_the_expected_ones() -> None:
    assert _options("scale") == sorted(SCALE_TRAIN_DOMAINS)


def test_domains_options_are_the_expected_ones() -> None:
    assert _options("domains") == sorted(DOMAIN_OPTIONS)


@pytest.mark.parametrize("option", sorted(SCALE_TRAIN_DOMAINS))
def test_scale_option_composes(option: str) -> None:
    cfg = compose_config([f"scale={option}"])
    scale = Params.model_validate(cfg).scale  # the stages accept it
    assert scale.name == option
    assert scale.train_domains == SCALE_TRAIN_DOMAINS[option]
    assert scale.heldout_domains > 0
    assert set(scale.tasks_per_domain) == {"demo", "rft", "dev", "benchmark"}
    assert set(scale.task_size.model_dump()) == {"decisions", "effects_per_decision", "couplings",
                                                 "distractors"}
    assert all(isinstance(v, int) and v > 0 for v in scale.tasks_per_domain.values())
    assert all(isinstance(v, int) and v >= 0 for v in scale.task_size.model_dump().values())
    assert scale.row_group_tasks > 0
    # Choosing a scale leaves the other groups and top-level keys at their defaults.
    assert cfg["domains"]["name"] == "d16"
    assert cfg["seed"] == 20261129


@pytest.mark.parametrize("option", DOMAIN_OPTIONS)
def test_domains_option_composes(option: str) -> None:
    cfg = compose_config([f"domains={option}"])
    assert cfg["domains"]["name"] == option
    assert cfg["domains"]["count"] == int(re.fullmatch(r"d(\d+)", option).group(1))
    # `domains` must not change anything the synthesis stages read.
    assert cfg["scale"] == compose_config()["scale"]


def test_dvc_hydra_integration_enabled() -> None:
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".dvc" / "config", encoding="utf-8")
    assert parser.has_section("hydra")
    assert parser.getboolean("hydra", "enabled")
    assert parser.get("hydra", "config_dir") == "conf"
    assert parser.get("hydra", "config_name", fallback="config") == "config"
