"""``gradwire predict`` from end to end, one way: the options (checked once, replay/options.py)
-> the lab results to compare with -> the profile, each bundle and capture read once
(replay/profile.py) -> the sweep's configurations (replay/grid.py) -> the simulations
(replay/sweep.py) and the baselines -> notes (replay/notes.py) -> outputs (replay/outputs.py)."""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from gradwire.bundle import SAMPLE_MEASURED
from gradwire.collector.h2pings import PingTimes
from gradwire.errors import PredictError
from gradwire.opdb import check_database
from gradwire.provenance import provenance
from gradwire.replay.emulate import check_emulable, emulated_rows
from gradwire.replay.engine import Simulator
from gradwire.replay.executorgaps import (
    auto_executor_gaps,
    links_idle,
    with_compute_alone,
    without_executor_gaps,
)
from gradwire.replay.grid import (
    RECORDED_STEPS,
    baseline_rows,
    bucket_rows,
    busiest_ps_share,
    check_recorded,
    check_size,
    lab_per_node_queues,
    measured_burst_bytes,
    measured_share_windows,
    measured_window_bytes,
    profile_bandwidth_bps,
    recorded_run,
    sim_jobs,
    start_mode,
)
from gradwire.replay.hostcores import host_share
from gradwire.replay.hostcpu import host_steps_per_s, under_host_cpu
from gradwire.replay.hostqueue import BBR_V1, LOSS_BASED_CCS
from gradwire.replay.measured import (
    lab_whatif,
    match_measured,
    measured_files,
    measured_points,
    of_the_whatif,
)
from gradwire.replay.mechanisms import ASYNC_PS, SYNC_PS, base_mechanism, peer_mechanisms
from gradwire.replay.mechgroups import group_options, merged, of_mechanisms
from gradwire.replay.notes import batch_override_note, placed_ps_counts, predict_notes
from gradwire.replay.options import (
    EMULATE_RUNS,
    EMULATE_STARTS,
    EMULATE_STEPS,
    PredictOptions,
    baselines_of,
    refuse_host_queue,
)
from gradwire.replay.outputs import (
    print_finished,
    rows_of,
    say_notes,
    say_written,
    show_results,
    write_outputs,
)
from gradwire.replay.ownqueue import OwnQueueRows, own_queue_rows_note
from gradwire.replay.placement import PLACEMENTS
from gradwire.replay.predict import Prediction, warmup
from gradwire.replay.recordingcost import take_out as take_out_recording
from gradwire.replay.selfcheck import (
    checkable,
    own_prediction,
    own_run,
    own_run_note,
    swept,
)
from gradwire.replay.sweep import run_jobs
from gradwire.replay.tracecost import requests_out, take_out
from gradwire.replay.transforms import (
    add_layer_copies,
    layer_ops,
    layer_phase_factors,
    parse_layer_copies,
    scale_compute,
)

if TYPE_CHECKING:
    from pathlib import Path

    from gradwire.opdb import Machine
    from gradwire.replay.profile import Profile
    from gradwire.replay.rebatch import Rebatch
    from gradwire.replay.sweep import Job
    from gradwire.replay.template import StepTemplate


def run_predict(opts: PredictOptions, progress: bool) -> int:
    """The whole ``gradwire predict`` command; ``progress``: say what the long work is doing
    (a terminal, or -v). Returns the exit code. Mechanisms whose ``auto`` options resolve
    alike are replayed together; where they resolve otherwise (``mechanism_groups``), each
    group is predicted as it would be asked alone, and the tables are joined
    (``replay/mechgroups.py``)."""
    from gradwire.replay.profile import load_profile

    measured_given = list(opts.measured)
    if opts.sample and not measured_given and SAMPLE_MEASURED.is_dir():
        measured_given = [SAMPLE_MEASURED]  # the sample's own lab runs, shown beside it
    measured = measured_points(measured_files(measured_given))
    if opts.opdb is not None:  # a path mistyped is said whether or not a what-if reads it
        check_database(opts.opdb, opts.opdb_machine)
    say = _sayer(progress)
    prof = load_profile(opts.bundles, opts.batch_size, progress=say, fit_win=opts.fit_win)
    if opts.profile_bandwidth_bps:  # the user knows the rate it ran at
        prof = dataclasses.replace(prof, profile_bandwidth_bps=opts.profile_bandwidth_bps)
    measured, other_whatif = of_the_whatif(measured, predicted_whatif(opts, prof.lab),
                                           opts.to_batch_size or opts.batch_size)
    groups = mechanism_groups(opts, prof)
    # the whole sweep's size, once, before any group's sweep
    check_size(dataclasses.replace(opts, mechanisms=tuple(m for g in groups for m in g)),
               list(opts.ps or [len(prof.ps_tasks)]),
               list(opts.bandwidths_bps or [profile_bandwidth_bps(prof)]))
    if len(groups) == 1:
        done = _predicted(opts, prof, measured, other_whatif, say, progress)
    else:
        parts = []
        for k, (group, part_opts) in enumerate(group_options(opts, groups)):
            parts.append(_predicted(part_opts, prof, of_mechanisms(measured, groups, k),
                                    other_whatif if k == 0 else 0,
                                    _group_sayer(say, group), progress, split=True))
        done = merged(parts, groups)
    written = write_outputs(done.opts, done.doc, done.rows, done.measured,
                            done.runs[opts.timeline] if opts.timeline else None)
    show_results(done.opts, done.doc, done.rows, done.measured)
    say_notes(done.doc["notes"])
    say_written(done.opts, written)
    return 0


def mechanism_groups(raw: PredictOptions, prof: Profile) -> list[tuple[str, ...]]:
    """The mechanisms of ``raw`` (resolved: ``auto`` is the profile's), grouped by how their
    ``auto`` options resolve asked alone (``--link``, ``--link-windows``, ``--link-shares``,
    ``--executor-gaps`` and what they bring: the queue, the switch's queue, the BBR window,
    the standing queue),
    in the order asked: one group where they all resolve alike, or where ``--model emulate``
    (the asynchronous PS alone) is asked."""
    sweep = resolved(raw, prof)  # the sweep's own checks, as asked
    if len(sweep.mechanisms) < 2 or raw.emulate:
        return [sweep.mechanisms]
    keys: dict[tuple, list[str]] = {}
    for m in sweep.mechanisms:
        # (--timeline and --explain replay the first mechanism: not this one's to check)
        alone = resolved(dataclasses.replace(raw, mechanisms=(m,), timeline=None, explain=None),
                         prof, refuse_ps=False)
        keys.setdefault((alone.link, alone.uplink_queue, alone.link_windows,
                         alone.link_shares, alone.executor_gaps, alone.host_queue_bytes,
                         alone.standing_queue, alone.bbr_window_bytes), []).append(m)
    return [tuple(g) for g in keys.values()]


def _group_sayer(say: Callable[[str], None], group: tuple[str, ...]) -> Callable[[str], None]:
    """``say``, each line naming the mechanisms it is about."""
    return lambda msg: say(f"{', '.join(group)} rows: {msg}")


