"""The precision transforms' families in their order, as tests/test_layers.py keeps the
layers': what every family shares (common) first, then the gate and the calibration
data, then the three families of graphs (qdq: int8/fp8, int4, autocast: fp16/bf16), which
never import each other, then the searches over them (fallback, which imports no family;
mixed), and at the top the modules of pipeline/precision itself (transform.py, the one
door, and the steps it takes after a family: tables, views, weak typing)."""

from __future__ import annotations

from tests.helpers import graph

ORDER = ("common", "gate", "calibration", "family", "fallback", "mixed", "door")
FAMILIES = ("qdq", "int4", "autocast")


def family_of(module: str) -> str | None:
    """The family of a pipeline.precision module, None for a module of another layer."""
    parts = module.split(".")
    if parts[:2] != ["pipeline", "precision"]:
        return None
    if len(parts) == 2 or (len(parts) == 3 and parts[2] not in (*ORDER, *FAMILIES)):
        return "door"  # pipeline/precision/__init__.py and its own modules
    return parts[2]


def rank(family: str) -> int:
    return ORDER.index("family" if family in FAMILIES else family)


def precision_imports() -> list[tuple[str, str, str, str]]:
    return [
        (m, family_of(m), d, family_of(d))
        for m, deps in graph().items()
        for d in deps
        if family_of(m) and family_of(d)
    ]


def test_no_family_imports_a_family_above_it():
    bad = [
        f"{m} ({a}) imports {d} ({b})" for m, a, d, b in precision_imports() if rank(b) > rank(a)
    ]
    assert not bad, "\n".join(sorted(bad))


def test_the_three_families_do_not_import_each_other_and_fallback_none():
    bad = [
        f"{m} imports {d}"
        for m, a, d, b in precision_imports()
        if b in FAMILIES and a != b and (a in FAMILIES or a == "fallback")
    ]
    assert not bad, "\n".join(sorted(bad))


def test_every_precision_module_sits_in_a_known_family():
    assert {family_of(m) for m in graph() if family_of(m)} <= {*ORDER, *FAMILIES}
    assert family_of("pipeline.precision.qdq.plan") == "qdq"
    assert family_of("pipeline.precision.transform") == "door"
    assert rank("int4") == rank("autocast") < rank("fallback")
