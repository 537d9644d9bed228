"""Cost of an op at shapes never timed: a regression over the op cost database's rows.

Per op type (and dtype, device, machine) two small models are fitted on the rows' features
(``gradwire.opfeatures``: FLOPs and bytes):

* ``roofline``: time = a + b FLOPs + c bytes with a, b, c >= 0 (non-negative least squares on
  relative errors: each row weighted by 1 / its time, so a 10 µs op counts as much as a 10 ms
  one). a is the op's fixed cost, 1/b its sustained FLOP rate, 1/c its memory rate.
* ``power``: log time = a + b log(1 + FLOPs) + c log(1 + bytes), least squares in log space: for
  ops whose cost bends (caches, thread fan-out), which a line through the origin cannot follow.
* ``roofline+trees``: the roofline times a correction learnt by gradient-boosted trees
  (scikit-learn's HistGradientBoostingRegressor) on the log of the roofline's error, from the
  op's shape (``shape_features``: FLOPs, bytes, each input dimension, strides, window,
  transposes). The trees capture what the roofline's two rates cannot (a thin matrix product's
  poor efficiency, a kernel size oneDNN handles specially); outside the shapes it has seen it
  falls back towards the roofline, since the trees' correction is held within the smallest
  and largest corrections it was fitted on.
  Its settings (200 rounds, twice scikit-learn's default; learning rate 0.1, the default;
  leaves of at least 3 rows, made small for grids of tens of rows) were set before any fit,
  not tuned on any step.

Which one serves an op type is chosen by k-fold cross-validation on that op type's own rows
(the median relative error on the held-out folds); nothing is tuned on a benchmark's step
times. A shape that is in the database is served its measured median, not the model.
"""

from __future__ import annotations

import functools
import hashlib
import math
import random
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from gradwire.collector.opgrid import LINK_ATTR, RING_HOP
from gradwire.errors import GradwireError
from gradwire.opdb import BUILD, Machine, OpDatabase, OpTiming, threads_said
from gradwire.opfeatures import DTYPE_SIZE, features

MODELS = ("roofline", "power", "roofline+trees")
GroupKey = tuple[str, str, str, str]  # op, dtype, device, fingerprint


SHAPE_DIMS = 12  # input dimensions in shape_features: the first 3 inputs' first 4 dims


def shape_features(row: Shaped) -> list[float]:
    """The trees' view of one op execution: log FLOPs, log bytes, log(1 + d) of the first 4
    dimensions of its first 3 inputs (0 where absent), its strides and window along the height,
    and its transposes."""
    dims: list[float] = []
    for shape in list(row.inputs[:3]) + [()] * (3 - len(row.inputs[:3])):
        padded = list(shape[:4]) + [0] * (4 - len(shape[:4]))
        dims.extend(math.log1p(max(0, d)) for d in padded)
    attrs = dict(row.attrs)
    stride = attrs.get("strides") or (1, 1)
    window = attrs.get("ksize") or (1, 1)
    return [math.log1p(row.flops), math.log1p(row.bytes_), *dims,
            float(stride[1] if len(stride) > 1 else 1), float(window[1] if len(window) > 1 else 1),
            float(bool(attrs.get("transpose_a"))), float(bool(attrs.get("transpose_b")))]


@dataclass(frozen=True, kw_only=True)
class ShapedRow:
    """An op execution's shape fields, as a model reads them (what ``Shaped`` asks)."""

    inputs: tuple[tuple[int, ...], ...]
    attrs: tuple[tuple[str, object], ...]
    flops: float
    bytes_: float


def shaped_row(op: str, inputs: Sequence[tuple[int, ...]], outputs: Sequence[tuple[int, ...]],
               attrs: tuple[tuple[str, object], ...], dtype: str) -> ShapedRow:
    """The ShapedRow of ``op`` at these shapes, its features computed (``opfeatures``)."""
    n, b = features(op, inputs, outputs, dict(attrs), dtype)
    return ShapedRow(inputs=tuple(inputs), attrs=attrs, flops=n, bytes_=b)


class Shaped(Protocol):
    """What a model reads of an op: OpTiming's shape fields."""

    inputs: tuple[tuple[int, ...], ...]
    attrs: tuple[tuple[str, object], ...]
    flops: float
    bytes_: float


