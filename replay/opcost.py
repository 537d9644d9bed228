"""Cost of an op at shapes never timed: a regression over the op cost database's rows.

Per op type (and dtype, device, machine) two small models are fitted on the rows' features
(``gradwire.opfeatures``: FLOPs and bytes):

* ``roofline``: time = a + b FLOPs + c bytes with a, b, c >= 0 (non-negative least squares on
  relative errors: each row weighted by 1 / its time, so a 10 µs op counts as much as a 10 ms
  one). a is the op's fixed cost, 1/b its sustained FLOP rate, 1/c its memory rate.
* ``power``: log time = a + b log(1 + FLOPs) + c log(1 + bytes), least squares in log space: for
  ops whose cost bends (caches, thread fan-out), which a line through the origin cannot follow.

Which one serves an op type is chosen by k-fold cross-validation on that op type's own rows
(the median relative error on the held-out folds); nothing is tuned on a benchmark's step
times. A shape that is in the database is served its measured median, not the model.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from gradwire.opdb import OpTiming

MODELS = ("roofline", "power")
GroupKey = tuple[str, str, str, str]  # op, dtype, device, fingerprint


@dataclass(frozen=True, kw_only=True)
class Fit:
    """One fitted model: ``kind`` (``MODELS``) and its three coefficients (see the module)."""

    kind: str
    coef: tuple[float, float, float]

    def predict_us(self, flops: float, bytes_: float) -> float:
        a, b, c = self.coef
        if self.kind == "roofline":
            return a + b * flops + c * bytes_
        return math.exp(a + b * math.log1p(flops) + c * math.log1p(bytes_))


def fit(rows: Sequence[OpTiming], kind: str) -> Fit:
    """Fit model ``kind`` to ``rows`` (at least one; see the module for each model)."""
    x = np.array([[1.0, r.flops, r.bytes_] for r in rows])
    t = np.array([max(r.median_us, 1e-3) for r in rows])
    if kind == "roofline":
        from scipy.optimize import nnls

        scale = np.maximum(x.max(axis=0), 1e-30)  # columns of one magnitude for the solver
        coef, _ = nnls((x / scale) / t[:, None], np.ones_like(t))
        return Fit(kind=kind, coef=tuple(float(v) for v in coef / scale))  # type: ignore[arg-type]
    logx = np.column_stack([np.ones(len(rows)), np.log1p(x[:, 1]), np.log1p(x[:, 2])])
    coef, *_ = np.linalg.lstsq(logx, np.log(t), rcond=None)
    return Fit(kind=kind, coef=tuple(float(v) for v in coef))  # type: ignore[arg-type]


def relative_error(predicted: float, measured: float) -> float:
    """|predicted - measured| / measured."""
    return abs(predicted - measured) / max(measured, 1e-9)


@dataclass(frozen=True, kw_only=True)
class Validation:
    """Held-out errors of one op type's models: ``rows`` in the database, ``errors`` per
    model (each row's relative error when its fold was held out), and the ``chosen`` one."""

    key: GroupKey
    rows: int
    errors: dict[str, list[float]]
    chosen: str

    def median(self, kind: str | None = None) -> float:
        return statistics.median(self.errors[kind or self.chosen])

    def p90(self, kind: str | None = None) -> float:
        e = sorted(self.errors[kind or self.chosen])
        return e[min(len(e) - 1, int(0.9 * len(e)))]


def cross_validate(rows: Sequence[OpTiming], key: GroupKey, folds: int = 5, seed: int = 0
                   ) -> Validation | None:
    """k-fold held-out errors of every model on one op type's ``rows`` (None with fewer than
    ``folds`` + 1 rows); the model with the lower median held-out error is ``chosen``."""
    if len(rows) <= folds:
        return None
    order = list(range(len(rows)))
    random.Random(f"{seed}:{key}").shuffle(order)
    errors: dict[str, list[float]] = {k: [] for k in MODELS}
    for f in range(folds):
        test = order[f::folds]
        held = set(test)
        train = [rows[i] for i in order if i not in held]
        for kind in MODELS:
            model = fit(train, kind)
            errors[kind].extend(relative_error(model.predict_us(rows[i].flops, rows[i].bytes_),
                                               rows[i].median_us) for i in test)
    chosen = min(MODELS, key=lambda k: statistics.median(errors[k]))
    return Validation(key=key, rows=len(rows), errors=errors, chosen=chosen)


def group(rows: Iterable[OpTiming]) -> dict[GroupKey, list[OpTiming]]:
    """Rows by (op, dtype, device, machine fingerprint)."""
    out: dict[GroupKey, list[OpTiming]] = defaultdict(list)
    for r in rows:
        out[(r.op, r.dtype, r.device, r.fingerprint)].append(r)
    return dict(out)


class CostModel:
    """Op times from a database's rows: the measured median where the exact shape point is
    there, else the op type's chosen regression; ``None`` for an op type it has no rows of."""

    def __init__(self, rows: Iterable[OpTiming]) -> None:
        self.exact: dict[tuple[object, ...], float] = {}
        self.models: dict[tuple[str, str, str], Fit] = {}
        self.validations: dict[GroupKey, Validation] = {}
        for key, items in sorted(group(rows).items()):
            for r in items:
                self.exact[(r.op, r.inputs, r.attrs, r.dtype, r.device)] = r.median_us
            v = cross_validate(items, key)
            if v is not None:
                self.validations[key] = v
            kind = v.chosen if v is not None else "roofline"
            self.models.setdefault((key[0], key[1], key[2]), fit(items, kind))

    def op_types(self) -> set[str]:
        return {k[0] for k in self.models}

    def predict_us(self, op: str, inputs: tuple[tuple[int, ...], ...],
                   attrs: tuple[tuple[str, object], ...], dtype: str, device: str,
                   flops: float, bytes_: float) -> float | None:
        """The op's time (µs) at these shapes; ``float32``'s model stands in for a dtype
        without rows of its own."""
        hit = self.exact.get((op, inputs, attrs, dtype, device))
        if hit is not None:
            return hit
        model = self.models.get((op, dtype, device)) or self.models.get((op, "float32", device))
        return None if model is None else max(0.0, model.predict_us(flops, bytes_))