@dataclasses.dataclass(frozen=True)
class Predicted:
    """One finished sweep before its outputs: the options resolved, the JSON document, the
    table's rows, the measured points matched to them, and the runs recorded whole for
    ``--timeline`` and ``--explain`` (by configuration)."""

    opts: PredictOptions
    doc: dict[str, Any]
    rows: list[dict[str, Any]]
    measured: list[dict[str, Any]]
    runs: dict[tuple[int, int, float], Simulator]


def _predicted(opts: PredictOptions, prof: Profile, measured: list[dict[str, Any]],
               other_whatif: int, say: Callable[[str], None], progress: bool,
               split: bool = False) -> Predicted:
    """The sweep ``opts`` asks of ``prof``, its rows matched to ``measured`` (the points that
    ran the job predicted; ``other_whatif``: how many ran another); ``split``: one group of
    a sweep's mechanisms (``mechanism_groups``), whose sweep was checked whole."""
    placement_known = opts.placement != "auto" or bool(prof.lab)
    raw_opts, opts = opts, resolved(opts, prof, refuse_ps=not split)
    gaps_cut = None  # the share of the traced compute time --executor-gaps took out
    if opts.executor_gaps in ("drop", "alone"):
        prof, gaps_cut = without_executor_gaps(prof)
        why = (" (every mechanism computes with its links idle, where the PS profile's chunks "
               "waited on its transfers)" if raw_opts.executor_gaps == "auto" else "")
        say(f"--executor-gaps {raw_opts.executor_gaps}: the compute chunks at their ops' own "
            f"time{why}, {100 * gaps_cut:.0f}% of the traced compute time out")
    recording_cost = None
    if opts.recording_cost == "auto" and opts.sim:
        prof, recording_cost = take_out_recording(prof, lazy_own_step(raw_opts, prof))
        if recording_cost.steps[1] or opts.verbose:
            say(recording_cost.said())
    trace_cost = None
    if opts.trace_cost == "auto" and opts.sim:
        prof, trace_cost = take_out(prof, lazy_own_step(raw_opts, prof))
        say(trace_cost.said())
    elif opts.trace_cost == "requests" and opts.sim:
        prof, trace_cost = requests_out(prof)
        say(trace_cost.said())
    traced = TracedOps(opts)  # read once, for the what-ifs that read the traced ops
    # the step's compute alone, for a links-idle ring, asked for (--executor-gaps alone)
    alone = compute_alone(opts, traced) if opts.executor_gaps == "alone" else None
    if alone is not None:
        prof, alone_factor = with_compute_alone(prof, alone)
        say(f"the compute at its time alone: the worker's step run whole on the machine "
            f"(`gradwire opdb step`) took {alone / 1e3:.2f} ms of compute; every compute chunk "
            f"scaled by {alone_factor:.3f} (a ring computes with its links idle)")
    if opts.compute_scale != 1.0:
        prof = with_faster_compute(prof, opts, traced, say)
    layer_note = None
    if opts.add_layer is not None:
        prof, layer_note = with_layer_copies(prof, *parse_layer_copies(opts.add_layer))
    rebatched = None
    recorded_batch = prof.batch_size  # prof's after --to-batch-size is the new one
    if opts.to_batch_size is not None and opts.to_batch_size != prof.batch_size:
        prof, rebatched = with_batch_size(prof, opts, traced, say)
    elif opts.to_batch_size is not None:
        say(f"--to-batch-size {opts.to_batch_size} is the profile's own batch: nothing to "
            "rescale")
    if not opts.plan.empty:
        prof = with_plan(prof, opts, traced, say)
    if opts.opdb is not None and peer_mechanisms(opts.mechanisms):
        prof = with_ring_hop(prof, opts, traced, say)
    if opts.models == ("all",):  # the sim and the baselines of the mechanisms predicted
        opts = dataclasses.replace(opts, models=("sim", *baselines_of(opts.mechanisms)))
    ps_list = list(opts.ps or [len(prof.ps_tasks)])
    bandwidths = list(opts.bandwidths_bps or [profile_bandwidth_bps(prof)])
    check_recorded(opts, prof)
    if opts.emulate:  # before the sim's minutes, not after
        check_emulable(opts, prof, recorded_batch, ps_list)
    win, burst, windows, seen, seen_windows = link_settings(opts, prof, say)
    own_bps = profile_bandwidth_bps(prof)
    jobs = sim_jobs(opts, ps_list, bandwidths, win, burst, windows)
    own_queue = own_queue_rows(raw_opts, opts, prof)
    if own_queue is not None:
        jobs = own_queue.swapped(jobs, ps_list, bandwidths, win)
    queued = [j for j in jobs if j.link != opts.link]
    # the profile's own configuration, replayed beside the sweep to check the replay against
    # the run it was recorded from (replay/selfcheck.py): one job more if the sweep lacks it,
    # of two replications (one worker has no phases to average over)
    check = opts.sim and checkable(opts, prof, recorded_batch)
    extra = []
    own_nic = own_nic_differs(opts, prof)  # the sweep's 1-worker row is not the profile's run
    # the sweep's own row is not the check's where the sweep replays one template a run
    if check and (own_nic or opts.template_draw != "step"
                  or not swept(opts.workers, ps_list, bandwidths, prof, own_bps)):
        extra = own_jobs(opts, prof, win, burst, windows)
    preds: list[Prediction] = []
    if opts.sim:
        try:
            preds += run_jobs(prof, jobs + extra, opts.jobs, progress, opts.backend,
                              opts.ray_address, bool(opts.verbose))
        except BaseException as stop:  # Ctrl-C, a signal: show what was already simulated
            print_finished(getattr(stop, "finished", None), len(jobs + extra), opts.quiet)
            raise
    own_pred = own_prediction(preds[len(jobs):] if extra else preds, prof, own_bps) \
        if check else None
    own = own_run(prof, own_pred) if own_pred is not None else None
    del preds[len(jobs):]  # the extra job is the check's, not a row of the table
    preds, host_cpu = bounded_by_host_cpu(opts, prof, preds, recorded_batch)
    if opts.baselines:
        preds += baseline_rows(prof, opts.baselines, list(opts.workers), ps_list, bandwidths,
                               opts.placement)
    emulated = None
    if opts.emulate:
        rows_emulated, emulated = emulated_rows(prof, list(opts.workers), ps_list, bandwidths,
                                                opts.placement, say,
                                                step=opts.emulate_step or EMULATE_STEPS[0],
                                                start=opts.emulate_start or EMULATE_STARTS[0],
                                                max_runs=opts.emulate_runs or EMULATE_RUNS[1])
        preds += rows_emulated
    rows = rows_of(preds)
    measured, unmatched = match_measured(measured, rows,
                                         rate_given=bool(opts.bandwidths_bps))
    if not opts.measured:  # the sample's own runs, not asked for: those off the table go quietly
        unmatched = None
    notes = predict_notes(opts, prof, preds, rows, measured, unmatched, ps_list,
                          placement_known, shared_workers=[
                              j.workers for j in jobs if j.link == opts.link
                              and base_mechanism(j.mechanism) == ASYNC_PS])
    if note := own_queue_rows_note(queued):
        notes.append(note)
    if note := own_run_note(own):
        notes.insert(0, note)
    notes += traced.notes
    if host_cpu and host_cpu["rows_lowered"]:
        notes.append(f"note: {host_cpu['rows_lowered']} sim row(s) bounded by the profile's host: "
                     f"{host_cpu['cores']} cores at {host_cpu['cpu_s_per_step']:.3f} CPU seconds "
                     f"a step run at most {host_cpu['bound_examples_per_s']:.1f} examples/s "
                     "(--host-cpu off: without; docs/predict.md, \"The host's CPU\")")
    if note := batch_override_note(raw_opts, prof.lab):
        notes.append(note)
    if layer_note:
        notes.append(layer_note)
    if other_whatif:
        why = ("no lab run makes the what-ifs --compute-scale and --add-layer"
               if predicted_whatif(opts, prof.lab) is None else
               "the lab's --partition, --accumulate, --mixed-precision, --recompute, --xla, "
               "--fuse-tensors or batch size differ")
        notes.append(f"note: {other_whatif} measured configuration(s) ran another job than the "
                     f"one predicted ({why}): left out of the error columns")
    doc = {"profile": {"source": prof.source, "steps": len(prof.templates),
                       "batch_size": prof.batch_size, "ps": len(prof.ps_tasks),
                       "win_bytes": win, "alpha_us_per_byte": prof.alpha_us_per_byte,
                       "beta_us": prof.beta_us, "phases_s": prof.phases,
                       "mechanism": prof.mechanism, "compute_scale": opts.compute_scale,
                       "compute_ops": list(opts.compute_ops),
                       "trace_cost": trace_cost.summary() if trace_cost else None,
                       # the compute chunks at their ops' own time or not (--executor-gaps,
                       # resolved), the share of the traced compute time that took out, and
                       # the step's compute alone they were then scaled to (ms; None: not)
                       "executor_gaps": {"chunks": opts.executor_gaps, "cut": gaps_cut,
                                         "compute_alone_ms": None if alone is None
                                         else alone / 1e3},
                       "recording_cost": recording_cost.summary() if recording_cost else None,
                       "host_cpu": host_cpu,
                       # --model emulate's idle time a step and where it came from
                       "emulate": emulated.summary() if emulated else None,
                       # most cores a node's machine lost to its hypervisor over its capture
                       "capture_stolen_cores": (None if prof.capture_stolen is None
                                                else prof.capture_stolen[0]),
                       "add_layer": opts.add_layer,
                       "to_batch_size": None if rebatched is None else {
                           "from": rebatched.batch_from, "to": rebatched.batch_to,
                           "compute_factor": rebatched.compute_factor,
                           "costed_share": rebatched.costed_share,
                           "by_bytes_share": rebatched.by_bytes_share,
                           "unchanged_share": rebatched.unchanged_share,
                           "batch_transfers": list(rebatched.batch_edges)},
                       "plan": opts.plan.describe(),
                       "transport": prof.transport.summary() if prof.transport else None,
                       "link_burst_measured_bytes": list(seen),
                       "link_burst_bytes": list(burst),
                       # the mechanisms whose rows replay it: in all, in the one-worker ones
                       "link_burst_rows": bucket_rows(opts),
                       "link_window_measured_bytes": list(seen_windows),
                       "link_window_bytes": list(windows),
                       # --link-shares windows: the windows a transfer's share is drawn from,
                       # [pulls, pushes] (bytes, byte quantiles); None: equal shares
                       "link_share_windows_bytes": [list(x) for x in opts.share_windows[:2]]
                       if any(opts.share_windows) else None,
                       # and each PS's own, [PS 0's pulls, PS 1's pulls, ..., PS 0's pushes,
                       # PS 1's pushes, ...], for the rows at the profile's PS count (None:
                       # the pooled ones everywhere)
                       "link_share_windows_by_ps_bytes": [list(x)
                                                          for x in opts.share_windows[2:]]
                       or None,
                       # the TCP congestion control the PS hosts ran, if recorded
                       "congestion_control": prof.ps_congestion_control,
                       # the workers' HTTP/2 PINGs on the pull connections the PS captures
                       # show (us), and whether the host-queue rows replay them (--pings)
                       "pings": None if prof.ps_pings is None else {
                           "intervals_us": list(prof.ps_pings.intervals_us),
                           "answer_us": prof.ps_pings.answer_us,
                           "replayed": bool(opts.pings_us) or bool(
                               queued and own_queue is not None and own_queue.opts.pings_us)},
                       # the async-ps rows --link overflow replays through the PS's own queue
                       # (replay/ownqueue.py): [W, M, bits per second] each
                       "own_queue_rows": [[j.workers, j.ps, j.bandwidth_bps] for j in queued],
                       # None where no variable is placed (own count, or no records)
                       "placement": opts.placement if placed_ps_counts(prof, ps_list)
                       else None,
                       "busiest_ps_share": {str(m): list(busiest_ps_share(prof, m,
                                                                          opts.placement))
                                            for m in ps_list}},
           # each replication's length and warm-up, steps per worker (--steps, --run-steps)
           "replication": None if all(start_mode(opts.start, m) == "together"
                                      for m in opts.mechanisms) else {
               "steps": opts.steps, "warmup_steps": (warmup(opts.steps) if opts.warmup_steps
                                                     is None else opts.warmup_steps)},
           "self_check": own.summary() if own else None,
           "rows": rows, "measured": measured, "notes": notes, "gradwire": provenance()}
    runs = {config: recorded_run(*(
        (own_queue.opts, prof, win, config, own_queue.burst, own_queue.windows)
        if own_queue is not None and own_queue.takes(config[0], config[2], opts.mechanisms[0])
        else (opts, prof, win, config, burst, windows))) for config in opts.recorded}
    if opts.explain:
        doc["critical_path"] = explain_run(runs[opts.explain], opts.explain)
    return Predicted(opts, doc, rows, measured, runs)


