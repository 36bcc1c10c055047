"""The written graph has the last word. A search measures its choices on an emulation (the
switchboard, one ONNX Runtime session for every choice); the stage judges the graph it
writes. Where that graph misses the gate, the search goes on with written graphs rather
than giving up its result: the fewest more nodes out of the low type that pass, found by
fewest_passing (1, 2, 4, ... then bisection)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pipeline.core import gate as gate_lib
from pipeline.precision.fallback import SearchFailed, counts

if TYPE_CHECKING:
    from pipeline.precision.int4_graphs import Int4Graphs
    from pipeline.precision.qdq_graphs import QdqGraphs


def resume(
    graphs: QdqGraphs | Int4Graphs,
    record: dict[str, Any],
    written: Callable[[list[str]], dict[str, Any]],
) -> dict[str, Any]:
    """After the graph written with the search's choice misses the gate when judged as
    written (`written(kept)` writes that graph and judges it), keep more candidates, most
    sensitive first, each count judged as written: 1, 2, 4, ... more until one passes,
    then the fewest between by bisection. `record` is updated (kept, counts, the
    written checks); the passing judgement is returned. The search's emulation and the
    written graph should agree; where they do not, the written graph has the last word."""
    kept = list(record["kept"])
    rest = [n for n in _by_sensitivity(record) if n not in kept]
    checks: list[dict[str, Any]] = record.setdefault("written_checks", [])

    def judged(extra: int) -> dict[str, Any]:
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


def fewest_passing(
    limit: int, judged: Callable[[int], dict[str, Any]]
) -> tuple[int, dict[str, Any]] | None:
    """The fewest n in 1..limit for which judged(n) passes the gate, taking that more is
    never worse: 1, 2, 4, ... until one passes, then bisection below it; with its
    judgement. None where judged(limit) fails too."""
    lo, step = 0, 1
    hi: tuple[int, dict[str, Any]] | None = None
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


def _by_sensitivity(record: dict[str, Any]) -> list[str]:
    """Every candidate, most sensitive first: the nodes measured alone, then the nodes of
    the groups the search let stay quantized, group by group."""
    order = [r["node"] for r in record["nodes"]]
    for g in record["groups"]:
        order += [n for n in g["nodes"] if n not in order]
    return order


def _brief(judgement: dict[str, Any]) -> dict[str, Any]:
    failing = gate_lib.failures(judgement["gate"])
    return {"passed": judgement["gate_passed"], "failing": [gate_lib.describe(r) for r in failing]}


def kept_in_fp16(
    record: dict[str, Any], written: Callable[..., dict[str, Any]]
) -> dict[str, Any] | None:
    """The next type down for the nodes the search kept: all of them in fp16, else the k
    most sensitive in fp32 and the rest in fp16 for the fewest k that passes, each graph
    written and judged as written (fewest_passing); `record` says which
    (`kept_fp16`, `kept_fp32`, `fp16_checks`). The judgement of the graph left in dest, or
    None where every kept node stays in fp32 (dest holds that graph again)."""
    kept = list(record["kept"])  # most sensitive first
    checks: list[dict[str, Any]] = record.setdefault("fp16_checks", [])

    def judged(k: int) -> dict[str, Any]:
        result = written(kept, tuple(kept[k:]))
        checks.append({"kept_fp32": k, "kept_fp16": len(kept) - k, "passed": result["gate_passed"]})
        return result

    first = judged(0)
    got = (0, first) if first["gate_passed"] else fewest_passing(len(kept) - 1, judged)
    if got is None:
        written(kept)
        record["kept_fp16"] = []
        return None
    k, final = got
    if checks[-1]["kept_fp32"] != k:
        final = written(kept, tuple(kept[k:]))  # dest holds the passing graph
    record["kept_fp32"], record["kept_fp16"] = kept[:k], kept[k:]
    return final
