"""params.yaml as the tool writes it: JSON where every YAML reader reads the values back
as they were, block YAML where one would not."""

import json

import pytest
import yaml
from omegaconf import OmegaConf
from ruamel.yaml import YAML

from pipeline.cli import params_file
from tests.conftest import REPO


def _readers(text: str, tmp_path) -> list[object]:
    """What PyYAML (YAML 1.1), ruamel (YAML 1.2, DVC's) and OmegaConf (the stages') read."""
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return [
        yaml.safe_load(text),
        YAML(typ="safe").load(text),
        OmegaConf.to_container(OmegaConf.load(path)),
    ]


def test_this_repositorys_params_are_json_and_read_alike_everywhere(tmp_path):
    text = (REPO / "params.yaml").read_text()
    values = json.loads(text)
    assert text == params_file.text(values)
    assert all(read == values for read in _readers(text, tmp_path))


@pytest.mark.parametrize(
    "value",
    [1e-05, 1e16, float("inf"), "emoji \U0001f600"],
    ids=["exponent", "large", "inf", "astral"],
)
def test_a_value_json_would_not_carry_through_yaml_is_written_as_yaml(tmp_path, value):
    values = {"precision": {"gate": {"max_abs_error": value}}, "b": [1, 0.5, None, True]}
    text = params_file.text(values)
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert all(read == values for read in _readers(text, tmp_path))


def test_control_characters_quotes_and_the_bmp_stay_json_and_read_back(tmp_path):
    values = {
        "a": 'tab\tnew\nline "quoted" \\ \x01\x7f caf\u00e9 \u2028',
        "n": 0.0001,
        "k": {"": []},
    }
    text = params_file.text(values)
    assert json.loads(text) == values
    assert all(read == values for read in _readers(text, tmp_path))


def test_a_key_that_is_not_a_string_is_written_as_yaml(tmp_path):
    values = {"dims": {1: "a"}}
    text = params_file.text(values)
    assert yaml.safe_load(text) == values