def own_jobs(opts: PredictOptions, prof: Profile, win: float | None,
             burst: tuple[float, float], windows: tuple[float, float]) -> list[Job]:
    """The sim's job for the profile's own configuration (1 worker, its PS count, rate and
    mechanism; ``opts`` resolved; the worker's NIC unlimited where the profile's lab shaped
    only the PS links, whatever ``--worker-bandwidth`` asks of the sweep), of two
    replications (one worker has no phases to average over; every step a template drawn,
    so two replications see them all): what the self-check, ``--trace-cost auto`` and
    ``--recording-cost auto`` replay."""
    own = dataclasses.replace(opts, workers=(1,), mechanisms=(prof.mechanism,), replications=2,
                              max_replications=2, template_draw="step")
    if own_nic_differs(opts, prof):
        own = dataclasses.replace(own, worker_bandwidth="unlimited")
    return sim_jobs(own, [prof.ps_count], [profile_bandwidth_bps(prof)], win, burst, windows)


def bounded_by_host_cpu(opts: PredictOptions, prof: Profile, preds: list[Prediction],
                        recorded_batch: int
                        ) -> tuple[list[Prediction], dict[str, Any] | None]:
    """``preds`` with the sim's rows under the profile's host's CPU (``replay/hostcpu.py``)
    where ``--host-cpu auto`` and the profile's lab gives its cores and CPU per step, and no
    what-if changes the job (``opts.changes_job``; ``recorded_batch``: the batch the CPU a
    step was measured at); with what was bounded (None: none)."""
    whatif = opts.changes_job(recorded_batch)
    steps = host_steps_per_s(prof.lab) if opts.host_cpu == "auto" and not whatif else None
    if steps is None:
        return preds, None
    # the profile measured its own mechanism's CPU a step, not another's
    sim = [k for k, p in enumerate(preds) if p.model == "sim" and p.mechanism == prof.mechanism]
    bounded, lowered = under_host_cpu([preds[k] for k in sim], steps, prof.batch_size)
    out = list(preds)
    for k, p in zip(sim, bounded, strict=True):
        out[k] = p
    return out, {"cores": prof.lab["cpu_count"], "cpu_s_per_step": prof.lab["cpu_count"] / steps,
                 "bound_examples_per_s": steps * prof.batch_size, "rows_lowered": lowered}


