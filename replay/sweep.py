"""Run a prediction sweep: profile, configurations in parallel, baselines, outputs."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, TypeVar

from gradwire import atomic, emit
from gradwire.bundle import (
    SAMPLE_BUNDLE,
    SAMPLE_MEASURED,
    usable_cpus,
)
from gradwire.collector.transport import TransportStats
from gradwire.errors import GradwireError
from gradwire.provenance import provenance
from gradwire.replay.command import FORMATS, MAX_CONFIGURATIONS, MAX_WORKERS
from gradwire.replay.predict import (
    CI_TARGET,
    GOODPUT,
    Prediction,
    replication_seed,
    simulate,
    simulate_phases,
    start_offsets,
)
from gradwire.replay.template import Profile
from gradwire.units import format_rate, parse_rate_bps

FIELDS = ("model", "workers", "ps", "bandwidth_bps", "order", "flow_control", "examples_per_s",
          "steps_per_s", "speedup", "ci_low", "ci_high", "phase_low", "phase_high", "start",
          "bottleneck", "utilisation", "ps_cores_busy", "steps", "events")
REPLICATED = ("random", "stratified")  # --start modes that average replications
JOB_KEYS = ("model", "model_mb", "batch_size", "mode", "grpc_options")  # a lab run's job
T = TypeVar("T")
OUT_FILES = ("predictions.json", "predictions.csv", "throughput.png")  # what -o DIR holds


@dataclasses.dataclass(frozen=True)
class Job:
    """One simulation of a sweep (picklable, for the process pool)."""

    workers: int
    ps: int
    bandwidth_bps: float
    order: str
    win_bytes: float | None
    seed: int
    steps: int
    max_steps: int
    link: str = "fair"
    worker_bandwidth_bps: float | None = None  # None: unconstrained worker NICs
    start: str = "random"  # 'random'/'stratified': replications (phases); 'together': one run
    replications: int = 8
    max_replications: int = 64
    ps_cores: int | None = None  # None: a core per worker's update (ICPE'20)


def for_jobs(prof: Profile) -> Profile:
    """The profile as the simulations get it (pickled for each job of a pool, put once in
    Ray's store): without the capture statistics they do not use (a PS capture's queueing
    delays, a float per data segment, can take megabytes)."""
    return dataclasses.replace(prof, transport=None)


def _run_job(args: tuple[Profile, Job]) -> Prediction:
    prof, job = args
    if job.start in REPLICATED:
        return simulate_phases(prof.templates, prof.batch_size, job.workers, job.ps,
                               job.bandwidth_bps, job.order, job.win_bytes, job.seed,
                               job.steps, job.replications, job.max_replications,
                               link=job.link, worker_bandwidth_bps=job.worker_bandwidth_bps,
                               ps_cores=job.ps_cores, stratified=job.start == "stratified")
    pred, _ = simulate(prof.templates, prof.batch_size, job.workers, job.ps, job.bandwidth_bps,
                       job.order, job.win_bytes, job.seed, job.steps, job.max_steps,
                       link=job.link, worker_bandwidth_bps=job.worker_bandwidth_bps,
                       ps_cores=job.ps_cores)
    return pred


def run_jobs(prof: Profile, jobs: list[Job], processes: int | None, progress: bool,
             backend: str = "local", ray_address: str | None = None,
             verbose: bool = False) -> list[Prediction]:
    """Simulate every job, in parallel on ``processes`` cores (or as Ray tasks with
    ``backend="ray"``: on the cluster at ``ray_address``, else a local instance), with a
    progress bar. Same jobs, same predictions, whichever the backend."""
    if backend == "ray":
        from gradwire.replay.raybackend import run_jobs_ray

        return run_jobs_ray(for_jobs(prof), jobs, processes, ray_address, progress, verbose)
    if backend != "local":
        raise GradwireError(f"unknown backend {backend!r}: use local or ray")
    cores = usable_cpus()
    n = min(processes or cores, cores)  # more processes than cores only costs memory
    prof = for_jobs(prof)
    work = [(prof, j) for j in jobs]
    done: list[tuple[int, Prediction]] = []  # (job, prediction) as they finish
    if n == 1 or len(jobs) == 1:
        try:
            _with_progress(enumerate(map(_run_job, work)), len(jobs), progress, done)
        except BaseException as stop:
            _keep_finished(stop, done)
            raise
        return [r for _, r in done]
    pool = ProcessPoolExecutor(max_workers=min(n, len(jobs)), initializer=_worker_signals)
    try:
        # submitted, not pool.map: map cancels its futures when left early, and the pool's
        # thread then raises InvalidStateError (a traceback) on finding its workers gone
        futures = {pool.submit(_run_job, w): k for k, w in enumerate(work)}
        # counted as they finish (one slow configuration hides no other), kept in job order
        _with_progress(((futures[f], f.result()) for f in as_completed(futures)),
                       len(jobs), progress, done)
        out = [r for _, r in sorted(done, key=lambda kr: kr[0])]
    except BaseException as stop:  # Ctrl-C, SIGTERM, an error: stop the workers, now
        _keep_finished(stop, done)
        # SIGKILL: no handler of theirs runs (a SIGTERM made an idle worker print a
        # traceback); the pool marks the futures left broken
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.kill()
        pool.shutdown(wait=False)
        raise
    pool.shutdown()
    return out


def python_loop_jobs(jobs: list[Job]) -> tuple[str, int] | None:
    """Why, and for how many of ``jobs``, the replayer cannot take its compiled loop (a PS
    core limit, no numba); None when every job takes it."""
    from gradwire.replay.fastloop import unsupported
    from gradwire.replay.predict import sim_config

    why = [unsupported(sim_config(j.workers, j.ps, j.bandwidth_bps, j.order, j.win_bytes,
                                  j.seed, False, j.link, j.worker_bandwidth_bps,
                                  ps_cores=j.ps_cores)) for j in jobs]
    slow = [w for w in why if w]
    return (slow[0], len(slow)) if slow else None


def _worker_signals() -> None:
    """A pool worker ends quietly on SIGTERM/SIGHUP sent to it directly (a process group's
    signal), instead of running gradwire's handler meant for the main process."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _keep_finished(stop: BaseException, done: list[tuple[int, Prediction]]) -> None:
    """On Ctrl-C or a signal (not an error), hand the configurations already simulated to
    ``run_predict`` on the exception (``finished``, in job order), which prints them."""
    if not isinstance(stop, Exception):
        stop.finished = [r for _, r in sorted(done, key=lambda kr: kr[0])]  # type: ignore[attr-defined]


