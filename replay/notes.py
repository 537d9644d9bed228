"""What ``gradwire predict`` tells the user beside its table: one function per note, each
returning its text or None, and ``predict_notes``, all of them in the order they are shown."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from gradwire.collector.transport import TransportStats
from gradwire.procstat import too_much_stolen
from gradwire.replay.grid import (
    busiest_ps_share,
    is_lossy,
    lab_per_node_queues,
    profile_bandwidth_bps,
    replays_bucket,
)
from gradwire.replay.hostqueue import BBR_V1, LOSS_BASED_CCS
from gradwire.replay.measured import JOB_KEYS, same_rate
from gradwire.replay.mechanisms import ASYNC_PS, base_mechanism, peer_mechanisms
from gradwire.replay.options import PredictOptions
from gradwire.replay.predict import CI_TARGET, Prediction
from gradwire.replay.template import Profile
from gradwire.units import format_rate


def start_note(start: str, mechanisms: Iterable[str] = (ASYNC_PS,),
               stats: TransportStats | None = None) -> str | None:
    """How the sim rows of an asynchronous PS started their workers (``start``: the
    ``--start`` given), with the profile's retransmissions where its queue overflowed
    (``stats``); None unless a mechanism is an asynchronous PS (a barrier aligns a synchronous
    round's workers, whatever their start phases)."""
    if all(base_mechanism(m) != ASYNC_PS for m in mechanisms):
        return None
    why = ("through a shared FIFO the lab's workers move apart until they take turns on the "
           "link, a force the replay's equal sharing lacks")
    tail = "; see docs/predict.md, 'Start phases'."
    if is_lossy(stats):
        assert stats is not None
        tail = (f". The profile's PS capture retransmitted {100 * stats.retransmitted_share:.1f}% "
                f"of its TCP data segments: its bottleneck queue overflows" + tail)
    if start in ("auto", "stratified"):
        return (f"note: the sim rows start each worker in its own slot of the step (--start "
                f"{start}): {why}; the phase range shows where one run can land" + tail)
    if start == "aligned":
        return (f"note: --start aligned starts every worker of every replication at once; {why}, "
                "and --start auto (the default) starts each worker in its own slot of the step"
                + tail)
    if start == "random":
        return (f"note: the sim rows start their workers at independent random phases (--start "
                f"random); {why}, and --start auto (the default) starts each worker in its own "
                f"slot of the step" + tail)
    return (f"note: --start {start} starts every worker at once; {why}. The async-ps rows' "
            "interval is one run's, blind to which phases it locked into (another seed's run "
            "can land well outside it; --start auto averages replications)" + tail)


# the fewest workers of the points the replay of shared links ran low at, every one of them
# (docs/notes/issue21-carried-shares.md): a measured fact, reported, never a model's switch
MANY_WORKERS = 6


def many_workers_note(opts: PredictOptions, lab: dict[str, Any],
                      shared_workers: Sequence[int] | None = None) -> str | None:
    """A note when the sim predicts an asynchronous PS at ``MANY_WORKERS`` or more on links
    its workers share equally (``--link fair``, resolved; ``shared_workers``: the W of the
    rows so replayed, None: every row) and the profile's lab did not queue each node apart
    (``lab``): where the replay has been measured low every time."""
    many = [w for w in (opts.workers if shared_workers is None else shared_workers)
            if w >= MANY_WORKERS]
    if (not opts.sim or not many or opts.link != "fair" or lab_per_node_queues(lab)
            or any(opts.share_windows)
            or all(base_mechanism(m) != ASYNC_PS for m in opts.mechanisms)):
        return None
    return (f"note: at W >= {MANY_WORKERS} the asynchronous rows' workers fall into step on "
            "the PS links they share equally, where the lab's, sharing a FIFO, kept apart: "
            "at the 23 points measured at W = 6-8 the sim was 6-18% low at 21 (the replay's "
            "link one way 25-31% of its busy time where the lab's was 1-12%: "
            "docs/notes/issue21-bunching-w6.md). --link-shares windows (their default) "
            "shares by the windows the profile's transfers kept: 3.0% median over 21 new "
            "points where equal shares were 5.4% (docs/predict.md, 'Shares by window'); "
            "--model emulate (root; real TCP) came "
            "within 2.4% at W = 8, --link hostqueue within 5.5% on the 10 MB MLPs but 3-14% "
            "low on recommendation models; docs/predict.md, 'The PS's own queue (--link "
            "hostqueue)'")


def several_ps_shares_note(opts: PredictOptions, ps_list: Sequence[int]) -> str | None:
    """A note when the sim shares an asynchronous PS's links by window
    (``--link-shares windows``, resolved into ``share_windows``) in rows of two or more
    workers over two or more PSes (``ps_list``) whose workers' NICs are unlimited (a finite
    one couples a worker's PS links, shared max-min, without the windows): the first such
    job of many small tensors measured ran faster than it predicted. A measured fact,
    reported, never a model's switch."""
    if (not opts.sim or not any(opts.share_windows) or max(opts.workers) < 2
            or max(ps_list, default=1) < 2
            # a finite worker NIC couples a worker's PS links, shared max-min, no windows
            or opts.worker_bandwidth != "unlimited"
            or all(base_mechanism(m) != ASYNC_PS for m in opts.mechanisms)):
        return None
    return ("note: over 2 or more PSes the links shared by window (--link-shares windows, "
            "the default) have been measured on two jobs: a recommendation model within "
            "10.4% at W = 2-8, and a deep MLP of about 50 small tensors 12-25% low at W = 2-6 "
            "(the replay's workers one convoy across its PS links where the lab's kept apart; "
            "--link-shares equal read 0-18% low there, mva-exact 5-14% off): "
            "docs/preregistered/issue21-fresh-1207-report.md")


def batch_override_note(opts: PredictOptions, lab: dict[str, Any]) -> str | None:
    """A note when ``--batch-size`` names another batch than the one the profile's lab ran
    (its lab_result.json): the rows then count that many examples a step of the profiled
    compute, which is not the job at that batch."""
    ran = lab.get("batch_size")
    if opts.batch_size is None or ran is None or opts.batch_size == ran:
        return None
    scaled = "" if opts.compute_scale == 1.0 else f" times --compute-scale {opts.compute_scale:g}"
    return (f"note: --batch-size {opts.batch_size} is not the batch the profile ran ({ran}, "
            f"its lab_result.json): each row counts {opts.batch_size} examples a step of the "
            f"profiled compute{scaled}; for the job at batch {opts.batch_size}, use "
            f"--to-batch-size {opts.batch_size} --opdb DB (docs/opdb.md, 'The batch-size "
            "what-if')")


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


# how BBR whole scored against Reno's queue on the synchronous sets under the lab's BBR, said by
# both notes that point to it (docs/preregistered/issue22-sync-bbr-second-report.md)
_SYNC_BBR_SCORES = ("over 30 synchronous points of three sets never run under the lab's BBR, "
                    "BBR whole scored 4.7% median and 23.6% max |error| against Reno's queue's "
                    "4.3% and 54.3%, on the 22 of a recommendation model 7.3% and 23.6% "
                    "against 16.2% and 54.3%, but 13-18% low at the 1-PS jobs' W = 2 in every "
                    "set; docs/preregistered/issue22-sync-bbr-second-report.md")


def host_queue_note(opts: PredictOptions, ps_cc: str | None = None) -> str | None:
    """A note when the sim replays each PS's downlink as the PS's own queue (``--link
    hostqueue``, or ``auto`` on a lab FIFO profile: synchronous, or asynchronous whose PSes
    ran CUBIC or Reno): what it models and what not;
    ``ps_cc``: the congestion control the profile's PS hosts ran (``Profile.
    ps_congestion_control``), which decides whether BBR whole is pointed to."""
    ps_rows = [m for m in opts.mechanisms if m not in peer_mechanisms(opts.mechanisms)]
    if opts.link != "hostqueue" or not opts.sim or not ps_rows:
        return None
    synchronous = any(base_mechanism(m) != ASYNC_PS for m in ps_rows)
    size = ("the lab's default size (10 ms of the rate, at least 256 KiB)"
            if opts.host_queue_bytes is None else f"{opts.host_queue_bytes / 1e3:,.0f} KB")
    bucket = (" behind the shaper's token bucket the capture shows"
              if replays_bucket(opts, ps_rows[0]) else "")
    rows = "" if len(ps_rows) == len(opts.mechanisms) else f" (the rows of {', '.join(ps_rows)})"
    queue = ("note: each PS's downlink is replayed as the PS's own drop-tail queue of "
             f"{size}{bucket}{rows}")
    if opts.uplink_queue:
        queue += (", its uplink as the switch's queue toward it, of that size too (the "
                  "workers' pushes packet by packet, --uplink-queue; each direction's ACKs "
                  "behind the other's queue)")
    if opts.bbr_window_bytes is None:
        text = (f"{queue}, each worker a Reno connection through it (--link hostqueue; "
                "--link fair for equal sharing); on the lab's synchronous runs this was the "
                "nearer model, but BBR's held connections are left out (a burst the queue drops "
                "whole waits for the worker's next HTTP/2 PING or a retransmission timer): "
                "under BBR, jobs of small transfers behind a small queue ran up to 45% slower "
                "than it says, and a pair whose second pull was held ran about 10% faster, its "
                "first worker pushing meanwhile")
        if ps_cc in (None, "bbr") and synchronous:
            text += ("; " + ("this profile's PSes ran BBR" if ps_cc else "on a cluster "
                             "running BBR") + f": --tcp bbr-v1 holds them ({_SYNC_BBR_SCORES})")
    elif opts.bbr_window_bytes == BBR_V1:
        text = (f"{queue}, each worker a connection running Linux's BBR whole through it "
                "(--tcp bbr-v1: its pacing, bandwidth filter, gain cycle, PROBE_RTT and "
                "long-term policer estimate; with --uplink-queue, over 34 asynchronous points "
                "never run 3.8% median and 15.6% max error against the lab's BBR, the "
                "default 3.9% and 31.4%: nearer on pairs over several PSes, not on one PS)")
    else:
        text = (f"{queue}, each worker a BBR connection through it (--tcp bbr, a first model: "
                "on the lab's synchronous BBR runs it was further from them than Reno's, the "
                "default)")
    if any(base_mechanism(m) == ASYNC_PS for m in ps_rows):
        alone = ("without --uplink-queue it missed two lab jobs run under Reno by +41% and "
                 "-35% on 2026-11-27, where equal sharing (--link fair) came within 7%")
        if ps_cc in LOSS_BASED_CCS:
            text += (f"; for the asynchronous PS whose PSes ran CUBIC or Reno (this profile's "
                     f"ran {ps_cc}) it is the default on a lab FIFO, with --uplink-queue, since "
                     "2026-12-08: over 9 points of three jobs never run under CUBIC, 3.6% "
                     "median and 10.3% max error, where links shared by window (--link fair) "
                     "scored 7.8% and 22.3% (docs/preregistered/"
                     f"issue21-cubic-reno-queues-report.md); {alone}")
        else:
            text += (f"; for the asynchronous PS {alone}; where its PSes ran BBR or nothing "
                     "records it --link fair is the default")
    if opts.bbr_window_bytes == BBR_V1 and synchronous:
        text += ("; for synchronous training a pull starting beside another's burst is "
                 "held at 12-78% of pull starts, until the worker's next HTTP/2 PING (--pings "
                 "auto: the profile's PS capture times them) or a retransmission timer "
                 f"({_SYNC_BBR_SCORES})")
    return text + " (docs/predict.md, 'The PS's own queue')"


def shaped_ps_only_note(lab: dict[str, Any], opts: PredictOptions,
                        ps_list: list[int]) -> str | None:
    """A note when the profile's lab shaped only the PS links (its workers' NICs ran
    unlimited) and the default ``--worker-bandwidth same`` caps them, with several PSes."""
    if lab.get("shape") != "ps" or opts.worker_bandwidth != "same" or \
            max(ps_list) < 2:
        return None
    return ("note: the profile's lab shaped only the PS links, so its workers' NICs were not "
            "limited; with 2 or more PSes --worker-bandwidth same (the default: a cluster of "
            "identical machines) caps each worker's NIC at the PS links' rate and predicts "
            "less than that lab would run: --worker-bandwidth unlimited predicts the lab")


def recorded_notes(opts: PredictOptions, rows: list[dict[str, Any]]) -> list[str]:
    """A note for each of ``--timeline`` and ``--explain`` that names a configuration that is
    not one of the sweep's."""
    out = []
    for config, what in ((opts.timeline, "timeline"), (opts.explain, "critical path")):
        if not config:
            continue
        w, m, bw = config
        if any(r["model"] == "sim" and r["workers"] == w and r["ps"] in (m, 0)  # 0: no PS
               and same_rate(r["bandwidth_bps"], bw) for r in rows):
            continue
        out.append(f"note: the {what}'s configuration (W={w}, M={m}, {format_rate(bw)}) is "
                   f"not one of the table's sim rows: it was simulated for the {what} alone")
    return out


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


def stolen_note(prof: Profile) -> str | None:
    """A note when a node's virtual machine lost a tenth of its cores or more to its
    hypervisor while the profile was captured: its traced steps ran slower than the machine
    does alone, and so does every row built from them."""
    if prof.capture_stolen is None:
        return None
    stolen, cores = prof.capture_stolen
    if not too_much_stolen(stolen, cores):
        return None
    return (f"note: while the profile was captured a node's machine lost {stolen:.2f} of its "
            f"{cores} cores to its hypervisor (/proc/stat steal: other virtual machines on the "
            "same host): its traced steps ran slower than the machine does alone, and the rows "
            "may be low by as much; record it again when the machine is quieter")


def measured_rate_note(prof: Profile, bandwidths: Sequence[float] | None) -> str | None:
    """A note when the sweep's rate is the one read off the profile's capture (no
    --bandwidth, and no lab record or --profile-bandwidth of the link's rate): on loopback
    it is memory copies, not a network; elsewhere the pulls' goodput, which reads above the
    link where a shaper or switch lets a burst through at line rate."""
    if bandwidths or prof.profile_bandwidth_bps:
        return None
    rate = format_rate(profile_bandwidth_bps(prof))
    if prof.loopback:
        return (f"note: the profile ran on loopback, so its link rate ({rate}) is this host's "
                "memory-copy speed, not a network's: give --bandwidth for the cluster you "
                "mean")
    return (f"note: the profile's link rate, {rate}, is read off its capture (the pulls' "
            "goodput; nothing records the link's configured rate): where a shaper or switch "
            "passes bursts at line rate it reads above the link. Give --profile-bandwidth "
            "with the link's rate if you know it")


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


def placement_note(prof: Profile, ps_list: Sequence[int]) -> str | None:
    """A note when a PS count other than the profile's is predicted from a profile whose
    trace has no variable records (bundles recorded before gradwire kept them), so the
    variables cannot be placed as TensorFlow does."""
    t = prof.templates[0] if prof.templates else None
    if t is None or t.var_bytes or all(m == prof.ps_count for m in ps_list):
        return None
    return ("note: the profile's trace lists no variables (recorded before gradwire kept "
            "them), so at another PS count its transfers go biggest first to the least-loaded "
            "PS, not where TensorFlow would put them (--placement is not applied): run scripts/"
            "add_variables.py on its bundles to add them from the stored RunMetadata")


def placed_ps_counts(prof: Profile, ps_list: Sequence[int]) -> list[int]:
    """The PS counts of ``ps_list`` whose variables ``--placement`` places (not the profile's
    own count; only with variable records)."""
    if not prof.templates or not prof.templates[0].var_bytes:
        return []
    return [m for m in ps_list if m != prof.ps_count]


def uneven_placement_note(prof: Profile, ps_list: Sequence[int], placement: str,
                          recorded: bool) -> str | None:
    """A note on the placement at PS counts other than the profile's: which strategy, when the
    profile's lab did not record it (``recorded``), and the share of the busiest PS when it is
    clearly above an even split (over 1.25 / M: a quarter above), so that PS's link bounds the
    step."""
    counts = [m for m in placed_ps_counts(prof, ps_list) if m > 1]
    if not counts:
        return None
    uneven = [(m, s) for m in counts
              if (s := busiest_ps_share(prof, m, placement)[0]) > 1.25 / m]
    said = [] if recorded else [
        f"the variables are placed on {', '.join(map(str, counts))} PSes as TensorFlow's "
        f"{placement} strategy would (the profile does not say which its job used; "
        "replica_device_setter's default is round-robin: give --placement)"]
    if uneven:
        shares = ", ".join(f"{100 * s:.0f}% of the pulled bytes with {m} PSes (even: "
                           f"{100 / m:.0f}%)" for m, s in uneven)
        said.append(f"with the {placement} placement the busiest PS gets {shares}, and its "
                    "link bounds the step"
                    + ("; --placement balanced predicts the most even split of whole variables"
                       if placement != "balanced" else ""))
    return ("note: " + "; ".join(said) + " (docs/predict.md, 'Placing the variables')"
            if said else None)


def wide_ci_note(preds: list[Prediction], opts: PredictOptions) -> str | None:
    """A note when sim rows stopped at --max-replications (--max-steps) with a 95% interval
    wider than the CI target."""
    sims = [p for p in preds if p.model == "sim"]
    wide = [p for p in sims if p.ci[1] - p.examples_per_s > CI_TARGET * p.examples_per_s * 1.001]
    if not wide:
        return None
    limit = (f"--max-steps {opts.max_steps}" if opts.start == "together"
             else f"--max-replications {opts.max_replications}")
    return (f"note: {len(wide)} of the {len(sims)} sim configurations stopped at {limit} with a "
            f"95% interval wider than +-{100 * CI_TARGET:g}% of the mean (their ci columns); "
            "raise it for tighter ones")


def mechanism_note(prof: Profile, opts: PredictOptions) -> str | None:
    """A note when the sim replays the profile under a mechanism other than the one it was
    recorded with (a what-if the user asked for)."""
    other = [m for m in opts.mechanisms if m != prof.mechanism]
    if not (opts.sim and other):
        return None
    return (f"note: the profile was recorded with {prof.mechanism} training; the sim's rows of "
            f"{', '.join(other)} replay its compute and tensors under that mechanism instead (a "
            "what-if: docs/predict.md, 'Synchronous training')")


def ring_hop_note(prof: Profile, opts: PredictOptions) -> str | None:
    """A note when the sim replays a peer mechanism without the software time of its hops
    (no ``--opdb``, or one without ring hop timings)."""
    peer = peer_mechanisms(opts.mechanisms)
    if not (opts.sim and peer) or any(t.relay_us != (0.0, 0.0) for t in prof.templates):
        return None
    how = (f"{opts.opdb} has no timings of it: `gradwire opdb build --db {opts.opdb} --ops "
           "CollectiveRingHop` adds them" if opts.opdb is not None else
           "give --opdb FILE from `gradwire opdb build` to include it")
    return (f"note: the rows of {', '.join(peer)} leave out TensorFlow's software time per hop "
            "(copying, parsing and reducing each chunk before it goes on, several ms per MB "
            f"on the lab's machine); {how} (docs/predict.md, 'Synchronous training')")


def lone_peer_note(opts: PredictOptions) -> str | None:
    """A note when a peer mechanism (no PS) is predicted at W = 1: a ring of one moves no
    bytes, so that row is the compute alone and the speedups of its rows are over it."""
    peer = peer_mechanisms(opts.mechanisms)
    if not (opts.sim and peer and 1 in opts.workers):
        return None
    return (f"note: one worker of {', '.join(peer)} exchanges nothing: its W = 1 row is the "
            "compute alone, so the speedups of its rows are over a job with no communication "
            "(below 1x where the exchange costs more than the added workers gain)")


def host_cores_note(opts: PredictOptions) -> str | None:
    """What ``--host-cores`` replays: the host's cores and a compute chunk's (None: off)."""
    if opts.host is None:
        return None
    updates = " and every PS's updates" if opts.ps_cores is None else ""
    return (f"note: every worker's compute{updates} share one host of "
            f"{opts.host.cores:g} cores, each running chunk using {opts.host.chunk_cores:.2f} "
            f"(the trace's op concurrency, at least 1): beyond "
            f"{opts.host.chunks_at_full_speed:.2f} chunks at once each slows (--host-cores; "
            f"docs/predict.md, 'One host')")


def predict_notes(opts: PredictOptions, prof: Profile, preds: list[Prediction],
                  rows: list[dict[str, Any]], measured: list[dict[str, Any]],
                  unmatched: str | None, ps_list: list[int],
                  placement_known: bool = True,
                  shared_workers: Sequence[int] | None = None) -> list[str]:
    """Every note of a finished sweep, in the order shown: a mechanism other than the
    profile's, a peer mechanism's missing hop time and its ring of one, how the workers
    started (where an asynchronous PS's start phases matter; a barrier aligns a synchronous
    round's), many asynchronous workers on equally shared links (``shared_workers``: the
    W of the sim rows so replayed; None: every row), links shared by window over several
    PSes, wide intervals, the PS
    cores, the shared host's, a loopback profile, measured points off the table
    (``unmatched``), another job measured, the PS's own queue, a lab
    that shaped only the PS links, a profile without variables asked for another PS count,
    the placement at other PS counts (``placement_known``: given or recorded), the timeline
    or the critical path off the table, the trace's slowdown, the hypervisor's steal."""
    notes = (mechanism_note(prof, opts), ring_hop_note(prof, opts), lone_peer_note(opts),
             start_note(opts.start, opts.mechanisms, prof.transport) if opts.sim else None,
             many_workers_note(opts, prof.lab, shared_workers),
             several_ps_shares_note(opts, ps_list),
             wide_ci_note(preds, opts),
             ps_cores_note(preds, opts.ps_cores, prof.ps_host_cores), host_cores_note(opts),
             measured_rate_note(prof, opts.bandwidths_bps),
             unmatched, other_job_note(prof.lab, measured),
             host_queue_note(opts, prof.ps_congestion_control),
             shaped_ps_only_note(prof.lab, opts, ps_list) if opts.sim else None,
             placement_note(prof, ps_list) if opts.sim else None,
             uneven_placement_note(prof, ps_list, opts.placement, placement_known),
             *recorded_notes(opts, rows), trace_slowdown_note(prof), stolen_note(prof))
    return [n for n in notes if n]