def own_nic_differs(opts: PredictOptions, prof: Profile) -> bool:
    """Whether ``own_jobs`` gives the worker another NIC than the sweep does: the profile's
    lab shaped only the PS links, ``--worker-bandwidth`` caps the sweep's workers, and the
    profile has 2 or more PSes (with one, a NIC at the PS link's rate changes nothing)."""
    return (prof.lab.get("shape") == "ps" and opts.worker_bandwidth != "unlimited"
            and prof.ps_count >= 2)


def lazy_own_step(raw: PredictOptions, prof: Profile) -> Callable[[Profile], float]:
    """``own_step_replay``, set up only when first called: a profile with no excess to take
    out replays nothing and checks no option of its own configuration."""
    made: list[Callable[[Profile], float]] = []

    def step_us(p: Profile) -> float:
        if not made:
            made.append(own_step_replay(raw, prof))
        return made[0](p)
    return step_us


def own_step_replay(raw: PredictOptions, prof: Profile) -> Callable[[Profile], float]:
    """A function replaying a profile's own configuration (``own_jobs``; ``raw``'s other
    options resolved for its mechanism as recorded) and returning its step, us: what
    ``--trace-cost auto`` and ``--recording-cost auto`` scale the time ops against."""
    # the own configuration alone: a --timeline or --explain of the sweep's (a ring's M = 0)
    # is not its to check
    own = resolved(dataclasses.replace(raw, mechanisms=("auto",), timeline=None, explain=None),
                   prof)
    win, burst, windows, _seen, _seen_windows = link_settings(own, prof, lambda _text: None)
    jobs = own_jobs(own, prof, win, burst, windows)

    def step_us(p: Profile) -> float:
        return 1e6 / run_jobs(p, jobs, 1, False)[0].steps_per_s
    return step_us


def resolved(opts: PredictOptions, prof: Profile, refuse_ps: bool = True) -> PredictOptions:
    """``opts`` with ``auto`` resolved against the profile: ``--placement auto``, the strategy
    the lab recorded (its older runs, with none, were greedy); ``--mechanism auto``, as the
    profile was recorded (any other is a what-if, and a note says so); ``--link auto``
    (``auto_link``), and ``--link overflow`` into ``fair`` (its rows that overflow the PS's
    queue are ``own_queue_rows``'); ``--host-cores``, the host every node shares
    (``host_share``).
    ``--link-burst`` stays as given: ``grid.replays_bucket`` reads it per mechanism.
    ``refuse_ps``: refuse the PSes' options where no mechanism has a PS (off for one group
    of a sweep that has one)."""
    recorded = prof.lab.get("ps_strategy")
    opts = dataclasses.replace(opts, mechanisms=tuple(dict.fromkeys(
        prof.mechanism if m == "auto" else m for m in opts.mechanisms)))
    peer = peer_mechanisms(opts.mechanisms)
    if refuse_ps and len(peer) == len(opts.mechanisms):  # the options as given
        _refuse_ps_options(opts, ", ".join(peer))
    opts = dataclasses.replace(opts, host=host_share(opts.host_cores, prof.templates, prof.lab))
    if opts.placement == "auto":
        opts = dataclasses.replace(opts, placement=recorded if recorded in PLACEMENTS
                                   else "greedy")
    if opts.link == "auto":
        link, size, uplink = auto_link(prof.lab, opts.mechanisms, prof.ps_congestion_control)
        if link != "hostqueue" and opts.tcp != "reno":
            raise PredictError(f"--tcp {opts.tcp} runs the connections of the PS's own queue, "
                               f"and --link auto replays this profile's links as {link}: the "
                               f"host queue is taken {AUTO_HOSTQUEUE} (docs/predict.md, 'The "
                               f"PS's own queue'); --link hostqueue takes it anyway", usage=True)
        if link != "hostqueue" and opts.pings != "auto":
            raise PredictError(f"--pings {opts.pings} is for the connections of the PS's own "
                               f"queue, and --link auto replays this profile's links as {link}; "
                               f"--link hostqueue takes it", usage=True)
        if link != "fair" and opts.link_shares == "windows":
            raise PredictError(f"--link-shares windows shares the processor-shared links, and "
                               f"--link auto replays this profile's links as {link} (the "
                               f"PS's own queue, taken {AUTO_HOSTQUEUE}); --link fair takes it",
                               usage=True)
        # a --host-queue given stays (with --link-windows same it sizes the standing queue)
        opts = dataclasses.replace(opts, link=link, uplink_queue=uplink,
                                   host_queue_bytes=size if opts.host_queue_bytes is None
                                   else opts.host_queue_bytes)
    if opts.link == "hostqueue":
        opts = dataclasses.replace(opts, bbr_window_bytes=bbr_window_of(opts.tcp, prof))
    pings = (replayed_pings(prof, opts.pings, opts.tcp) if opts.link == "hostqueue"
             else PingTimes())
    opts = dataclasses.replace(opts, pings_us=pings.intervals_us, ping_answer_us=pings.answer_us)
    # --link overflow: its rows that overflow the PS's queue are own_queue_rows', the rest
    # equally shared
    shared = "fair" if opts.link == "overflow" else opts.link
    if opts.link_windows == "auto":
        opts = dataclasses.replace(opts, link_windows=auto_link_windows(opts.mechanisms,
                                                                        shared, prof.lab))
    refuse_host_queue(opts.host_queue_bytes, opts.link, opts.link_windows)
    opts = dataclasses.replace(opts, link=shared)
    if opts.executor_gaps == "auto":
        opts = dataclasses.replace(opts, executor_gaps=auto_executor_gaps(opts.mechanisms,
                                                                          prof.mechanism))
    if opts.link_shares == "auto":
        opts = dataclasses.replace(opts, link_shares=auto_link_shares(opts.mechanisms,
                                                                      opts.link, prof.lab))
    if opts.link_shares == "windows" and opts.link == "fair":
        opts = dataclasses.replace(opts, share_windows=measured_share_windows(prof))
    if opts.link_windows == "same" and opts.link == "fair":
        opts = dataclasses.replace(opts, standing_queue=standing_of(opts, prof.lab),
                                   host_queue_bytes=opts.host_queue_bytes
                                   if opts.host_queue_bytes is not None
                                   else recorded_queue_bytes(prof.lab))
    return opts


