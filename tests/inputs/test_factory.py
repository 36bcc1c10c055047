"""model.factory named by import path: a module, or `module:object` where the object is
the factory or a callable that makes it."""

from __future__ import annotations

import sys

import pytest

from pipeline.core.errors import PipelineError
from pipeline.export import export
from pipeline.inputs import factory
from tests.conftest import compose

USER_MODULE = """
from types import SimpleNamespace

from pipeline.zoo import cnn_classifier

CALLS = []


def make():
    CALLS.append(1)
    return SimpleNamespace(
        build=cnn_classifier.build,
        INPUT_NAMES=cnn_classifier.INPUT_NAMES,
        OUTPUT_NAMES=cnn_classifier.OUTPUT_NAMES,
        DYNAMIC_AXES=cnn_classifier.DYNAMIC_AXES,
        sample_inputs=cnn_classifier.sample_inputs,
    )


class Plain:
    build = staticmethod(cnn_classifier.build)
    INPUT_NAMES = cnn_classifier.INPUT_NAMES
    OUTPUT_NAMES = cnn_classifier.OUTPUT_NAMES
"""


@pytest.fixture
def user_pkg(tmp_path, monkeypatch):
    pkg = tmp_path / "teammodels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    factory.resolve.cache_clear()
    yield pkg
    factory.resolve.cache_clear()
    for name in [m for m in sys.modules if m.split(".")[0] == "teammodels"]:
        del sys.modules[name]  # each test's package is another folder


def test_a_callable_after_the_colon_is_called_once_and_its_result_is_the_factory(user_pkg):
    made = factory.resolve("teammodels.nets:make")
    assert made.INPUT_NAMES == ["images"]  # the CNN's own names
    assert factory.resolve("teammodels.nets:make") is made
    import teammodels.nets

    assert teammodels.nets.CALLS == [1]
    # a class with the attributes is the factory itself, not called
    assert factory.resolve("teammodels.nets:Plain") is teammodels.nets.Plain
    assert factory.source_file("teammodels.nets:make") == user_pkg / "nets.py"


def test_a_module_path_still_names_a_module():
    from pipeline.zoo import cnn_classifier

    assert factory.resolve("pipeline.zoo.cnn_classifier") is cnn_classifier


@pytest.mark.parametrize(
    "name,message",
    [
        ("teammodels.nope:make", r"model factory 'teammodels.nope:make' not found"),
        ("teammodels.nets:mkae", r"module 'teammodels.nets' has no attribute 'mkae'"),
    ],
)
def test_a_wrong_name_is_one_line_naming_it(user_pkg, name, message):
    with pytest.raises(PipelineError, match=message):
        factory.resolve(name)


def test_export_runs_a_factory_named_module_colon_callable(user_pkg, tmp_path):
    cfg = compose("model=cnn", "model.factory=teammodels.nets:make", f"model.source={user_pkg}")
    summary = export.export_model(cfg.model, cfg.profile, tmp_path / "export")
    assert summary["source"] == "factory:teammodels.nets:make"
    assert (tmp_path / "export" / "model.onnx").is_file()
    # the factory's file must lie under model.source, or DVC would not see it change
    other = compose("model=cnn", "model.factory=teammodels.nets:make", f"model.source={tmp_path}/x")
    assert len(export.source_sha256(cfg.model)) == 64
    with pytest.raises(PipelineError, match="not under model.source"):
        export.source_sha256(other.model)