@dataclass(frozen=True, kw_only=True)
class Fit:
    """One fitted model: ``kind`` (``MODELS``), its three coefficients (see the module) and,
    for ``roofline+trees``, the fitted trees."""

    kind: str
    coef: tuple[float, float, float]
    trees: Any = None
    bounds: tuple[float, float] = (0.0, 0.0)  # the log corrections the trees were fitted on

    def predict_many_us(self, rows: Sequence[Shaped]) -> np.ndarray:
        """The time (µs) of each of ``rows`` (see the module; the trees asked once)."""
        a, b, c = self.coef
        flops = np.array([r.flops for r in rows], dtype=float)
        size = np.array([r.bytes_ for r in rows], dtype=float)
        if self.kind == "power":  # exp of at most 700: a day is e^25 us; no overflow
            return np.exp(np.minimum(700.0, a + b * np.log1p(flops) + c * np.log1p(size)))
        line = a + b * flops + c * size
        if self.trees is None:
            return line
        with one_thread():
            correction = self.trees.predict(np.array([shape_features(r) for r in rows]))
        return line * np.exp(np.clip(correction, *self.bounds))

    def predict_us(self, row: Shaped) -> float:
        """The time (µs) of one op execution (``predict_many_us`` of one row)."""
        return float(self.predict_many_us([row])[0])


def fit(rows: Sequence[OpTiming], kind: str) -> Fit:
    """Fit model ``kind`` to ``rows`` (at least one; see the module for each model)."""
    x = np.array([[1.0, r.flops, r.bytes_] for r in rows])
    t = np.array([max(r.median_us, 1e-3) for r in rows])
    if kind == "power":
        logx = np.column_stack([np.ones(len(rows)), np.log1p(x[:, 1]), np.log1p(x[:, 2])])
        coef, *_ = np.linalg.lstsq(logx, np.log(t), rcond=None)
        return Fit(kind=kind, coef=tuple(float(v) for v in coef))  # type: ignore[arg-type]
    from scipy.optimize import nnls

    scale = np.maximum(x.max(axis=0), 1e-30)  # columns of one magnitude for the solver
    coef, _ = nnls((x / scale) / t[:, None], np.ones_like(t))
    line = Fit(kind="roofline", coef=tuple(float(v) for v in coef / scale))  # type: ignore[arg-type]
    if kind == "roofline":
        return line
    from sklearn.ensemble import HistGradientBoostingRegressor

    features = np.array([shape_features(r) for r in rows])
    residual = np.log(t) - np.log(np.maximum(line.predict_many_us(rows), 1e-3))
    trees = HistGradientBoostingRegressor(max_iter=200, learning_rate=0.1, min_samples_leaf=3,
                                          random_state=0).fit(features, residual)
    return Fit(kind=kind, coef=line.coef, trees=trees,
               bounds=(float(residual.min()), float(residual.max())))


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
            guesses = fit(train, kind).predict_many_us([rows[i] for i in test])
            errors[kind].extend(relative_error(float(g), rows[i].median_us)
                                for g, i in zip(guesses, test, strict=True))
    chosen = min(MODELS, key=lambda k: statistics.median(errors[k]))
    return Validation(key=key, rows=len(rows), errors=errors, chosen=chosen)


@functools.cache
def _threadpools() -> Any:
    """The process's thread pools (``threadpoolctl``), scikit-learn's OpenMP runtime among
    them: loaded first, so that the controller, made once, sees it."""
    import sklearn.ensemble  # noqa: F401
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def one_thread() -> Any:
    """A context in which the trees fit and predict on one thread: tens of rows at a time,
    where OpenMP's threads cost more than they bring, and spin for seconds when the machine's
    cores are busy (two what-ifs at once on 2 cores: 58 s each against 15 s alone, in
    libgomp). Entering it costs about 20 µs (one controller, ``_threadpools``)."""
    return _threadpools().limit(limits=1)


def group(rows: Iterable[OpTiming]) -> dict[GroupKey, list[OpTiming]]:
    """Rows by (op, dtype, device, machine fingerprint)."""
    out: dict[GroupKey, list[OpTiming]] = defaultdict(list)
    for r in rows:
        out[(r.op, r.dtype, r.device, r.fingerprint)].append(r)
    return dict(out)


def rows_digest(rows: Sequence[OpTiming]) -> str:
    """A digest of what an op type's fits read of ``rows``, in their order (the folds'
    shuffle follows it): a kept choice serves only the rows it was made on."""
    h = hashlib.sha256()
    for r in rows:
        h.update(repr((r.key(), r.flops, r.bytes_, r.median_us)).encode())
    return h.hexdigest()[:16]


def chosen_kinds(model: CostModel, tick: Callable[[], None] | None = None
                 ) -> dict[GroupKey, tuple[str, str]]:
    """(rows digest, chosen model) of every op type of ``model``, cross-validating those it
    has no kept choice for (``tick`` after each op type): what ``opdb build`` keeps."""
    out = {}
    for key in sorted(model.groups):
        out[key] = (rows_digest(model.groups[key]), model.chosen(key))
        if tick is not None:
            tick()
    return out