def compute_alone(opts: PredictOptions, traced: TracedOps) -> float:
    """``--executor-gaps alone``: the profile's worker step run whole on its machine (us;
    ``gradwire opdb step`` in ``--opdb``), what the compute of a mechanism with its links idle
    takes. PredictError where a mechanism predicted computes beside its transfers, or there is
    no ``--opdb`` or no such row in it."""
    busy = [m for m in opts.mechanisms if not links_idle(m)]
    if busy:
        raise PredictError(f"--executor-gaps alone times the compute of a mechanism with its "
                           f"links idle (ring all-reduce, butterfly; not @overlap), and "
                           f"{', '.join(busy)} computes beside its transfers", usage=True)
    if opts.opdb is None:
        raise PredictError("--executor-gaps alone reads the worker's step run whole from an "
                           "op cost database: give --opdb FILE (gradwire opdb step made it)",
                           usage=True)
    step = traced.timed_step_us("CPU")
    if step is None:
        raise PredictError(f"--executor-gaps alone: {opts.opdb} has no timing of this "
                           "profile's worker step on its machine: run `gradwire opdb step "
                           f"PROFILE --db {opts.opdb}` first")
    return step


def own_queue_rows(raw: PredictOptions, opts: PredictOptions, prof: Profile
                   ) -> OwnQueueRows | None:
    """``--link overflow``'s PS's own queue for the asynchronous rows that overflow it
    (replay/ownqueue.py), from the options as given (``raw``) and resolved (``opts``): None
    for any other ``--link`` or where no asynchronous PS is predicted. The queue: the one
    ``--host-queue`` gives, else the profile's lab's (the bytes it recorded, else its default
    at each rate)."""
    if raw.link != "overflow" or all(base_mechanism(m) != ASYNC_PS for m in opts.mechanisms):
        return None
    size = raw.host_queue_bytes if raw.host_queue_bytes is not None else \
        recorded_queue_bytes(prof.lab)
    own = resolved(dataclasses.replace(raw, link="hostqueue", host_queue_bytes=size,
                                       link_shares="equal"), prof)
    _win, burst, windows = link_settings(own, prof, lambda _text: None)[:3]
    return OwnQueueRows(own, burst, windows)


def auto_link_shares(mechanisms: tuple[str, ...], link: str, lab: dict | None = None) -> str:
    """``--link-shares auto``: ``windows`` for the asynchronous PS on shared links (registered
    in docs/preregistered/issue21-link-shares-second.md), except where the profile's lab
    queued each node apart (its HTB classes serve the nodes in turn, whatever their windows);
    else ``equal``."""
    if (link == "fair" and mechanisms and not lab_per_node_queues(lab or {})
            and all(base_mechanism(m) == ASYNC_PS for m in mechanisms)):
        return "windows"
    return "equal"


def auto_link_windows(mechanisms: tuple[str, ...], link: str, lab: dict | None = None) -> str:
    """``--link-windows auto``: ``off`` where the profile's lab served each node from a queue
    of its own (``lab_per_node_queues``: a worker's ACKs wait behind its own data only, so
    the workers' two directions are not coupled); else ``same`` (every connection counted, a
    lone flow at the full rate beside one going the other way and at half beside two, as the
    lab's socket samples show) where every mechanism is the asynchronous PS on equally shared
    links (``link`` resolved: ``fair``), as checked against the lab
    (docs/preregistered/issue21-strat-same-report.md); else ``ratio``, the rule the
    synchronous PS and the PS's own queue were checked with."""
    if lab_per_node_queues(lab or {}):
        return "off"
    return "same" if link == "fair" and mechanisms and all(
        base_mechanism(m) == ASYNC_PS for m in mechanisms) else "ratio"


def _refuse_ps_options(opts: PredictOptions, peer: str) -> None:
    """Options of the PSes, given where every mechanism asked for has none (``peer``)."""
    given = [name for name, on in (("--ps", opts.ps is not None),
                                   (f"--link {opts.link}", opts.link not in ("auto", "fair")),
                                   (f"--tcp {opts.tcp}", opts.tcp != "reno"),
                                   ("--uplink-queue", opts.uplink_queue),
                                   (f"--pings {opts.pings}", opts.pings != "auto"),
                                   ("--link-shares windows", opts.link_shares == "windows"),
                                   (f"--ps-cores {opts.ps_cores}", opts.ps_cores is not None),
                                   (f"--placement {opts.placement}",
                                    opts.placement != "auto"),
                                   (f"--partition {opts.plan.partition}",
                                    opts.plan.partition > 1)) if on]
    if given:
        raise PredictError(f"{' and '.join(given)} set the parameter servers, and {peer} has "
                           "none (its rows show M = 0); drop them, or add a PS mechanism to "
                           "--mechanism", usage=True)


def replays_pings(pings: str, tcp: str) -> bool:
    """Whether ``--pings`` with ``--tcp`` replays the workers' PINGs on a host queue:
    ``capture``, or ``auto`` with BBR whole (registered: BBR whole's holds end at the PINGs;
    Reno's queue, a stand-in for BBR's, was no nearer with them,
    docs/preregistered/issue22-sync-pings-report.md)."""
    return pings == "capture" or (pings == "auto" and tcp == "bbr-v1")


def replayed_pings(prof: Profile, pings: str, tcp: str) -> PingTimes:
    """The workers' PINGs a host queue replays with ``--pings`` and ``--tcp``
    (``replays_pings``): the profile's PS captures' (intervals and answer, us), or none
    (``PingTimes()``) where not asked or no PS capture shows any."""
    return (prof.ps_pings if prof.ps_pings is not None and replays_pings(pings, tcp)
            else PingTimes())


def bbr_window_of(tcp: str, prof: Profile) -> float | None:
    """``--tcp``'s connections: None for Reno; ``hostqueue.BBR_V1`` for BBR whole
    (``bbr-v1``, replay/bbr.py: its window its own); for BBR's first model, its window
    target: the pull window the profile's capture shows when its PSes ran BBR (in
    flight and queued: a lone BBR connection keeps its window; TCP payload), else 0.0
    (``hostqueue.bbr_window``: three GSO packets and its BDP)."""
    if tcp == "bbr-v1":
        return BBR_V1
    if tcp != "bbr":
        return None
    return measured_window_bytes(prof)[0] if prof.ps_congestion_control == "bbr" else 0.0


# where --link auto takes the PS's own queue (``auto_link``), as its refusals say it
AUTO_HOSTQUEUE = ("on a lab FIFO only, where every mechanism asked for is synchronous PS, or "
                  "every one asynchronous PS whose PSes ran CUBIC or Reno")


