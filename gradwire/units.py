"""Parsing of user-given quantities (rates), shared by the commands."""

from __future__ import annotations

import argparse
import math
import re

_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(bit)(?:/s)?\s*$", re.I)
_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_rate_bps(text: str) -> float:
    """A link rate in bits per second from ``1Gbit``, ``100mbit``, ``2.5Gbit/s`` or ``1e9``
    (bits per second; tc's ``mbps`` would mean bytes, so byte units are refused).

    >>> parse_rate_bps("1Gbit"), parse_rate_bps("100mbit"), parse_rate_bps("1e9")
    (1000000000.0, 100000000.0, 1000000000.0)
    """
    try:
        value = float(text)
    except ValueError:
        m = _RATE_RE.match(text)
        if not m:
            raise ValueError(f"bad rate {text!r}: expected e.g. 1Gbit, 100mbit or 1e9 (bit/s)") \
                from None
        value = float(m.group(1)) * _SCALE[m.group(2).lower()]
    if not math.isfinite(value):
        raise ValueError(f"bad rate {text!r}: not a finite number")
    if value <= 0:
        raise ValueError(f"bad rate {text!r}: must be > 0")
    if value < 1e3:
        raise ValueError(f"bad rate {text!r}: below 1kbit/s, not a link rate (a bare number is "
                         "bits per second: write e.g. 1Gbit)")
    return value


def rate_arg(text: str) -> float:
    """argparse type for a rate (one-line error on a bad value)."""
    try:
        return parse_rate_bps(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def int_range(part: str) -> tuple[int, int]:
    """``4`` -> (4, 4), ``2-8`` -> (2, 8): one item of a comma-separated list of counts or
    ports, in plain digits. ValueError for anything else: a half-open ``4-`` or ``-4``, a
    ``1_0`` (Python's int() reads it as 10), a sign or a space inside."""
    lo, sep, hi = part.strip().partition("-")
    if not lo.isdigit() or (sep and not hi.isdigit()) or not lo.isascii() \
            or not hi.isascii():
        raise ValueError(f"not a number or a range of numbers: {part!r}")
    return int(lo), int(hi or lo)


def positive_int_arg(text: str) -> int:
    """argparse type for a count or size that must be an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {value}")
    return value


def rates_arg(text: str) -> list[float]:
    """argparse type for comma-separated rates (an empty item is an error: a typo); a rate
    given twice, however spelt (``20Mbit,20000kbit``), is kept once, in its first place."""
    parts = text.split(",")
    if any(not t.strip() for t in parts):
        raise argparse.ArgumentTypeError(f"empty item in {text!r}: write rates like 1Gbit,10Gbit")
    return list(dict.fromkeys(rate_arg(t) for t in parts))


def format_rate(bps: float) -> str:
    """``1Gbit``, ``250Mbit``, ``1.5Gbit`` for a rate in bits per second."""
    for unit, scale in (("Gbit", 1e9), ("Mbit", 1e6), ("kbit", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.4g}{unit}"
    return f"{bps:g}bit"


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]?)(i?)b?\s*$", re.I)


def parse_size_bytes(text: str) -> float:
    """A size in bytes from ``4MB``, ``64MiB``, ``512KB``, ``1e6`` (bytes; ``K``/``M``/``G``
    are powers of 1000, ``KiB``/``MiB``/``GiB`` of 1024).

    >>> parse_size_bytes("4MB"), parse_size_bytes("64MiB"), parse_size_bytes("1e6")
    (4000000.0, 67108864.0, 1000000.0)
    """
    try:
        value = float(text)
    except ValueError:
        m = _SIZE_RE.match(text)
        if not m:
            raise ValueError(f"bad size {text!r}: expected e.g. 4MB, 64MiB or 1e6 (bytes)") \
                from None
        unit = m.group(2).lower()
        base = 1024.0 if m.group(3) else 1000.0
        value = float(m.group(1)) * base ** " kmg".index(unit or " ")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"bad size {text!r}: must be a finite number of bytes > 0")
    return value


def size_arg(text: str) -> float:
    """argparse type for a size in bytes (one-line error on a bad value)."""
    try:
        return parse_size_bytes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
