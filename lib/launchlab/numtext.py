"""How the kit writes a number for a reader: the precision that carries its meaning, integers as integers, never
`-0.0`. One place, so the break-even reads the same in the verdict, its tables, the search's notes and the plots."""

from __future__ import annotations

import math

BREAK_EVEN_DIGITS = 3  # a break-even is a fraction of the card: 0.744, or vLLM's 0.00522 (0.005 said nothing)


def significant(value: float, digits: int = BREAK_EVEN_DIGITS, *, signed: bool = False) -> str:
    """`value` to `digits` significant digits, trailing zeros kept (0.100, 0.00522, 1.05; 140 without a dot);
    `signed`: a difference, with its + sign."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if signed:
        return ("+" if value >= 0 else "-") + significant(abs(value), digits)
    if value == 0:
        return "0"
    text = f"{value:#.{digits}g}"
    if "e" in text:  # below 1e-4 or past 10^digits: plain digits read better than an exponent here
        decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
        text = f"{value:.{decimals}f}"
    return text.rstrip(".")


def fixed(value: float, decimals: int = 2, thousands: bool = True) -> str:
    """A measured value with `decimals` decimals (0: an integer, as a count, tokens or repetitions are), and a
    value that rounds to zero as 0.00, never `-0.00`."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    sep = "," if thousands else ""
    text = f"{value:{sep}.{decimals}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.,") else text


def as_given(value: float) -> str:
    """A value a launch asked for (`--mem-fraction-static 0.0025`) as it was written: every digit it has and no
    more (0.0025 rounded to 0.003 named a value nobody asked for, 0.85 padded to 0.850 one with a precision it
    never had)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    text = f"{float(value):.12g}"  # 12 digits: a mean of equal values read back as 0.30000000000000004 is 0.3
    if "e" in text:  # 1e-05: plain digits, as everywhere in the report
        text = f"{float(value):.20f}".rstrip("0").rstrip(".")
    return text


ASKED = ("fraction", "utilization")  # a budget's column of the value each launch asked for (SGLang, vLLM)


def is_asked(column: str) -> bool:
    """A budget's column of the value each launch asked for: written as given (as_given), never rounded."""
    return column in ASKED


def is_break_even(column: str) -> bool:
    """A column that holds a break-even (the budget's `break_even_fraction`, a search's `predicted_break_even`,
    its `predicted_min`/`_max`), written to BREAK_EVEN_DIGITS significant digits wherever it appears."""
    return "break_even" in column or column in ("predicted_min", "predicted_max")


def whole(values) -> bool:
    """Every value given is a whole number (a column of counts, tokens, repetitions): written without decimals."""
    numbers = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return bool(numbers) and all(v.is_integer() for v in numbers)