def auto_link(lab: dict, mechanisms: tuple[str, ...],
              ps_cc: str | None = None) -> tuple[str, float | None, bool]:
    """``--link auto``: (link, queue bytes, ``--uplink-queue``). ``hostqueue`` where the
    profile's lab queued each PS's traffic in a drop-tail byte FIFO on the PS (its ``qdisc``
    ``fifo``, a ``bfifo`` of ``queue_bytes``, no netem delay, whose queue is another) and
    every mechanism asked for is synchronous PS (docs/predict.md, "The PS's own queue"), or
    every one is asynchronous PS and the profile's PS hosts ran a loss-based congestion
    control (``ps_cc``, ``Profile.ps_congestion_control``: CUBIC or Reno), whose pushes then
    cross the switch's queue too (the rule registered in
    docs/preregistered/issue21-cubic-reno-queues.md); else ``fair``. The queue: the lab's
    default at each rate where the run took the default, else the bytes it recorded."""
    if lab_fifo(lab) and mechanisms:
        if all(m == SYNC_PS for m in mechanisms):
            return "hostqueue", recorded_queue_bytes(lab), False
        if ps_cc in LOSS_BASED_CCS and all(m == ASYNC_PS for m in mechanisms):
            return "hostqueue", recorded_queue_bytes(lab), True
    return "fair", None, False


def lab_fifo(lab: dict) -> bool:
    """Whether the profile's lab queued each PS link in a drop-tail byte FIFO (its ``qdisc``
    ``fifo``, a ``bfifo`` of ``queue_bytes``, no netem delay, whose queue is another)."""
    return (lab.get("qdisc", "fifo") == "fifo" and lab.get("queue_bytes") is not None
            and not lab.get("delay"))


def recorded_queue_bytes(lab: dict) -> float | None:
    """The queue the profile's lab set (``--queue``; bytes on the wire), None where it took
    its default (``hostqueue.lab_queue_bytes`` gives it at any rate), set no byte FIFO (the
    kernel's own queue: no bytes recorded) or there is no lab."""
    size = lab.get("queue_bytes")
    return None if lab.get("queue") is None or size is None else float(size)


def standing_of(opts: PredictOptions, lab: dict) -> str:
    """``--link-windows same``'s limit on a direction's standing queue
    (``HostQueueSpec.standing``): the queue given (``--host-queue``) or the profile's lab
    FIFO's, else none known (``unbounded``)."""
    return "queue" if opts.host_queue_bytes is not None or lab_fifo(lab) else "unbounded"


def link_settings(opts: PredictOptions, prof: Profile, say: Callable[[str], None]
                  ) -> tuple[float | None, tuple[float, float], tuple[float, float],
                             tuple[float, float], tuple[float, float]]:
    """The sim's WIN (bytes), link bursts and two-way windows (replayed, and as the
    profile's captures show them: bytes), each said with where it comes from."""
    win = opts.win_of(prof.fitted_win_bytes)
    transport = prof.transport  # counted as the PS captures were read for their streams
    if transport is not None:
        say(f"counted retransmissions in the PS captures as they were read: "
            f"{transport.retransmitted:,} of {transport.data_segments:,} data segments "
            f"({100 * transport.retransmitted_share:.1f}%)")
    seen = measured_burst_bytes(prof)
    rows = bucket_rows(opts)
    burst = seen if rows["all"] or rows["one_worker"] else (0.0, 0.0)
    say(f"the PS captures show a token bucket of {seen[0] / 1e3:.0f} KB on the links (sent at "
        f"once after an idle spell); " + _bucket_said(opts, rows))
    seen_windows = measured_window_bytes(prof)
    windows = replayed_windows(opts.link_windows, seen_windows)
    say(f"the captures show windows of {seen_windows[0] / 1e3:.0f} KB (pulls) and "
        f"{seen_windows[1] / 1e3:.0f} KB (pushes) in flight and queued; two-way traffic "
        + _two_way_said(opts, windows, prof.lab)
        + (f" except with --link {opts.link}, whose links are not paired"
           if opts.link in ("fifo", "block") and min(windows) > 0 else ""))
    if any(opts.share_windows):
        say("the shared links' transfers share them by windows drawn from the profile's own "
            "transfers' (--link-shares windows): " + "; ".join(
                f"{name} {_spread_said(x)}" for name, x in zip(("pulls", "pushes"),
                                                               opts.share_windows[:2],
                                                               strict=True))
            + ("; each PS's link its own at the profile's PS count"
               if len(opts.share_windows) > 2 else ""))
    return win, burst, windows, seen, seen_windows


def _spread_said(windows: tuple[float, ...]) -> str:
    """The 10th, 50th and 90th of ``windows``' byte quantiles, KB (none: equal shares)."""
    if not windows:
        return "alike (no capture)"
    k = len(windows)
    low, mid, high = (windows[min(k - 1, int(q * k))] / 1e3 for q in (0.1, 0.5, 0.9))
    return f"{low:.0f}-{mid:.0f}-{high:.0f} KB (10-50-90% of their bytes)"


def _bucket_said(opts: PredictOptions, rows: dict[str, list[str]]) -> str:
    """Which rows replay the bucket (``grid.bucket_rows``)."""
    replayed, alone = rows["all"], rows["one_worker"]
    if not replayed and not alone:
        return "not replayed (--link-burst off)"
    if len(replayed) == len(opts.mechanisms):
        return "replayed (--link-burst auto)"
    parts = [f"in the rows of {', '.join(replayed)}"] if replayed else []
    if alone:
        parts.append("in the one-worker rows" + (f" of {', '.join(alone)}"
                                                   if len(alone) < len(opts.mechanisms) else "")
                     + ", whose links no other worker shares")
    return "replayed only " + " and ".join(parts) + " (--link-burst auto: in every row)"


def replayed_windows(mode: str, seen: tuple[float, float]) -> tuple[float, float]:
    """The (pull, push) windows the replay pairs each PS link's directions by, bytes, for
    ``--link-windows`` ``mode`` (resolved): ``ratio`` the captures' (``seen``), ``same`` the
    larger of the two both ways (none where a side has no window), ``off`` none."""
    if mode == "ratio":
        return seen
    if mode == "same" and min(seen) > 0:
        return (max(seen),) * 2
    return (0.0, 0.0)


def _two_way_said(opts: PredictOptions, windows: tuple[float, float], lab: dict) -> str:
    """How ``link_settings`` says the two-way traffic is replayed."""
    if min(windows) > 0 and opts.link_windows == "same":
        limit = "unbounded" if opts.standing_queue == "unbounded" else "at most the queue"
        return (f"replayed with every connection counted, each keeping "
                f"{windows[0] / 1e3:.0f} KB (--link-windows same), the standing queue {limit}")
    if min(windows) > 0:
        return "replayed with a lone connection at its window's share (--link-windows ratio)"
    if opts.link_windows == "off":
        return "not replayed (--link-windows off" + (
            "; the profile's lab queued each node's traffic apart, so a worker's ACKs waited "
            "behind its own data only)" if lab_per_node_queues(lab) else ")")
    return "not replayed: a side has no window (a capture missing, or no ACKed data)"


def explain_run(sim: Simulator, config: tuple[int, int, float]) -> dict:
    """``--explain``'s document: the critical paths of the recorded run's steps after warm-up
    (``replay.critical.explain``), with its configuration."""
    from gradwire.replay.critical import explain

    return {"bandwidth_bps": config[2], **explain(sim, warmup(RECORDED_STEPS))}


def _sayer(progress: bool) -> Callable[[str], None]:
    """What the long work is doing, a line on standard error when ``progress``."""
    def say(msg: str) -> None:
        if progress:
            print(f"gradwire predict: {msg}", file=sys.stderr, flush=True)
    return say


