"""Bytes against sensitivity, per GEMM: what precision=auto's search trades (mixed/search.py)
and its record explains (mixed/record.py)."""

from __future__ import annotations

from typing import Any

from pipeline.precision.mixed.graphs import TYPES, Assignment

Sensitivity = dict[str, dict[str, float]]  # node -> type -> score above the fp32 graph's


class Tradeoff:
    """Bytes against sensitivity, per GEMM: its weight's bytes in each type (`sizes`), plus
    what a GEMM of that type adds to the engine beyond them (`code`, where the objective is
    the engine's bytes)."""

    def __init__(
        self,
        options: dict[str, list[str]],
        sizes: Any,
        sens: Sensitivity,
        code: dict[str, float] | None = None,
    ) -> None:
        self.options, self.sizes, self.sens = options, sizes, sens
        self.code = code or {}
        self.total = sum(s["fp32"] for s in sizes.values()) or 1

    def cost_of(self, node: str, kind: str) -> float:
        """What `node` in `kind` costs the objective (fp32 adds no code: the base)."""
        extra = self.code.get(kind, 0.0) if kind != "fp32" else 0.0
        return float(self.sizes[node][kind]) + extra

    def cost(self, assignment: Assignment) -> float:
        return sum(self.cost_of(n, assignment.get(n, "fp32")) for n in self.options)

    def allowed(self, node: str) -> list[str]:
        """The types `node` may take: fp32, and those that pass the gate on their own."""
        return [t for t in self.options[node] if t == "fp32" or self.sens[node][t] < 1.0]

    def at(self, lam: float) -> dict[str, str]:
        return {
            n: min(
                self.allowed(n),
                key=lambda t: (
                    self.cost_of(n, t) / self.total + lam * self._s(n, t),
                    TYPES.index(t),
                ),
            )
            for n in self.options
        }

    def single(self, kind: str) -> dict[str, str]:
        return {n: kind for n, o in self.options.items() if kind in o}

    def bytes(self, assignment: Assignment) -> int:
        return sum(self.sizes[n][assignment.get(n, "fp32")] for n in self.options)

    def _s(self, node: str, kind: str) -> float:
        return 0.0 if kind == "fp32" else self.sens[node][kind]
