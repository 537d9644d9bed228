"""``gradwire predict`` from end to end, one way: options checked, lab results and the profile
read once, the sweep run, baselines, notes, outputs."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from gradwire import atomic, emit
from gradwire.bundle import SAMPLE_BUNDLE, SAMPLE_MEASURED
from gradwire.errors import GradwireError
from gradwire.provenance import provenance
from gradwire.replay.command import FORMATS, MAX_CONFIGURATIONS
from gradwire.replay.grid import baseline_rows, profile_bandwidth_bps, start_mode, worker_nic_bps
from gradwire.replay.measured import is_lab_result, match_measured, measured_files, measured_points
from gradwire.replay.notes import (
    loopback_note,
    lossy_note,
    other_job_note,
    ps_cores_note,
    shaped_ps_only_note,
    timeline_note,
    trace_slowdown_note,
    wide_ci_note,
)
from gradwire.replay.outputs import (
    FIELDS,
    OUT_FILES,
    parse_timeline_spec,
    print_finished,
    rows_of,
    timeline_name,
    write_outputs,
)
from gradwire.replay.predict import Prediction
from gradwire.replay.sweep import Job, python_loop_jobs, run_jobs


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
            print_finished(getattr(stop, "finished", None), len(jobs), args.quiet)
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
    written = write_outputs(args, doc, rows, measured, prof, win, transport)
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
        if p.suffix == ".json" and p.is_file() and is_lab_result(p):
            raise GradwireError("a lab result, not a bundle: each lab result takes its own "
                                f"--measured (--measured {p})", path=p)
    return list(args.bundles)
