"""The written graph has the last word. A search measures its choices on an emulation (the
switchboard, one ONNX Runtime session for every choice); the stage judges the graph it
writes. Where that graph misses the gate, the search goes on with written graphs rather
than giving up its result: the fewest more nodes out of the low type that pass, found by
fewest_passing (1, 2, 4, ... then bisection)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict

from pipeline.core import gate
from pipeline.precision.fallback.record_rows import counts
from pipeline.precision.fallback.search import SearchFailed
from pipeline.records.calibration_file import FallbackRecord, Judgement

if TYPE_CHECKING:
    from pipeline.precision.common.searchable import Searchable


def resume(
    graphs: Searchable,
    record: FallbackRecord,
    written: Callable[[list[str]], Judgement],
) -> Judgement:
    """After the graph written with the search's choice misses the gate when judged as
    written (`written(kept)` writes that graph and judges it), keep more candidates, most
    sensitive first, each count judged as written: 1, 2, 4, ... more until one passes,
    then the fewest between by bisection. `record` is updated (kept, counts, the
    written checks); the passing judgement is returned. The search's emulation and the
    written graph should agree; where they do not, the written graph has the last word."""
    kept = list(record["kept"])
    rest = [n for n in _by_sensitivity(record) if n not in kept]
    checks = record.setdefault("written_checks", [])

    def judged(extra: int) -> Judgement:
        result = written(kept + rest[:extra])
        checks.append({"kept": len(kept) + extra, **_brief(result)})
        return result

    got = fewest_passing(len(rest), judged)
    if got is None:
        raise SearchFailed(
            f"precision.fallback=auto: the search's choice ({len(kept)} kept in fp32) misses the "
            f"gate as written, and so does every larger set up to all {len(kept) + len(rest)}",
            record,
        )
    hi, found = got
    record["kept"] = record["kept_fp32"] = kept + rest[:hi]
    record.update(counts(graphs.plan, graphs.plan.candidates(), record["kept"]))
    if len(checks) and checks[-1]["kept"] != len(record["kept"]):
        written(record["kept"])  # dest holds the passing graph, not the last one tried
    return found


def fewest_passing(limit: int, judged: Callable[[int], Judgement]) -> tuple[int, Judgement] | None:
    """The fewest n in 1..limit for which judged(n) passes the gate, taking that more is
    never worse: 1, 2, 4, ... until one passes, then bisection below it; with its
    judgement. None where judged(limit) fails too."""
    lo, step = 0, 1
    hi: tuple[int, Judgement] | None = None
    while hi is None and lo < limit:
        n = min(step, limit)
        result = judged(n)
        if result["gate_passed"]:
            hi = (n, result)
        else:
            lo, step = n, step * 2
    while hi is not None and hi[0] - lo > 1:
        mid = (lo + hi[0]) // 2
        result = judged(mid)
        if result["gate_passed"]:
            hi = (mid, result)
        else:
            lo = mid
    return hi


def _by_sensitivity(record: FallbackRecord) -> list[str]:
    """Every candidate, most sensitive first: the nodes measured alone, then the nodes of
    the groups the search let stay quantized, group by group."""
    order = [r["node"] for r in record["nodes"]]
    for g in record["groups"]:
        order += [n for n in g["nodes"] if n not in order]
    return order


class Brief(TypedDict):
    """A graph judged as written, in a written check's row."""

    passed: bool
    failing: list[str]  # a line per failed check


def _brief(judgement: Judgement) -> Brief:
    failing = gate.failures(judgement["gate"])
    return {"passed": judgement["gate_passed"], "failing": [gate.describe(r) for r in failing]}


def kept_lower(
    record: FallbackRecord,
    written: Callable[..., Judgement],
    ladder: tuple[str, ...],
    fits: Callable[[str, str], bool],
) -> Judgement | None:
    """The next types down for the nodes the search kept, one type of `ladder` at a time:
    of the nodes still in fp32 that the type `fits`, all of them in it first, else the k
    most sensitive left above it and the rest in it for the fewest k that passes, each
    graph written and judged as written (fewest_passing; `written(kept, {node: type})`).
    `record` says which (`kept_<type>`, `kept_fp32`, `<type>_checks`). The judgement of
    the graph left in dest, or None where every kept node stays in fp32 (dest holds that
    graph again)."""
    kept = list(record["kept"])  # most sensitive first
    step = _Step(kept, written)
    final: Judgement | None = None
    # A type's keys in the record (`<type>_checks`, `kept_<type>`; int8, fp16) are made from
    # its name, which mypy cannot check against the record's keys: hence the ignores.
    for kind in ladder:
        movable = [n for n in kept if n not in step.lower and fits(n, kind)]
        above = "kept_fp32" if kind == ladder[-1] else "kept_above"
        checks = record.setdefault(f"{kind}_checks", [])  # type: ignore[misc]
        got = step.down(kind, movable, checks, above)
        final = got or final
    for kind in ladder:
        lower = [n for n in kept if step.lower.get(n) == kind]
        record[f"kept_{kind}"] = lower  # type: ignore[literal-required]
    record["kept_fp32"] = [n for n in kept if n not in step.lower]
    if step.last is not None and step.last != step.lower:
        result = written(kept, step.lower)  # dest holds the passing graph, not the last tried
        final = result if step.lower else None
    return final


class _Step:
    """The kept nodes' types as the ladder settles them (`lower`), and the assignment the
    graph last written holds (`last`)."""

    def __init__(self, kept: list[str], written: Callable[..., Judgement]) -> None:
        self.kept, self.written = kept, written
        self.lower: dict[str, str] = {}
        self.last: dict[str, str] | None = None

    def down(
        self, kind: str, movable: list[str], checks: list[dict[str, Any]], above: str
    ) -> Judgement | None:
        """`movable` in `kind` but for the fewest most sensitive that must stay above it;
        the passing judgement, or None where even the most sensitive alone fails."""

        def judged(k: int) -> Judgement:
            self.last = {**self.lower, **dict.fromkeys(movable[k:], kind)}
            result = self.written(self.kept, self.last)
            checks.append(
                {above: k, f"kept_{kind}": len(movable) - k, "passed": result["gate_passed"]}
            )
            return result

        if not movable:
            return None
        first = judged(0)
        got = (0, first) if first["gate_passed"] else fewest_passing(len(movable) - 1, judged)
        if got is None:
            return None
        self.lower.update(dict.fromkeys(movable[got[0] :], kind))
        return got[1]
