"""How numbers read, everywhere a person sees one: tables, messages, reports."""

from __future__ import annotations

from typing import Any

MISSING = "–"
MIB = 1 << 20  # bytes in a MiB: every size a person reads is in these


def fmt(value: Any, digits: int = 3) -> str:
    """1,234.5 for large values, 0.000123 as 0.000123 (not 0.000), integers with
    thousands separators, booleans and text as they are, None as a dash. Trailing
    zeros go: 2.500 reads 2.5."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value and abs(value) < 10**-digits:
            return f"{value:.{digits}g}"
        text = f"{value:,.{digits}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    return str(value)


def exact(value: Any) -> str:
    """A measured value or threshold in a one-line message: six significant digits,
    and 100000.0 as 100000 (OmegaConf makes every float threshold a float)."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.6g}"
    return str(value)


def plain(value: Any) -> Any:
    """A threshold for a JSON record: an integral float becomes an int."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def size(nbytes: float) -> str:
    """Bytes in binary units: 512 B, 1.5 KiB, 2.0 GiB."""
    n = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