class CostModel:
    """Op times from a database's rows: the measured median where the exact shape point is
    there, else the op type's chosen regression; ``None`` for an op type it has no rows of.

    An op type's regression is chosen and fitted when first asked for (a step asks for a
    few of the database's tens of types). ``choices`` (``chosen_kinds``: kept by ``opdb
    build``) spares the cross-validation of each op type whose rows are the ones it was
    chosen on; without one, or with other rows, it is chosen here."""

    def __init__(self, rows: Iterable[OpTiming],
                 choices: Mapping[GroupKey, tuple[str, str]] | None = None) -> None:
        self.exact: dict[tuple[object, ...], float] = {}
        self.groups = group(rows)
        self._serving: dict[tuple[str, str, str], GroupKey] = {}
        for key, items in sorted(self.groups.items()):
            for r in items:
                self.exact[(r.op, r.inputs, r.attrs, r.dtype, r.device)] = r.median_us
            self._serving.setdefault((key[0], key[1], key[2]), key)
        self._choices = dict(choices or {})
        self.kept_choices = len(self._choices)
        self._validations: dict[GroupKey, Validation | None] = {}
        self._fits: dict[GroupKey, Fit] = {}

    def validation(self, key: GroupKey) -> Validation | None:
        """Op type ``key``'s cross-validation (None: too few rows), run once."""
        if key not in self._validations:
            with one_thread():
                self._validations[key] = cross_validate(self.groups[key], key)
        return self._validations[key]

    @property
    def validations(self) -> dict[GroupKey, Validation]:
        """Every op type's cross-validation with enough rows to run one."""
        return {k: v for k in sorted(self.groups) if (v := self.validation(k)) is not None}

    def chosen(self, key: GroupKey) -> str:
        """The model that serves op type ``key``: the kept choice where it was made on these
        rows, else the cross-validation's (``roofline`` with too few rows to run one)."""
        kept = self._choices.get(key)
        if kept is not None and kept[1] in MODELS and kept[0] == rows_digest(self.groups[key]):
            return kept[1]
        v = self.validation(key)
        return v.chosen if v is not None else "roofline"

    def _fit_of_key(self, key: GroupKey) -> Fit:
        if key not in self._fits:
            kind = self.chosen(key)
            with one_thread():
                self._fits[key] = fit(self.groups[key], kind)
        return self._fits[key]

    def op_types(self) -> set[str]:
        return {k[0] for k in self._serving}

    def fit_of(self, op: str, dtype: str, device: str) -> Fit | None:
        """The model chosen for ``op`` in ``dtype`` on ``device`` (float32's standing in for
        a dtype without rows), None without rows."""
        key = self._serving.get((op, dtype, device)) or self._serving.get((op, "float32",
                                                                           device))
        return None if key is None else self._fit_of_key(key)

    def has_model(self, op: str, dtype: str, device: str) -> bool:
        """Whether the database timed ``op`` in ``dtype`` on ``device`` (its own model)."""
        return (op, dtype, device) in self._serving

    def predict_us(self, op: str, row: Shaped, dtype: str, device: str,
                   model_only: bool = False) -> float | None:
        """The op's time (µs) at ``row``'s shapes: measured if timed (unless ``model_only``),
        else the model's; ``float32``'s model stands in for a dtype without rows of its own."""
        hit = None if model_only else self.exact.get((op, row.inputs, row.attrs, dtype, device))
        if hit is not None:
            return hit
        model = self.fit_of(op, dtype, device)
        return None if model is None else max(0.0, model.predict_us(row))


def build_rows(path: Path, machine: str | None = None, op: str | None = None,
               prefer: str | None = None) -> tuple[list[OpTiming], str]:
    """The rows ``opdb build`` timed on ``machine`` in the database file ``path`` (only those
    of ``op``, if given), and that machine's fingerprint. Without ``machine``: ``prefer`` (the
    machine a profile's trace ran on: its processor, TensorFlow and intra-op threads) where
    the database has build rows of it, else the database's only machine."""
    with OpDatabase(path) as db:
        machines = sorted({r.fingerprint for r in db.timings(source=BUILD)})
        if not machines:
            raise GradwireError("no rows timed by `gradwire opdb build`: run it first",
                                path=path)
        if machine is not None and machine not in machines:
            raise GradwireError(f"no build rows of machine {machine!r} (it has them of: "
                                f"{', '.join(machines)})", path=path)
        fp = machine or (prefer if prefer in machines else None) or (
            machines[0] if len(machines) == 1 else None)
        if fp is None:
            theirs = f", none the profile's ({prefer})" if prefer else ""
            raise GradwireError(
                f"the database holds build rows of {len(machines)} machines "
                f"({', '.join(machines)}){theirs}: name one (opdb's --machine, "
                "predict's --opdb-machine)", path=path)
        rows = list(db.timings(op=op, fingerprint=fp, source=BUILD))
    return rows, fp