def _with_progress(results: Iterable[T], total: int, show: bool,
                   out: list[T] | None = None) -> list[T]:
    """The results, in the order they come, with a progress bar (a terminal) or a line per
    tenth of them (a log) when ``show``; gathered into ``out`` if given, so that a caller
    interrupted midway still has those that came."""
    out = [] if out is None else out
    if not show:
        out.extend(results)
        return out
    from rich.progress import Progress

    console = _stderr_console()
    if not console.is_terminal:  # a log file: a line per tenth of the sweep, not a bar
        step = max(1, total // 10)
        t0 = time.monotonic()
        for r in results:
            out.append(r)
            if len(out) % step == 0 or len(out) == total:
                print(f"gradwire predict: simulated {len(out)}/{total} configurations "
                      f"({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
        return out
    with Progress(transient=True, console=console) as bar:
        task = bar.add_task("simulating", total=total)
        for r in results:
            out.append(r)
            bar.advance(task)
    return out


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


LOSSY_SHARE = 0.003  # retransmitted share of data segments above which a link counts as lossy


# a sweep rate this close to the profile's is the profile's: a profile without the lab's
# configured rate has only its measured goodput (on the lab's lossy MLP profile 216 Mbit/s of
# a 250 Mbit/s link)
PROFILE_RATE_TOLERANCE = 0.20


def is_lossy(stats: TransportStats | None) -> bool:
    """Whether the profile's PS captures show an overflowing queue (more than LOSSY_SHARE of
    their data segments retransmitted)."""
    return stats is not None and stats.retransmitted_share > LOSSY_SHARE


def at_profile_rate(bandwidth_bps: float, profile_bps: float | None) -> bool:
    """Whether a sweep's rate is the profile's own (within PROFILE_RATE_TOLERANCE)."""
    return profile_bps is not None and (
        abs(bandwidth_bps - profile_bps) <= PROFILE_RATE_TOLERANCE * profile_bps)


def start_mode(start: str, stats: TransportStats | None, bandwidth_bps: float,
               profile_bps: float | None) -> str:
    """How a configuration's workers start: ``--start auto`` is ``stratified`` (each worker in
    its own slot of the step) at the rate of a profile whose queue overflowed, where the
    lab's workers settle into taking turns on the link (docs/predict.md, "Lossy links"), and
    ``random`` otherwise (at another rate the queue may not overflow); any other ``--start``
    as given. Rates in bits per second."""
    if start != "auto":
        return start
    lossy_here = is_lossy(stats) and at_profile_rate(bandwidth_bps, profile_bps)
    return "stratified" if lossy_here else "random"


def lossy_note(stats: TransportStats | None, profile_bps: float | None = None,
               bandwidths: Iterable[float] = (), start: str = "auto") -> str | None:
    """What to tell the user when the profile's bottleneck dropped packets (else None).
    ``profile_bps``: the profile's link rate; ``bandwidths``: the predicted ones, bits per
    second; ``start``: the ``--start`` given (what the sim rows did about it)."""
    if not is_lossy(stats):
        return None
    assert stats is not None
    bandwidths = sorted(set(bandwidths))
    other = [b for b in bandwidths if not at_profile_rate(b, profile_bps)]
    head = (f"note: {100 * stats.retransmitted_share:.1f}% of the TCP data segments in the "
            f"profile's PS capture were retransmissions: its bottleneck queue overflows. On "
            f"such links (the lab at 250 Mbit/s) the workers settle into taking turns on the "
            f"link")
    tail = "; see docs/predict.md, 'Lossy links'."
    if start == "auto":
        same = [b for b in bandwidths if b not in other]
        rates = ", ".join(format_rate(b) for b in same) if same else "the profile's rate"
        text = (f"{head}, so the sim rows at {rates} start each worker in its own slot of the "
                f"step (--start stratified; the phase range shows where one run can land)")
        if other:
            ran = f" ran at {format_rate(profile_bps)}" if profile_bps else "'s rate differs"
            text += (f". The profile{ran}: at {', '.join(format_rate(b) for b in other)} "
                     f"the queue may not overflow, and the sim keeps independent random "
                     f"phases there")
        return text + tail
    if start == "random":
        return (f"{head}, which independent random phases (--start random) miss: in the lab "
                f"they predicted 4-22% below the measured throughput at W >= 2; --start auto "
                f"(the default) starts each worker in its own slot of the step" + tail)
    return f"{head}; --start {start} does not model that" + tail


def profile_bandwidth_bps(prof: Profile) -> float:
    """The link rate the profile ran at: as configured when known, else its measured goodput
    over the TCP payload share, bits per second."""
    return prof.profile_bandwidth_bps or prof.link_rate_bps / GOODPUT


def baseline_rows(prof: Profile, models: list[str], workers: list[int], ps_list: list[int],
                  bandwidths: list[float]) -> list[Prediction]:
    """The analytical baselines for every configuration."""
    from gradwire.replay.baselines import PhaseTimes, baseline

    if not prof.phases:
        raise GradwireError("the baselines need the 1-worker phases from the worker's capture, "
                            "and none were found")
    # the baselines divide the shared stations' times by M; a profile recorded with M0 PSes
    # already shows them divided by M0, so scale back to one PS first
    m0 = max(1, len(prof.ps_tasks))
    phases = PhaseTimes(downlink_s=prof.phases["downlink"] * m0, worker_s=prof.phases["worker"],
                        uplink_s=prof.phases["uplink"] * m0,
                        server_s=prof.phases["server"] * m0, batch_size=prof.batch_size)
    base_bw = profile_bandwidth_bps(prof)
    rows = []
    for model in models:
        for m in ps_list:
            for bw in bandwidths:
                for w in workers:
                    r = baseline(model, phases, w, m, bw / base_bw)
                    rows.append(Prediction(
                        model=model, workers=w, ps=m, bandwidth_bps=bw, order="-",
                        flow_control=True, examples_per_s=r.examples_per_s,
                        steps_per_s=r.steps_per_s, ci=(r.examples_per_s, r.examples_per_s),
                        steps=0, bottleneck=r.bottleneck, utilisation=r.utilisation, events=0))
    return rows


def rows_of(preds: list[Prediction]) -> list[dict[str, Any]]:
    """Table rows with the speedup over the same model/M/bandwidth at the smallest W."""
    base: dict[tuple, float] = {}
    for p in sorted(preds, key=lambda p: p.workers):
        base.setdefault((p.model, p.ps, p.bandwidth_bps), p.examples_per_s)
    out = []
    for p in preds:
        d = dataclasses.asdict(p)
        d["ci_low"], d["ci_high"] = d.pop("ci")
        d["phase_low"], d["phase_high"] = d.pop("phase_range") or (None, None)
        ref = base[(p.model, p.ps, p.bandwidth_bps)]
        d["speedup"] = p.examples_per_s / ref if ref else 0.0
        out.append({k: d[k] for k in FIELDS})
    return out


def measured_points(files: list[Path]) -> list[dict[str, Any]]:
    """One point per configuration (workers, ps, bandwidth) of lab result files: the median
    examples/s of its runs, which are kept under ``runs``."""
    import statistics

    runs: dict[tuple[int, int, float], list[float]] = {}
    jobs: dict[tuple[int, int, float], tuple[Any, Path]] = {}
    for p, f in zip(_measured_runs(files), files, strict=True):
        key = (p["workers"], p["ps"], p["bandwidth_bps"])
        job, first = jobs.setdefault(key, (p["job"], f))
        if p["job"] != job:
            raise GradwireError(f"ran another job than {first} at the same W, M and bandwidth "
                                f"({p['job']} against {job}): give one job's runs", path=f)
        runs.setdefault(key, []).append(p["examples_per_s"])
    return [{"workers": w, "ps": m, "bandwidth_bps": bw,
             "examples_per_s": statistics.median(v), "runs": v,
             "job": dict(zip(JOB_KEYS, jobs[(w, m, bw)][0], strict=True))}
            for (w, m, bw), v in runs.items()]


def _measured_runs(files: list[Path]) -> list[dict[str, Any]]:
    from gradwire.bundle import read_json
    from gradwire.schema import check_lab_result

    pts = []
    for f in files:
        doc = read_json(f)
        check_lab_result(doc, f, measured=True)
        cfg = doc["config"]
        pts.append({"workers": cfg["workers"], "ps": cfg["ps"],
                    # an unshaped lab run (bandwidth null) has no rate of its own
                    "bandwidth_bps": None if cfg["bandwidth"] in (None, "none")
                    else parse_rate_bps(str(cfg["bandwidth"])),
                    "examples_per_s": float(doc["throughput_examples_per_s"]),
                    "job": tuple(cfg.get(k) for k in JOB_KEYS)})
    return pts


def _is_lab_result(path: Path) -> bool:
    """Whether ``path`` reads as a lab result (a JSON object with a ``config``)."""
    from gradwire.bundle import read_json

    try:
        doc = read_json(path)
    except GradwireError:
        return False
    return isinstance(doc, dict) and "config" in doc and "kind" not in doc


def measured_files(paths: list[Path]) -> list[Path]:
    """The lab result files of ``--measured``: each file given, and the ``*.json`` files of
    each folder given (sorted)."""
    out = []
    for p in paths:
        if p.is_dir():
            found = sorted(q for q in p.glob("*.json") if q.is_file())
            if not found:
                raise GradwireError("no lab result (*.json) in this --measured folder", path=p)
            out += found
        else:
            out.append(p)
    return out


def other_job_note(lab: dict[str, Any], measured: list[dict[str, Any]]) -> str | None:
    """A note when --measured runs are of another job than the profile's lab run (``lab``:
    its configuration; nothing to compare without one)."""
    if not lab:
        return None
    mine = {k: lab.get(k) for k in JOB_KEYS}
    other = [m for m in measured if m["job"] != mine]
    if not other:
        return None
    diff = ", ".join(f"{k} {other[0]['job'][k]!r} against {mine[k]!r}" for k in JOB_KEYS
                     if other[0]["job"][k] != mine[k])
    return (f"note: {len(other)} measured configuration(s) ran another job than the profile "
            f"({diff}): their error columns compare different jobs")


def shaped_ps_only_note(lab: dict[str, Any], args: argparse.Namespace,
                        ps_list: list[int]) -> str | None:
    """A note when the profile's lab shaped only the PS links (its workers' NICs ran
    unlimited) and the default ``--worker-bandwidth same`` caps them, with several PSes."""
    if lab.get("shape") != "ps" or getattr(args, "worker_bandwidth", "same") != "same" or \
            max(ps_list) < 2:
        return None
    return ("note: the profile's lab shaped only the PS links, so its workers' NICs were not "
            "limited; with 2 or more PSes --worker-bandwidth same (the default: a cluster of "
            "identical machines) caps each worker's NIC at the PS links' rate and predicts "
            "less than that lab would run: --worker-bandwidth unlimited predicts the lab")


def same_rate(a_bps: float, b_bps: float) -> bool:
    """Whether two link rates name the same configuration (within 0.1% of the second)."""
    return abs(a_bps - b_bps) <= 1e-3 * b_bps


def timeline_note(args: argparse.Namespace, rows: list[dict[str, Any]]) -> str | None:
    """A note when ``--timeline`` names a configuration that is not one of the sweep's."""
    if not args.timeline:
        return None
    w, m, bw = parse_timeline_spec(args.timeline)
    if any(r["model"] == "sim" and r["workers"] == w and r["ps"] == m
           and same_rate(r["bandwidth_bps"], bw) for r in rows):
        return None
    return (f"note: the timeline's configuration (W={w}, M={m}, {format_rate(bw)}) is not one "
            "of the table's sim rows: it was simulated for the timeline alone")


def worker_nic_bps(args: argparse.Namespace, bandwidth_bps: float) -> float | None:
    """The worker NIC rate (bits per second) for a PS link rate: ``--worker-bandwidth``
    ``same`` -> that rate, ``unlimited`` -> None, else the given rate."""
    nic = getattr(args, "worker_bandwidth", "same")
    return bandwidth_bps if nic == "same" else None if nic == "unlimited" else float(nic)


def run_predict(args: argparse.Namespace, progress: bool) -> int:
    """The whole ``gradwire predict`` command."""
    from gradwire.replay.profile import load_profile

    paths = profile_paths(args)
    if getattr(args, "json_path", None) is not None:
        emit.deprecated("predict", "--json FILE", "-o DIR (DIR/predictions.json) or --format "
                        "json (standard output)")
    if args.steps is None:
        args.steps = 200 if args.start == "together" else 60
    for bad, name in ((args.steps, "--steps"), (args.max_steps, "--max-steps")):
        if bad < 10:
            raise GradwireError(f"{name} must be at least 10 (got {bad})")
    if not 2 <= args.replications <= args.max_replications:
        raise GradwireError(f"--replications must be at least 2 and at most --max-replications "
                            f"(got {args.replications} and {args.max_replications})")
    if args.start == "together" and args.max_steps < args.steps:
        raise GradwireError(f"--max-steps ({args.max_steps}) is below --steps ({args.steps})")
    if args.timeline:
        parse_timeline_spec(args.timeline)  # a bad spec is said now, not after the sweep
        if not args.out:
            raise GradwireError("--timeline writes into the -o folder: give -o DIR")
    if args.out:  # output places are checked before the long work, so nothing is lost
        if args.out.suffix.lower() in (".json", ".csv", ".png") and not args.out.is_dir():
            raise GradwireError(f"-o names the folder predict writes its files into (DIR/"
                                f"predictions.json...), not a file: for one JSON file use "
                                f"--format json > {args.out}", path=args.out)
        atomic.ready_folder(args.out)
        for name in OUT_FILES + ((timeline_name(args.timeline),) if args.timeline else ()):
            atomic.ready_file(args.out / name, "output file")
    if getattr(args, "json_path", None) is not None:
        atomic.ready_file(args.json_path, "--json file")
    if args.ray_address and args.backend != "ray":
        raise GradwireError("--ray-address needs --backend ray")
    if args.backend == "ray" and "sim" in args.model:
        from gradwire.replay.raybackend import import_ray

        import_ray()  # before the profile: say at once when the extra is missing
    measured_given = list(args.measured)
    if args.sample and not measured_given and SAMPLE_MEASURED.is_dir():
        measured_given = [SAMPLE_MEASURED]  # the sample's own lab runs, shown beside it
    measured = measured_points(measured_files(measured_given))

    def say(msg: str) -> None:  # what the long work is doing: on a terminal, or with -v
        if progress:
            print(f"gradwire predict: {msg}", file=sys.stderr, flush=True)

    fit = args.flow_control == "on" and not args.win  # WIN from the worker's capture
    prof = load_profile(paths, args.batch_size, progress=say, fit_win=fit)
    if getattr(args, "profile_bandwidth", None):  # the user knows the rate it ran at
        prof = dataclasses.replace(prof, profile_bandwidth_bps=args.profile_bandwidth)
    ps_list = args.ps or [len(prof.ps_tasks)]
    bandwidths = args.bandwidth or [profile_bandwidth_bps(prof)]
    n_configs = len(ps_list) * len(bandwidths) * len(args.workers) * len(args.model)
    if n_configs > MAX_CONFIGURATIONS:
        raise GradwireError(f"{n_configs} configurations (workers x PSes x bandwidths x models) "
                            f"in one sweep; at most {MAX_CONFIGURATIONS}: predict fewer W, "
                            "e.g. --workers 1,2,4,8,16,32")
    win = None
    if args.flow_control == "on":
        win = float(args.win) if args.win else prof.fitted_win_bytes
    transport = prof.transport  # counted as the PS captures were read for their streams
    if transport is not None:
        say(f"counted retransmissions in the PS captures as they were read: "
            f"{transport.retransmitted:,} of {transport.data_segments:,} data segments "
            f"({100 * transport.retransmitted_share:.1f}%)")
    profile_bps = profile_bandwidth_bps(prof)
    jobs = [Job(w, m, bw, args.order, win, args.seed, args.steps, args.max_steps, args.link,
                worker_nic_bps(args, bw), start_mode(args.start, transport, bw, profile_bps),
                args.replications, args.max_replications, args.ps_cores)
            for m in ps_list for bw in bandwidths for w in args.workers]
    preds: list[Prediction] = []
    if "sim" in args.model:
        slow = python_loop_jobs(jobs)
        if slow:
            say(f"note: {slow[1]} of {len(jobs)} configurations replay in the Python loop "
                f"({slow[0]}), several times slower than the compiled one (on the lab's ResNet-50 "
                "profile, minutes per configuration)")
        try:
            preds += run_jobs(prof, jobs, args.jobs, progress, args.backend, args.ray_address,
                              bool(args.verbose))
        except BaseException as stop:  # Ctrl-C, a signal: show what was already simulated
            _print_finished(getattr(stop, "finished", None), len(jobs), args.quiet)
            raise
    others = [m for m in args.model if m != "sim"]
    if others:
        preds += baseline_rows(prof, others, args.workers, ps_list, bandwidths)
    rows = rows_of(preds)
    measured, unmatched = match_measured(measured, rows, rate_given=bool(args.bandwidth))
    if not args.measured:  # the sample's own runs, not asked for: those off the table go quietly
        unmatched = None
    notes = [n for n in (lossy_note(transport, profile_bps, bandwidths, args.start)
                         if "sim" in args.model else None, wide_ci_note(preds, args),
                         ps_cores_note(preds, args.ps_cores, prof.ps_host_cores),
                         loopback_note(prof, args.bandwidth), unmatched,
                         other_job_note(prof.lab, measured),
                         shaped_ps_only_note(prof.lab, args, ps_list) if "sim" in args.model
                         else None,
                         timeline_note(args, rows), trace_slowdown_note(prof)) if n]
    doc = {"profile": {"source": prof.source, "steps": len(prof.templates),
                       "batch_size": prof.batch_size, "ps": len(prof.ps_tasks),
                       "win_bytes": win, "alpha_us_per_byte": prof.alpha_us_per_byte,
                       "beta_us": prof.beta_us, "phases_s": prof.phases,
                       "transport": transport.summary() if transport else None},
           "rows": rows, "measured": measured, "notes": notes, "gradwire": provenance()}
    written = _write_outputs(args, doc, rows, measured, prof, win, transport)
    from gradwire.render import print_predictions

    emit.emit(args, FORMATS, table=lambda con: print_predictions(rows, measured, con), doc=doc,
              rows=rows if args.format == "csv" else None, columns=list(FIELDS),
              out_is_folder=True)
    for note in notes:
        print(f"gradwire predict: {note}", file=sys.stderr)
    emit.wrote(args, written)
    return 0


def profile_paths(args: argparse.Namespace) -> list[Path]:
    """The profile's bundles: those given, or with --sample the one shipped with gradwire.
    A lab result given where a bundle goes (the old ``--measured a.json b.json BUNDLE``) is
    refused naming the new spelling."""
    if args.sample and args.bundles:
        raise GradwireError("give the profile's bundles or --sample, not both")
    if args.sample:
        return [SAMPLE_BUNDLE]
    if not args.bundles:
        raise GradwireError("give the profile's bundles (its PS and worker bundles, or their "
                            "folder), or --sample for the sample bundle shipped with gradwire")
    for p in args.bundles:
        if p.suffix == ".json" and p.is_file() and _is_lab_result(p):
            raise GradwireError("a lab result, not a bundle: each lab result takes its own "
                                f"--measured (--measured {p})", path=p)
    return list(args.bundles)


def _print_finished(finished: list[Prediction] | None, total: int, quiet: bool) -> None:
    """The table of the configurations a stopped sweep had finished (nothing is written to
    -o: it holds whole sweeps only)."""
    if not finished or quiet:  # (-q: no table)
        return
    from gradwire.render import print_predictions

    print(f"gradwire predict: stopped after {len(finished)} of {total} configurations; those "
          "finished (not written to --out or --json):", file=sys.stderr, flush=True)
    print_predictions(rows_of(finished), [])


def match_measured(measured: list[dict[str, Any]], rows: list[dict[str, Any]],
                   rate_given: bool = False) -> tuple[list[dict[str, Any]], str | None]:
    """The measured points that match a predicted configuration (same W and M, and a rate
    within 0.1%; an unshaped run, with no rate, pairs with the profile's own rate, the sweep's
    one rate when no ``--bandwidth`` was given), with the row's exact rate, so table, JSON and
    plot pair them alike (an unshaped point keeps ``"unshaped": true``); and a note on the
    others."""
    rates: dict[tuple[int, int], set[float]] = {}
    for r in rows:
        rates.setdefault((r["workers"], r["ps"]), set()).add(r["bandwidth_bps"])
    kept, lost = [], []
    for m in measured:
        have = rates.get((m["workers"], m["ps"]), set())
        bw = m["bandwidth_bps"]
        # (with no --bandwidth the sweep has one rate: the profile's)
        near = ([b for b in have if same_rate(b, bw)] if bw is not None
                else [] if rate_given else sorted(have))
        if near:
            kept.append({**m, "bandwidth_bps": near[0]} | ({"unshaped": True} if bw is None
                                                          else {}))
        else:
            rate = "unshaped" if bw is None else format_rate(bw)
            lost.append(f"W={m['workers']} M={m['ps']} {rate}")
    note = None if not lost else (
        f"note: {len(lost)} measured configuration(s) match no predicted one and are left out "
        f"({', '.join(lost[:4])}{', ...' if len(lost) > 4 else ''}): predict them with "
        "--workers, --ps and --bandwidth")
    return kept, note


TRACE_SLOWDOWN_NOTE = 1.15  # traced steps this much slower than the others: say so


def trace_slowdown_note(prof: Profile) -> str | None:
    """A note when the traced steps ran clearly slower than the untraced ones."""
    r = prof.trace_slowdown
    if r is None or r < TRACE_SLOWDOWN_NOTE:
        return None
    return (f"note: the traced steps ran {100 * (r - 1):.0f}% slower than the untraced ones "
            "(median step times, from trace/session.json or the lab's step ends less the "
            "hook's storing): FULL_TRACE costs this job that "
            "much, and the sim, built from the traced steps, may be low by up to as much")


def loopback_note(prof: Profile, bandwidths: list[float] | None) -> str | None:
    """A note when the link rate comes from a loopback profile: memory copies, not a network."""
    if not prof.loopback or bandwidths or prof.profile_bandwidth_bps:
        return None
    return (f"note: the profile ran on loopback, so its link rate "
            f"({format_rate(profile_bandwidth_bps(prof))}) is this host's memory-copy speed, "
            "not a network's: give --bandwidth for the cluster you mean")


def ps_cores_note(preds: list[Prediction], ps_cores: int | None,
                  host_cores: int | None = None) -> str | None:
    """A note when, with no --ps-cores, a sim row keeps a PS busier than one core applying
    updates: the prediction holds only if the PS hosts have that many cores to spare
    (``host_cores``: the profiled PS host's, when known)."""
    if ps_cores is not None:
        return None
    busy = [p for p in preds if p.model == "sim" and (p.ps_cores_busy or 0.0) >= 1.0]
    if not busy:
        return None
    top = max(busy, key=lambda p: p.ps_cores_busy or 0.0)
    return (f"note: the PS's updates keep {top.ps_cores_busy:.1f} cores busy on average at "
            f"W={top.workers}, M={top.ps}, {format_rate(top.bandwidth_bps)} (above one core in "
            f"{len(busy)} configuration(s)): the sim gives each worker's update a core of its "
            "own (ICPE'20); if the PS hosts have fewer cores for TensorFlow, give --ps-cores N"
            + (f" (the profiled PS host has {host_cores})" if host_cores else ""))


def wide_ci_note(preds: list[Prediction], args: argparse.Namespace) -> str | None:
    """A note when sim rows stopped at --max-replications (--max-steps) with a 95% interval
    wider than the CI target."""
    sims = [p for p in preds if p.model == "sim"]
    wide = [p for p in sims if p.ci[1] - p.examples_per_s > CI_TARGET * p.examples_per_s * 1.001]
    if not wide:
        return None
    limit = (f"--max-steps {args.max_steps}" if args.start == "together"
             else f"--max-replications {args.max_replications}")
    return (f"note: {len(wide)} of the {len(sims)} sim configurations stopped at {limit} with a "
            f"95% interval wider than +-{100 * CI_TARGET:g}% of the mean (their ci columns); "
            "raise it for tighter ones")


def _write_outputs(args: argparse.Namespace, doc: dict[str, Any], rows: list[dict[str, Any]],
                   measured: list[dict[str, Any]], prof: Profile, win: float | None,
                   transport: TransportStats | None = None) -> list[Path]:
    """Write -o DIR's files (and the deprecated --json FILE); returns the paths written. Every
    file is made in memory first and then written back to back, so that a failure in making
    one (the timeline's simulation, the plot) leaves the folder as it was."""
    text = json.dumps(doc, indent=1) + "\n"
    files: list[tuple[Path, str | bytes, str]] = []
    if getattr(args, "json_path", None) is not None:
        files.append((args.json_path, text, "--json file"))
    if args.out:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
        from gradwire.replay.plot import plot_throughput

        png = io.BytesIO()
        name = ", ".join(Path(p).name for p in doc["profile"]["source"].split(", "))
        plot_throughput(rows, measured, png, title=name)  # the profile's folders, by name
        files += [(args.out / "predictions.json", text, "output file"),
                  (args.out / "predictions.csv", buf.getvalue(), "output file"),
                  (args.out / "throughput.png", png.getvalue(), "output file")]
    if args.timeline:
        files.append((args.out / timeline_name(args.timeline),
                      _timeline_text(args, prof, win, transport), "output file"))
    return [atomic.write_output(path, data, what) for path, data, what in files]


def parse_timeline_spec(spec: str) -> tuple[int, int, float]:
    """``W,M,BW`` -> (workers, ps, bits per second)."""
    try:
        w, m, bw = spec.split(",")
        workers, ps, bps = int(w), int(m), parse_rate_bps(bw)
    except ValueError:
        raise GradwireError(f"--timeline wants W,M,BANDWIDTH like 4,1,1Gbit: {spec!r}") from None
    if workers < 1 or ps < 1:
        raise GradwireError(f"--timeline needs at least 1 worker and 1 PS: {spec!r}")
    if max(workers, ps) > MAX_WORKERS:
        raise GradwireError(f"--timeline: at most {MAX_WORKERS} workers and PSes: {spec!r}")
    return workers, ps, bps


def timeline_name(spec: str) -> str:
    """The file name of ``--timeline W,M,BW``'s Chrome trace."""
    w, m, bw = parse_timeline_spec(spec)
    return f"timeline-W{w}-M{m}-{format_rate(bw)}.json"


def _timeline_text(args: argparse.Namespace, prof: Profile, win: float | None,
                   transport: TransportStats | None = None) -> str:
    """The Chrome trace JSON of ``--timeline``'s configuration (20 steps)."""
    from gradwire.replay.timeline import synthetic_trace

    w, m, bw = parse_timeline_spec(args.timeline)
    seed, offsets = args.seed, ()
    start = start_mode(args.start, transport, bw, profile_bandwidth_bps(prof))
    if start in REPLICATED:  # the first replication's phases
        seed = replication_seed(args.seed, 0)
        offsets = start_offsets(prof.templates, w, seed, start == "stratified")
    _, sim = simulate(prof.templates, prof.batch_size, w, m, bw, args.order, win, seed,
                      steps=20, max_steps=20, record=True, link=args.link,
                      worker_bandwidth_bps=worker_nic_bps(args, bw), start_offsets_us=offsets,
                      ps_cores=args.ps_cores)
    return json.dumps(synthetic_trace(sim)) + "\n"
