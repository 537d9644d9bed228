"""``gradwire optimize``: which change to the job pays off (replay/optimize.py's search;
docs/optimize.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gradwire import emit
from gradwire.argtypes import path_arg
from gradwire.errors import GradwireError, PredictError
from gradwire.replay.command import add_profile_arguments, profile_paths, worker_rate_arg
from gradwire.replay.mechanisms import peer_mechanisms
from gradwire.units import positive_int_arg, rate_arg, size_arg

FORMATS = ("table", "json")


def add_parser(sub: Any) -> None:
    """Register the ``optimize`` subcommand."""
    p = sub.add_parser(
        "optimize", help="search the job's passes (tensor partition and fusion, mixed "
        "precision, op fusion, recomputation) for the plan that trains fastest",
        description="dPRO's optimizer on a 1-worker profile: predict the job as profiled "
        "for one configuration (--workers, --ps, --bandwidth), find what its critical path "
        "is made of, try every change of the job one pass away that shortens an op on that "
        "path, take the fastest if it beats the current plan beyond the sim's 95% "
        "intervals, and go on from there. Prints every plan tried, the best one as predict "
        "options, its predicted speedup, and why. Mixed precision and op fusion are tried "
        "with --opdb; peak memory (and --memory-budget) needs the profile's trace. See "
        "docs/optimize.md.",
        epilog="Examples:\n  gradwire optimize bundles/ --workers 4 --ps 2\n"
        "  gradwire optimize bundles/ --workers 8 --ps 2 --opdb ops.sqlite "
        "--memory-budget 2GB --format json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_profile_arguments(p, "optimize")
    p.add_argument("--workers", type=positive_int_arg, default=4, metavar="W",
                   help="workers of the job to optimize (default 4)")
    p.add_argument("--ps", type=positive_int_arg, default=None, metavar="M",
                   help="parameter servers (default: as profiled)")
    p.add_argument("--bandwidth", type=rate_arg, default=None, metavar="RATE",
                   help="link rate, e.g. 1Gbit (default: the profile's)")
    p.add_argument("--worker-bandwidth", type=worker_rate_arg, default="same", metavar="RATE",
                   help="each worker's NIC: same (as --bandwidth), unlimited, or a rate "
                   "(as predict's; default: same)")
    p.add_argument("--mechanism", default="auto",
                   help="how the workers synchronise (as predict's --mechanism; default: as "
                   "profiled)")
    p.add_argument("--batch-size", type=positive_int_arg, default=None, metavar="N",
                   help="examples per worker step (default: the lab's lab_result.json, else "
                   "the TraceHook's batch_size=N in the trace, as predict's)")
    p.add_argument("--opdb", type=path_arg, default=None, metavar="FILE",
                   help="the op cost database: also try mixed precision and op fusion")
    p.add_argument("--opdb-machine", default=None, metavar="FINGERPRINT",
                   help="whose timings in --opdb to use (default: its only machine)")
    p.add_argument("--memory-budget", type=size_arg, default=None, metavar="SIZE",
                   help="a worker step's peak memory may not exceed SIZE (e.g. 2GB): plans "
                   "over it are not taken, and recomputation is tried when the job as profiled "
                   "exceeds it")
    p.add_argument("--jobs", type=positive_int_arg, default=None,
                   help="simulations in parallel (default: the usable cores)", metavar="N")
    emit.add_format(p, FORMATS, json_flag=False)
    emit.add_out_file(p, "the plans tried and the best")


def run(args: argparse.Namespace) -> int:
    """Run ``gradwire optimize``; returns the exit code."""
    from gradwire.opdb import check_database
    from gradwire.replay.optimize import Search
    from gradwire.replay.options import PredictOptions
    from gradwire.replay.predictflow import resolved
    from gradwire.replay.profile import load_profile

    if "," in args.mechanism:
        raise PredictError(f"--mechanism {args.mechanism}: optimize searches one mechanism at "
                           "a time; give one (gradwire predict puts several side by side)",
                           usage=True)
    bundles = profile_paths(args)
    emit.ready_out(args, FORMATS)
    progress = emit.shows_progress(args)

    def say(msg: str) -> None:
        if progress:
            print(f"gradwire optimize: {msg}", file=sys.stderr, flush=True)

    opts = PredictOptions(
        bundles=tuple(bundles), sample=args.sample, workers=(args.workers,),
        ps=None if args.ps is None else (args.ps,),
        bandwidths_bps=None if args.bandwidth is None else (args.bandwidth,),
        worker_bandwidth=args.worker_bandwidth, batch_size=args.batch_size,
        mechanisms=(args.mechanism,),
        opdb=args.opdb, opdb_machine=args.opdb_machine, jobs=args.jobs)
    if opts.opdb is not None:  # before the profile's seconds
        check_database(opts.opdb, opts.opdb_machine)
    prof = load_profile(opts.bundles, opts.batch_size)
    opts = resolved(opts, prof)
    steps, model = _traced(opts, say, args.memory_budget)
    search = Search(prof, opts, steps, model, args.memory_budget, say,
                    holds=_sent_holds(opts, say) if steps else None)
    chosen = search.run()
    doc = _document(search, chosen, opts, args.memory_budget)
    doc["predict_command"] = _predict_command(args, doc)
    emit.emit(args, FORMATS, table=lambda con: _table(con, doc), doc=doc)
    return 0


def _predict_command(args: argparse.Namespace, doc: dict[str, Any]) -> str | None:
    """The ``gradwire predict`` command of the best plan, with every option of this run that
    predict takes (it gives the same figure), or None when the best is the job as profiled."""
    import shlex

    from gradwire.units import format_rate

    plan = doc["best"]["plan"]
    if plan == "as profiled":
        return None
    words = ["gradwire", "predict", *(["--sample"] if args.sample else
                                      [shlex.quote(str(b)) for b in args.bundles]),
             "--workers", str(doc["workers"]), *(["--ps", str(doc["ps"])] if doc["ps"] else [])]
    if doc["bandwidth_bps"]:
        words += ["--bandwidth", format_rate(doc["bandwidth_bps"])]
    if args.worker_bandwidth != "same":
        wb = args.worker_bandwidth
        words += ["--worker-bandwidth", wb if isinstance(wb, str) else format_rate(wb)]
    if args.batch_size is not None:
        words += ["--batch-size", str(args.batch_size)]
    words += ["--mechanism", doc["mechanism"]]
    if args.opdb is not None:
        words += ["--opdb", shlex.quote(str(args.opdb))]
        if args.opdb_machine:
            words += ["--opdb-machine", shlex.quote(args.opdb_machine)]
    return " ".join([*words, plan])


def _sent_holds(opts: Any, say: Any) -> list[dict[tuple[str, int], float]]:
    """Per traced step (``traced_steps``' order), when each tensor the worker sent left it
    (replay/sentholds.py; empty where the worker bundle's capture does not say, with a
    note)."""
    from gradwire.replay.jobwhatifs import traced_worker
    from gradwire.replay.sentholds import bundle_holds

    traced = traced_worker(opts.bundles)
    if traced is None:
        return []
    holds, note = bundle_holds(traced)
    if note:
        say(note)
    return holds


def _traced(opts: Any, say: Any, budget: float | None = None) -> tuple[Any, Any]:
    """The profile's traced steps, every op of them (the memory estimator's view; None without
    the protobuf package to read them, or a trace that cannot be read, said: PredictError
    instead where ``budget``, --memory-budget, needs them), and the cost model of --opdb
    (None without it)."""
    from gradwire.replay.jobwhatifs import traced_steps

    model = None
    if opts.opdb is not None:
        from gradwire.replay.jobwhatifs import traced_machine
        from gradwire.replay.opcost import choices_note, model_for_trace

        model, fp, note = model_for_trace(opts.opdb, opts.opdb_machine,
                                          traced_machine(opts.bundles))
        for line in (note, choices_note(opts.opdb, fp, model)):
            if line:
                say(line)
    try:
        steps = traced_steps(opts.bundles, "optimize", compute_only=False)
    except ImportError as e:
        if model is not None:
            raise PredictError(f"--opdb needs the traced ops' shapes, read with the [predict] "
                               f"extra's protobuf: {e}") from None
        why = f"the trace's ops are read with the [predict] extra's protobuf ({e})"
    except GradwireError as e:
        why = str(e)
    else:
        return steps, model
    if budget is not None:
        raise PredictError(f"--memory-budget needs the peak memory the profile's trace gives: "
                           f"{why}") from None
    say(f"no peak memory and no recomputation: {why}")
    return None, model


def _document(search: Any, chosen: list[Any], opts: Any, budget: float | None
              ) -> dict[str, Any]:
    """The JSON document: the configuration, every plan tried, the search's path, the best."""
    w, m, bw = search.config
    base, best = chosen[0], chosen[-1]

    def row(t: Any) -> dict[str, Any]:
        return {"plan": t.plan.describe(), "examples_per_s": t.examples_per_s,
                "ci": list(t.ci), "speedup": t.examples_per_s / base.examples_per_s,
                "peak_bytes": t.peak_bytes, "why": t.why,
                "chosen": any(c.plan == t.plan for c in chosen[1:]),
                "fits_budget": budget is None or t.peak_bytes is None or t.peak_bytes <= budget}

    peers = bool(peer_mechanisms(opts.mechanisms[:1]))  # no PS: M = 0, as predict shows it
    return {"workers": w, "ps": 0 if peers else m, "bandwidth_bps": bw,
            "rate_bps": search.rate_bps,
            "mechanism": opts.mechanisms[0],
            "memory_budget_bytes": budget,
            "tried": sorted((row(t) for t in search.tried.values()),
                            key=lambda r: -r["examples_per_s"]),
            "path": [{"plan": t.plan.describe(), "examples_per_s": t.examples_per_s,
                      "critical_path_share": t.path_share, "why": t.why} for t in chosen],
            "best": row(best)}