def machine_in(path: Path, fingerprint: str) -> Machine | None:
    """The machine ``fingerprint`` as the database file ``path`` records it (None: not
    there)."""
    with OpDatabase(path) as db:
        return next((m for m in db.machines() if m.fingerprint == fingerprint), None)


def threads_note(path: Path, fp: str, recorded: Machine | None) -> str | None:
    """A note where the rows of machine ``fp`` in ``path`` were timed with other intra-op
    threads than the trace's ops ran with (``recorded``: the trace's machine; None: not
    known); None where they agree or either is not known."""
    if recorded is None or recorded.threads is None or recorded.fingerprint == fp:
        return None
    used = machine_in(path, fp)
    if used is None or used.threads is None or used.threads == recorded.threads:
        return None

    fix = f" --threads {recorded.threads}" if recorded.threads else ""
    return (f"note: the profile's ops ran with {threads_said(recorded.threads)}, {path}'s rows "
            f"of machine {fp} were timed with {threads_said(used.threads)}: an op's time and "
            f"how it grows with its size depend on them (`gradwire opdb build{fix}` times them as "
            "the profile ran)")


def choices_note(path: Path, fp: str, model: CostModel) -> str | None:
    """A note where ``path`` keeps no choice of regression for machine ``fp`` (a database
    built before they were kept): each op type asked for is then cross-validated here."""
    if model.kept_choices:
        return None
    return (f"note: {path} keeps no choice of regression for machine {fp}'s op types (built "
            "before they were kept): each is chosen here by 5-fold cross-validation, about half a "
            f"second per op type; `gradwire opdb build --db {path}` on that machine keeps "
            "them (it times nothing already timed)")


def model_for_trace(path: Path, machine: str | None, recorded: Machine | None
                    ) -> tuple[CostModel, str, str | None]:
    """``model_from_db`` preferring ``recorded``, the machine a profile's trace ran on, and
    ``threads_note`` on the rows taken."""
    model, fp = model_from_db(path, machine, None if recorded is None else recorded.fingerprint)
    return model, fp, threads_note(path, fp, recorded)


def model_from_db(path: Path, machine: str | None = None, prefer: str | None = None
                  ) -> tuple[CostModel, str]:
    """The CostModel of the rows ``opdb build`` timed on ``machine`` (``build_rows``, with
    ``prefer``) in the database file ``path``, with the choices of regression it kept, and
    that machine's fingerprint."""
    rows, fp = build_rows(path, machine, prefer=prefer)
    if not rows:
        raise GradwireError(f"no rows timed by `gradwire opdb build` on machine {fp}: run it "
                            "on the machine the what-if is for", path=path)
    with OpDatabase(path) as db:
        choices = db.model_choices(fp)
    return CostModel(rows, choices), fp


def ring_hop_line(rows: Iterable[OpTiming]) -> tuple[float, float] | None:
    """(µs per hop, µs per byte of the chunk) of a hop of the collective ring all-reduce timed
    on loopback: the least-squares line through ``rows``' ``CollectiveRingHop`` timings
    without a link (collector/ringhop.py), each term at least 0; None without two chunk
    sizes."""
    return _hop_line([r for r in rows if r.op == RING_HOP and LINK_ATTR not in dict(r.attrs)])


def ring_hop_links(rows: Iterable[OpTiming]) -> tuple[tuple[float, float, float], ...]:
    """The hop's line for each link rate it was timed across (scripts/diag_ring_hop_link.py):
    (TCP payload rate in bytes per µs, µs per hop, µs per byte), slowest link first; a rate
    with fewer than two chunk sizes is left out."""
    by_rate: dict[float, list[OpTiming]] = {}
    for r in rows:
        bps = dict(r.attrs).get(LINK_ATTR) if r.op == RING_HOP else None
        if bps:
            by_rate.setdefault(float(bps) / 8e6, []).append(r)
    lines = ((rate, _hop_line(rs)) for rate, rs in sorted(by_rate.items()))
    return tuple((rate, *line) for rate, line in lines if line is not None)


def _hop_line(hop_rows: Sequence[OpTiming]) -> tuple[float, float] | None:
    """The least-squares line (µs, µs per byte) through hop rows, each term at least 0; None
    without two chunk sizes."""
    hops = [(float(r.inputs[0][0]) * DTYPE_SIZE[r.dtype], r.median_us) for r in hop_rows]
    if len({b for b, _ in hops}) < 2:
        return None
    slope, intercept = statistics.linear_regression(*zip(*hops, strict=True))
    return max(0.0, intercept), max(0.0, slope)