def predicted_whatif(opts: PredictOptions, lab: dict[str, Any]) -> dict[str, Any] | None:
    """The lab's job what-ifs (``measured.WHATIF_PLAIN``'s keys) of the job ``opts`` predicts:
    the profile's own run's (``lab``: its configuration; none: a plain job) with the plan's
    what-ifs in their place; None for what-ifs no lab run makes (``--compute-scale``,
    ``--add-layer``)."""
    if opts.compute_scale != 1.0 or opts.add_layer is not None:
        return None
    own = lab_whatif(lab)
    plan = opts.plan
    return {"partition": plan.partition if plan.partition > 1 else own["partition"],
            "accumulate": plan.accumulate if plan.accumulate > 1 else own["accumulate"],
            "mixed_precision": plan.mixed_precision or own["mixed_precision"],
            "recompute": bool(plan.recompute) or own["recompute"],
            "xla": plan.op_fusion or own["xla"],
            "fuse_bytes": int(plan.fuse_bytes) if plan.fuse_bytes else own["fuse_bytes"]}


class TracedOps:
    """The profile's traced steps (their executed ops) and the op cost database's model,
    each read when a what-if first asks for it, and only once."""

    def __init__(self, opts: PredictOptions) -> None:
        self.opts = opts
        self._steps: list | None = None
        self._model: tuple | None = None
        self.notes: list[str] = []  # the database's notes, for the command's notes

    @functools.cached_property
    def machine(self) -> Machine | None:
        """The machine the profile's traced worker ran its ops on (``traced_machine``)."""
        from gradwire.replay.jobwhatifs import traced_machine

        return traced_machine(self.opts.bundles)

    def steps(self, what: str) -> list:
        """Every recorded step's executed ops (``what``: the option asking, for its error)."""
        if self._steps is None:
            from gradwire.replay.jobwhatifs import traced_steps

            self._steps = traced_steps(self.opts.bundles, what)
        return self._steps

    def model(self) -> tuple:
        """(CostModel, machine fingerprint) of ``--opdb``: without ``--opdb-machine``, the
        rows of the machine the profile's trace ran on where the database has them
        (``opcost.build_rows``); ``notes`` gains a note where the rows' intra-op threads are
        not the trace's, or the database keeps no choice of regression."""
        if self._model is None:
            from gradwire.replay.opcost import choices_note, model_for_trace

            db: Path = self.opts.opdb  # type: ignore[assignment]
            model, fp, note = model_for_trace(db, self.opts.opdb_machine, self.machine)
            self._model = (model, fp)
            self.notes += [line for line in (note, choices_note(db, fp, model)) if line]
        return self._model

    def timed_step_us(self, device: str) -> float | None:
        """The traced worker step run whole and timed on the profile's machine (``device``:
        ``XLA_CPU`` compiled by XLA, or ``CPU``; ``jobwhatifs.timed_step_us``), or None."""
        from gradwire.replay.jobwhatifs import timed_step_us

        fp = self.opts.opdb_machine or (self.machine.fingerprint if self.machine else None)
        return timed_step_us(self.opts.bundles, self.opts.opdb, fp, device)


def with_faster_compute(prof: Profile, opts: PredictOptions, traced: TracedOps,
                        say: Callable[[str], None]) -> Profile:
    """``prof`` with its compute ``opts.compute_scale`` times as fast (``--compute-scale``):
    every compute op, or with ``--compute-ops`` only those of the traced op types named
    (``oppasses.faster_types``, through each coarsened op's members), the baselines' worker
    phase by the same factor; transfers, the PS's work and the client's gap kept."""
    x = opts.compute_scale
    if not opts.compute_ops:
        return _compute_rescaled(prof, [scale_compute(t, x) for t in prof.templates], 1.0 / x)
    from gradwire.replay.jobwhatifs import over_steps
    from gradwire.replay.oppasses import faster_types, time_by_type
    from gradwire.replay.rebatch import rebatch_template

    names = ",".join(opts.compute_ops)
    steps = traced.steps("--compute-ops")
    r = over_steps(steps, lambda ops: faster_types(ops, opts.compute_ops, x))
    # each type named must match a traced compute op: one mistyped in a list is refused too
    ran = list(time_by_type(o for ops in steps for o in ops))
    missing = [t for t in (n.strip() for n in opts.compute_ops)
               if not any(t in op for op in ran)]
    if not r.ratios or missing:
        raise PredictError(f"--compute-ops {names}: no traced compute op has the type "
                           f"{', '.join(missing) or names} (the trace's, most time first: "
                           f"{', '.join(ran[:8])})", usage=True)
    say(f"--compute-scale {x:g} --compute-ops {names}: {100 * r.changed_share:.0f}% of the "
        f"traced compute {x:g}x as fast, the step's compute x{r.compute_factor:.3f}")
    return _compute_rescaled(prof, [rebatch_template(t, r.ratios) for t in prof.templates],
                             r.compute_factor)


def _compute_rescaled(prof: Profile, templates: list[StepTemplate], factor: float,
                      **changes: Any) -> Profile:
    """``prof`` with ``templates`` (its compute rescaled) and the baselines' worker phase times
    ``factor`` (the step's compute after over before), and any other field ``changes``."""
    phases = ({**prof.phases, "worker": prof.phases["worker"] * factor} if prof.phases
              else prof.phases)
    return dataclasses.replace(prof, templates=templates, phases=phases, **changes)


def with_batch_size(prof: Profile, opts: PredictOptions, traced: TracedOps,
                    say: Callable[[str], None]) -> tuple[Profile, Rebatch]:
    """``prof`` at ``opts.to_batch_size`` examples per worker step (replay/rebatch.py): its
    templates' compute and the baselines' worker phase rescaled op by op from the op cost
    database, the transfers of tensors of the batch (a sparse embedding's rows) and the
    baselines' network phases with them; the model's transfers, the PS's work and the
    client's gap kept."""
    from gradwire.replay.jobwhatifs import traced_worker
    from gradwire.replay.rebatch import (
        batch_edges,
        network_phases,
        profile_ratios,
        rebatch_template,
        rebatch_transfers,
    )

    model, fp = traced.model()
    say(f"reading the traced ops' shapes for --to-batch-size {opts.to_batch_size}")
    rb = profile_ratios(traced.steps("--to-batch-size"), prof.batch_size,
                        opts.to_batch_size, model)  # type: ignore[arg-type]
    if not rb.ratios or rb.unchanged_share >= 1.0:
        raise PredictError(f"--to-batch-size: no traced op has a dimension of the profile's "
                           f"batch ({prof.batch_size}): is --batch-size right?", usage=True)
    say(f"batch {prof.batch_size} -> {opts.to_batch_size}: compute x{rb.compute_factor:.3f} "
        f"({100 * rb.costed_share:.0f}% of the traced compute costed by {opts.opdb}, machine "
        f"{fp}; {100 * rb.by_bytes_share:.0f}% scaled by bytes; "
        f"{100 * rb.unchanged_share:.0f}% without a batch dimension)")
    if rb.by_bytes_share > rb.costed_share:
        traced.notes.append(
            f"note: --to-batch-size: {opts.opdb} costed {100 * rb.costed_share:.0f}% of the "
            f"traced compute at batch {opts.to_batch_size}; {100 * rb.by_bytes_share:.0f}% "
            "(ops it has no rows of) was scaled by its bytes, a guess: `gradwire opdb build "
            "--ops-of PROFILE` times the op types this profile ran")
    templates = [rebatch_template(t, rb.ratios) for t in prof.templates]
    edges = batch_edges(traced_worker(opts.bundles), prof.batch_size)  # type: ignore[arg-type]
    if edges:
        ratio = opts.to_batch_size / prof.batch_size  # type: ignore[operator]
        moved = [rebatch_transfers(t, edges, ratio, prof.beta_us, prof.push_beta_us)
                 for t in templates]
        phases = network_phases(prof.phases, templates, [t for t, _ in moved])
        templates = [t for t, _ in moved]
        say(f"batch {prof.batch_size} -> {opts.to_batch_size}: {max(n for _, n in moved)} "
            f"transfers of tensors of the batch each step ({', '.join(sorted(edges)[:4])}"
            f"{', ...' if len(edges) > 4 else ''}) x{ratio:g} their bytes")
        prof = dataclasses.replace(prof, phases=phases)
        rb = dataclasses.replace(rb, batch_edges=tuple(sorted(edges)))
    return _compute_rescaled(prof, templates, rb.compute_factor,
                             batch_size=opts.to_batch_size), rb


