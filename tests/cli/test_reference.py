"""The generated reference: every schema key described, the engine-key column matching
what pipeline/engine/cache_key.py hashes, every command of the parser on the CLI page."""

from __future__ import annotations

import dataclasses

from pipeline.cli import main, reference
from pipeline.core import config, dvc_yaml
from tests.conftest import REPO


def test_every_schema_key_has_a_description():
    assert reference.undescribed() == [], (
        "add a comment beside or above these fields in pipeline/core/config.py: "
        + ", ".join(reference.undescribed())
    )


@dataclasses.dataclass
class Section:
    # Above the field.
    described: int = 1
    bare: str = "x"
    trailing: bool = True  # beside it


@dataclasses.dataclass
class Root:
    section: Section = dataclasses.field(default_factory=Section)


def test_a_field_without_a_comment_is_found():
    keys = {k.path: k for k in reference.keys(Root)}
    assert keys["section.described"].description == "Above the field."
    assert keys["section.trailing"].description == "beside it"
    assert keys["section.bare"].description == ""


def test_keys_cover_the_schema_at_every_depth():
    paths = {k.path for k in reference.keys()}
    for cls_field in dataclasses.fields(config.PipelineConfig):
        section = getattr(config.PipelineConfig(), cls_field.name)
        if not dataclasses.is_dataclass(section):  # models: a mapping of the groups above
            assert cls_field.name in paths
            continue
        for f in dataclasses.fields(section):
            assert f"{cls_field.name}.{f.name}" in paths
    assert "build.gates.max_engine_mib" in paths
    assert "profile.profiles[].shapes.<name>.opt" in paths


def test_engine_key_column_follows_the_cache_key_and_dvc_yaml():
    from pipeline.engine import cache_key

    stages = dvc_yaml.stages(REPO)
    for name in cache_key.ENGINE_BUILD_FIELDS:
        assert reference.engine_key_effect(f"build.{name}", stages) == "yes"
    for name in cache_key.ENGINE_PRECISION_FIELDS:
        assert reference.engine_key_effect(f"precision.{name}", stages) == "yes"
    assert reference.engine_key_effect("profile.profiles[].dims", stages) == "yes"
    # where the store is changes no key; calibrate reads it to find the engines it measures
    assert reference.engine_key_effect("build.store_dir", stages) == (
        "only if it changes what `calibrate` makes"
    )
    assert reference.engine_key_effect("build.gates.max_warnings", stages) == "no"
    assert reference.engine_key_effect("benchmark.warmup_s", stages) == "no"
    assert "`calibrate`" in reference.engine_key_effect("calibration.method", stages)
    assert "`fingerprint`" in reference.engine_key_effect("build.backend", stages)


def test_config_page_has_a_row_per_key_with_its_default():
    page = reference.config_page(REPO)
    for k in reference.keys():
        assert f"| `{k.path}` |" in page, k.path
    row = next(line for line in page.splitlines() if line.startswith("| `build.workspace_mib`"))
    assert "`1024`" in row and "`build`" in row
    # `models` is read by the stages init writes for several models, not by this repository's
    row = next(line for line in page.splitlines() if line.startswith("| `models` |"))
    assert "| `export`, `calibrate`, `build`, `benchmark` (per model, in a project" in row
    int8 = next(line for line in page.splitlines() if line.startswith("- `int8`: "))
    assert '`transform="qdq"`' in int8 and '`quantize_mode="int8"`' in int8
    assert "- `fp32`: the default" in page


def test_cli_page_has_every_command():
    page = reference.cli_page()
    commands = [p.prog for p in reference._commands(main.parser())]
    assert "trt-pipeline cache prune" in commands
    for prog in commands:
        assert f"## `{prog}`" in page
    assert "--fail-on-regression" in page


def test_every_environment_variable_the_code_reads_is_documented():
    import re

    found = set()
    for root in ("pipeline", "hydra_plugins", "stages"):
        for path in (REPO / root).rglob("*.py"):
            found |= set(re.findall(r"TRT_PIPELINE_[A-Z_]+[A-Z]", path.read_text()))
    page = (REPO / "docs/reference/environment.md").read_text()
    documented = set(re.findall(r"^\| `(TRT_PIPELINE_[A-Z_]+)` \|", page, flags=re.M))
    assert found and not found - documented, sorted(found - documented)


def test_the_reference_pages_in_the_repository_are_what_the_code_generates():
    """docs/ links to reference/config.md and reference/cli.md: they are committed, so the
    links work in the repository, and kept equal to what the code generates now."""
    for name, text in reference.pages(REPO).items():
        page = REPO / "docs" / name
        assert page.is_file() and page.read_text(encoding="utf-8") == text, (
            f"docs/{name} is stale: run python -m pipeline.cli.reference docs"
        )
