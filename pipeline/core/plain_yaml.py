"""YAML for files other tools read (CI workflows, Compose, Kubernetes): keys in the order
written, and no `&anchors`/`*aliases` where one value is used twice, since a reader of a
workflow or a manifest should see every value where it applies."""

from __future__ import annotations

import json
from typing import Any


def dump(*docs: Any) -> str:
    """`docs` as YAML documents; each value its own object first (a JSON round trip), so
    PyYAML writes no anchors for shared ones."""
    import yaml

    plain = [json.loads(json.dumps(d)) for d in docs]
    return str(yaml.safe_dump_all(plain, sort_keys=False, width=100))