def with_plan(prof: Profile, opts: PredictOptions, traced: TracedOps,
              say: Callable[[str], None]) -> Profile:
    """``prof`` after the job what-ifs of ``opts.plan`` (replay/jobwhatifs.py)."""
    from gradwire.replay.jobwhatifs import (
        apply_plan,
        op_ratios,
        passes_besides,
        timed_step_device,
    )
    from gradwire.replay.oppasses import has_xla_rows

    # the job's step run whole and timed on the machine, where the database has it (`opdb
    # step`): under op fusion alone the cluster's time, under accumulation a micro-step's
    device = timed_step_device(opts.plan)
    step_us = traced.timed_step_us(device) if device else None
    plan = passes_besides(opts.plan, step_us)
    # accumulation's adds run at the traced element-wise ops' memory rate, its micro-steps
    # take the step timed whole, else are costed from the traced ops (with the database's op
    # times where given and less)
    # tensor fusion's bucket copies at that rate too
    steps = (traced.steps(plan.describe())
             if plan.accumulate > 1 or plan.fuse_bytes is not None else None)
    model = (traced.model()[0] if plan.needs_opdb
             or (plan.accumulate > 1 and opts.opdb is not None and step_us is None) else None)
    ratios: dict[str, float] = {}
    if plan.needs_ops:
        ratios = op_ratios(plan, traced.steps(plan.describe()), model, say)
    if plan.op_fusion and model is not None and not has_xla_rows(model):
        traced.notes.append(f"note: --op-fusion: {opts.opdb} has no rows timed as XLA compiles "
                            "ops, so XLA's code for the ops it does not fuse is taken as fast as "
                            "TensorFlow's kernels (`gradwire opdb build --xla` times them; "
                            "docs/opdb.md)")
    return apply_plan(prof, opts.plan, ratios, say, steps, model, step_us)


def with_ring_hop(prof: Profile, opts: PredictOptions, traced: TracedOps,
                  say: Callable[[str], None]) -> Profile:
    """``prof`` whose templates know the software time of a hop of the collective ring
    all-reduce on the machine of ``--opdb`` (``opcost.ring_hop_line``, from that op's rows
    alone; replay/mechanisms.py ``_relay``); with ``--ring-hop link``, its lines timed across
    links too (``opcost.ring_hop_links``; each replay takes its rate's, ``hop_line_at``), a
    PredictError where the database has none. Unchanged when the database has no such
    timings (a note says so: ``notes.ring_hop_note``)."""
    from gradwire.collector.opgrid import RING_HOP
    from gradwire.replay.opcost import build_rows, ring_hop_line, ring_hop_links

    recorded = traced.machine
    rows, fp = build_rows(opts.opdb, opts.opdb_machine, RING_HOP,  # type: ignore[arg-type]
                          None if recorded is None else recorded.fingerprint)
    line = ring_hop_line(rows)
    links = ring_hop_links(rows) if opts.ring_hop == "link" else ()
    if opts.ring_hop == "link" and not links:
        raise PredictError(f"--ring-hop link: {opts.opdb} has no ring hop timed across a "
                           f"link for machine {fp} (scripts/diag_ring_hop_link.py --db)")
    if links:
        line = line or links[-1][1:]  # no loopback timing: the fastest link's above it
        for rate, fixed, per_byte in links:
            say(f"a hop of the ring all-reduce across a {rate * 8:.0f} Mbit/s link: "
                f"{fixed / 1e3:.2f} ms + {per_byte * 1e3:.2f} ms per MB beyond its wire time "
                f"({opts.opdb}, machine {fp})")
    if line is None:
        return prof
    say(f"a hop of the ring all-reduce{' on loopback' if links else ''}: {line[0] / 1e3:.2f} "
        f"ms + {line[1] * 1e3:.2f} ms per MB of its chunk before it goes on ({opts.opdb}, "
        f"machine {fp})")
    return dataclasses.replace(prof, templates=[
        dataclasses.replace(t, relay_us=line, relay_links=links) for t in prof.templates])


def with_layer_copies(prof: Profile, scope: str, copies: int) -> tuple[Profile, str]:
    """``prof`` with ``copies`` more copies of layer ``scope`` in its templates and in the
    1-worker phases of the baselines, and a note of what the name matched (a substring: one
    name can match several layers); PredictError when no op of the profile is of it."""
    def tensors(ops_of: Callable[[StepTemplate], Iterable[int]]) -> list[str]:
        """The tensors the pulls and pushes among ``ops_of`` each template move, by name."""
        return sorted({t.name[i].split(" ", 1)[1] for t in prof.templates for i in ops_of(t)
                       if t.name[i].startswith(("pull ", "push "))})

    if not any(layer_ops(t, scope) for t in prof.templates):
        names = tensors(lambda t: range(len(t.name)))
        raise PredictError(f"--add-layer {scope}:{copies}: no op or tensor of the profile is "
                           f"named {scope!r}; its tensors include "
                           f"{', '.join(names[:6]) or 'none'}", usage=True)
    factors = layer_phase_factors(prof.templates, scope, copies)
    # the share of each kind the layer holds: its total grew by copies x that share
    held = {k: (f - 1.0) / copies for k, f in factors.items()}
    moved = tensors(lambda t: layer_ops(t, scope))
    note = (f"note: --add-layer {scope}:{copies}: every op and tensor whose name contains "
            f"{scope!r} ({100 * held.get('worker', 0.0):.0f}% of the step's compute, "
            f"{100 * held.get('downlink', 0.0):.0f}% of its pulled bytes; "
            f"{len(moved)} tensor(s): {', '.join(moved[:4])}"
            f"{', ...' if len(moved) > 4 else ''}) is {1 + copies} times as long and as big")
    return dataclasses.replace(
        prof, templates=[add_layer_copies(t, scope, copies) for t in prof.templates],
        phases={k: v * factors.get(k, 1.0) for k, v in prof.phases.items()}
        if prof.phases else prof.phases), note
