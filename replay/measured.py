"""``--measured``: the lab results a prediction is shown beside (files, or folders of them),
one point per configuration (the median of its runs), paired with the predicted rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gradwire.errors import GradwireError, PredictError
from gradwire.units import format_rate, parse_rate_bps

JOB_KEYS = ("model", "model_mb", "batch_size", "mode", "grpc_options")  # a lab run's job
# the mechanism a lab run's mode trained with (replay/mechanisms.py): rows of another are not
# compared with it
MODE_MECHANISM = {"async": "async-ps", "sync": "sync-ps", "ring": "ring-allreduce"}
ASYNC = MODE_MECHANISM["async"]  # a row or run that names none
# the lab's job what-ifs (scripts/lab: --partition, --accumulate, --mixed-precision,
# --recompute, --xla, --fuse-tensors) and their values in a plain run (a result older than
# one of them)
WHATIF_PLAIN = {"partition": 1, "accumulate": 1, "mixed_precision": False, "recompute": False,
                "xla": False, "fuse_bytes": 0}


def measured_files(paths: list[Path]) -> list[tuple[Path, Any]]:
    """The lab results of ``--measured``, each read once, as (file, its JSON document): each
    file given, and the ``*.json`` files of each folder given that read as lab results
    (sorted; a folder's others, such as a bench configuration's config.json or predict.json,
    are passed over). A file given that cannot be read is an error naming it."""
    from gradwire.bundle import read_json

    out = []
    for p in paths:
        if p.is_dir():
            files = sorted(q for q in p.glob("*.json") if q.is_file())
            found = [(q, doc) for q in files if _is_lab_doc(doc := _try_read(q))]
            if not found:
                others = f" ({len(files)} other JSON file(s))" if files else ""
                raise PredictError(f"no lab result (*.json) in this --measured folder{others}",
                                   path=p)
            out += found
        else:
            out.append((p, read_json(p)))
    return out


def measured_points(results: list[tuple[Path, Any]]) -> list[dict[str, Any]]:
    """One point per configuration (workers, ps, bandwidth) of lab results (file, document),
    as ``measured_files`` gives them: the median examples/s of its runs, which are kept under
    ``runs``."""
    import statistics

    runs: dict[tuple[int, int, float], list[float]] = {}
    jobs: dict[tuple[int, int, float], tuple[dict[str, Any], dict[str, Any], Path]] = {}
    for f, doc in results:
        p = _lab_run(doc, f)
        key = (p["workers"], p["ps"], p["bandwidth_bps"])
        job, whatif, first = jobs.setdefault(key, (p["job"], p["whatif"], f))
        if (p["job"], p["whatif"]) != (job, whatif):
            raise PredictError(f"ran another job than {first} at the same W, M and bandwidth "
                                f"({p['job'] | p['whatif']} against {job | whatif}): give one "
                                "job's runs", path=f)
        runs.setdefault(key, []).append(p["examples_per_s"])
    out = []
    for key, v in runs.items():
        job, whatif, _ = jobs[key]
        out.append({"workers": key[0], "ps": key[1], "bandwidth_bps": key[2],
                    "examples_per_s": statistics.median(v), "runs": v, "job": job,
                    "whatif": whatif,
                    "mechanism": MODE_MECHANISM.get(job["mode"] or "async", ASYNC)})
    return out


def lab_whatif(cfg: dict[str, Any]) -> dict[str, Any]:
    """A lab run's job what-ifs (``WHATIF_PLAIN``'s keys; recomputation as on/off)."""
    return {k: bool(cfg.get(k) or 0) if isinstance(plain, bool) else int(cfg.get(k) or plain)
            for k, plain in WHATIF_PLAIN.items()}


def of_the_whatif(measured: list[dict[str, Any]], whatif: dict[str, Any] | None,
                  batch_size: int | None) -> tuple[list[dict[str, Any]], int]:
    """The measured points that ran the job predicted: ``whatif`` its job what-ifs
    (``WHATIF_PLAIN``'s keys; None: a what-if no lab run makes, such as faster compute, so
    none did), ``batch_size`` its batch where a what-if changed it (None: not checked). The
    others compare another job; returns the kept points and how many were left out."""
    kept = [m for m in measured if whatif is not None and m["whatif"] == whatif
            and (batch_size is None or m["job"].get("batch_size") in (None, batch_size))]
    return kept, len(measured) - len(kept)


def _lab_run(doc: Any, path: Path) -> dict[str, Any]:
    """One lab run's configuration and examples/s, its document checked (errors name
    ``path``)."""
    from gradwire.schema import check_lab_result

    check_lab_result(doc, path, measured=True)
    cfg = doc["config"]
    return {"workers": cfg["workers"], "ps": cfg["ps"],
            # an unshaped lab run (bandwidth null) has no rate of its own
            "bandwidth_bps": None if cfg["bandwidth"] in (None, "none")
            else parse_rate_bps(str(cfg["bandwidth"])),
            "examples_per_s": float(doc["throughput_examples_per_s"]),
            "job": {k: cfg.get(k) for k in JOB_KEYS}, "whatif": lab_whatif(cfg)}


def _try_read(path: Path) -> Any:
    """``path``'s JSON document, or None where it cannot be read."""
    from gradwire.bundle import read_json

    try:
        return read_json(path)
    except GradwireError:
        return None


def _is_lab_doc(doc: Any) -> bool:
    return isinstance(doc, dict) and "config" in doc and "kind" not in doc


def is_lab_result(path: Path) -> bool:
    """Whether ``path`` reads as a lab result (a JSON object with a ``config``)."""
    return _is_lab_doc(_try_read(path))


def match_measured(measured: list[dict[str, Any]], rows: list[dict[str, Any]],
                   rate_given: bool = False) -> tuple[list[dict[str, Any]], str | None]:
    """The measured points that match a predicted configuration (same W and M, and a rate
    within 0.1%; an unshaped run, with no rate, pairs with the profile's own rate, the sweep's
    one rate when no ``--bandwidth`` was given), with the row's exact rate, so table, JSON and
    plot pair them alike (an unshaped point keeps ``"unshaped": true``); and a note on the
    others."""
    rates: dict[tuple[int, int, str], set[float]] = {}
    for r in rows:
        rates.setdefault((r["workers"], r["ps"], r.get("mechanism", ASYNC)),
                         set()).add(r["bandwidth_bps"])
    kept, lost = [], []
    for m in measured:
        mechanism = m.get("mechanism", ASYNC)
        have = rates.get((m["workers"], m["ps"], mechanism), set())
        bw = m["bandwidth_bps"]
        # (with no --bandwidth the sweep has one rate: the profile's)
        near = ([b for b in have if same_rate(b, bw)] if bw is not None
                else [] if rate_given else sorted(have))
        if near:
            kept.append({**m, "bandwidth_bps": near[0]} | ({"unshaped": True} if bw is None
                                                          else {}))
        else:
            rate = "unshaped" if bw is None else format_rate(bw)
            lost.append(f"W={m['workers']} M={m['ps']} {rate} {mechanism}")
    note = None if not lost else (
        f"note: {len(lost)} measured configuration(s) match no predicted one and are left out "
        f"({', '.join(lost[:4])}{', ...' if len(lost) > 4 else ''}): predict them with "
        "--workers, --ps, --bandwidth and --mechanism")
    return kept, note


def same_rate(a_bps: float, b_bps: float) -> bool:
    """Whether two link rates name the same configuration (within 0.1% of the second)."""
    return abs(a_bps - b_bps) <= 1e-3 * b_bps