def _table(con: Any, doc: dict[str, Any]) -> None:
    """The plans tried, fastest first (the search's path starred), and the recommendation
    with why each of its passes was tried (the JSON has every plan's)."""
    from rich.table import Table

    from gradwire.units import format_rate

    rate = format_rate(doc["rate_bps"]) + ("" if doc["bandwidth_bps"] else " (the profile's)")
    t = Table(title=f"plans for W={doc['workers']}, M={doc['ps']}, {rate}, "
              f"{doc['mechanism']}")
    for col in ("plan", "examples/s", "95% CI", "speedup", "peak MB"):
        t.add_column(col, justify="left" if col == "plan" else "right")
    for r in doc["tried"]:
        t.add_row(("* " if r["chosen"] else "") + r["plan"], f"{r['examples_per_s']:.1f}",
                  f"{r['ci'][0]:.1f}-{r['ci'][1]:.1f}", f"{r['speedup']:.2f}x",
                  "-" if r["peak_bytes"] is None else _megabytes(r["peak_bytes"])
                  + ("" if r["fits_budget"] else " over"))
    con.print(t)
    if doc["memory_budget_bytes"] is not None and not all(r["fits_budget"] for r in doc["tried"]):
        con.print(f"'over': the plan's peak is over --memory-budget "
                  f"{_megabytes(doc['memory_budget_bytes'])} MB; it is not taken")
    best = doc["best"]
    if not best["fits_budget"]:
        least = min((r for r in doc["tried"] if r["peak_bytes"] is not None),
                    key=lambda r: r["peak_bytes"])
        con.print(f"no plan tried fits the memory budget of "
                  f"{_megabytes(doc['memory_budget_bytes'])} MB: the least peak is "
                  f"{_megabytes(least['peak_bytes'])} MB ({least['plan']}), so the job stays "
                  "as profiled")
    if best["plan"] == "as profiled":
        con.print("best plan: the job as profiled; no pass one step away beats it beyond the "
                  "sim's 95% intervals")
        return
    con.print(f"best plan: {best['plan']}: {best['examples_per_s']:.1f} examples/s, "
              f"{best['speedup']:.2f}x the job as profiled; predict it with:")
    con.print(f"  {doc['predict_command']}", soft_wrap=True)  # one line, to copy whole
    for step in doc["path"][1:]:
        con.print(f"  then {step['plan']}: {step['why']}")


def _megabytes(size: float) -> str:
    """``size`` bytes in MB, three significant figures below 100 MB (a small model's peak is
    under one), whole ones above."""
    mb = size / 1e6
    return f"{mb:.3g}" if mb < 100 else f"{mb:.0f}"
