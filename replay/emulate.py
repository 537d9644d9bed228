"""``--model emulate``: the profile's transfers run over real TCP through shaped links.

The replay's fluid link shares a direction equally among its flows and gives a lone flow its
rule's rate at once; real TCP does neither (docs/notes/issue21-link-states.md: a flow keeps
the rate it had while sharing, bunches on a large queue, stalls on a small lossy one). The
emulator leaves that to the kernel. It builds the lab's network namespaces
(``replay/netns.py``: one per PS and per worker, each PS's link shaped both ways with ``tc``
at the rate predicted, with the profile's queue and congestion control) and runs an
asynchronous PS job with no TensorFlow in it. Each worker keeps two TCP connections to each
PS, as a TensorFlow worker keeps two gRPC ones; a step is (``--emulate-step phases``;
``tensors``, the default, runs the profile's step graph instead: replay/emulate_tensors.py):

1. a pull from every PS at once: a one-byte request on the first connection, answered with
   the bytes that PS sends the worker in the profile's step (``grid.ps_loads``: as profiled,
   or placed as the sim places the variables on another PS count);
2. ``before_push_s`` of idle (the worker's compute);
3. a push to every PS at once of the bytes that PS receives in the profile's step, each PS
   answering with one byte ``after_push_s`` after the last byte arrived (its apply; the
   pushes' waits overlap);
4. the next step.

Where each number comes from, none from a benchmark:
- bytes: the profile's traced transfers (the first template);
- the idle time a step: the profile's own 1-worker step (``selfcheck.own_steps_us``: the
  median of the steps its captures timed, untraced) less the emulated step with no idle at
  the profile's own rate and PS count (the calibration: run and read as a row is);
  everything TensorFlow spends outside the wire (compute, gRPC, the apply) is in it;
- its split: as the profile's captures split it (``Profile.phases``: the mean time from the
  worker's last pull to its first push, ``worker``, against the time from its last push to
  the next pull, ``server``);
- the link: the lab's recorded queue, delay, burst and congestion control when the profile
  came from the lab (its ``lab_result.json``; its congestion control asked for, else the
  host default it recorded), else the lab's defaults (10 ms of the rate, at least 256 KiB)
  and the congestion control the PS bundles' manifests record (the emulating host's where
  nothing does).

A configuration is run ``RUNS`` times, ``STEPS`` steps per worker, then ``RUNS`` more at a
time while the about-95% interval of the runs' median (order statistics, as the self-check's)
reaches further than ``CI_TARGET`` (the sim's sweeps' 2%) either side of it, up to
``max_runs`` (``--emulate-runs``, default ``MAX_RUNS``); its row is the median examples/s,
with that interval (docs/preregistered/issue21-emulate-report.md has it beside the lab). It
takes real time (``RUNS`` to ``max_runs`` x ``STEPS`` steps per configuration) and root
(``ip netns``, ``tc``). Only the asynchronous PS and the profile's own job (no what-if that
changes it) are emulated. Issue 21 registered the method on three jobs by hand
(docs/preregistered/issue21-bare-gaps*.md) before it was a model.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gradwire.errors import PredictError
from gradwire.replay.grid import profile_bandwidth_bps, ps_loads
from gradwire.replay.mechanisms import ASYNC_PS
from gradwire.replay.options import EMULATE_RUNS, EMULATE_STARTS, EMULATE_STEPS
from gradwire.replay.predict import CI_TARGET, Prediction
from gradwire.replay.selfcheck import median_interval, own_steps_us
from gradwire.replay.template import Profile
from gradwire.units import format_rate

if TYPE_CHECKING:
    from gradwire.replay.options import PredictOptions

EMULATE = "emulate"
# how the emulator runs a step (``--emulate-step``): the profile's step graph op by op, each
# transfer a message (replay/emulate_tensors.py, the default), or one pull and one push per
# PS with the step's idle time in two pieces (this module's own job)
TENSORS, PHASES = EMULATE_STEPS
# how its workers start (``--emulate-start``): each after a uniformly random wait within one
# emulated 1-worker step (an independent phase; the default), or as spawned, a few ms apart
# (in step)
RANDOM, TOGETHER = EMULATE_STARTS
STEPS = 40  # steps per worker in one emulated run
SKIP = 3  # each worker's first steps left out (its connections' slow start)
# emulated runs per configuration to begin with, and per batch after (the row is their
# median); and the cap on them (--emulate-runs): where the runs disagree (workers that settle
# into turns from some start phases and into step from others), more are run until the
# median is known to CI_TARGET, the cap bounding the real time at 3x RUNS'
RUNS, MAX_RUNS = EMULATE_RUNS
PORT = 5400
RUN_TIMEOUT_S = 600.0

_PS = r"""
import socket, sys, threading, time
addr, port, pull, push, apply_s = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                   int(sys.argv[4]), float(sys.argv[5]))
serial = sys.argv[6] == "serial"
applying = threading.Lock()  # serial: one apply at a time, as a PS with one compute thread
blob = b"\0" * pull
def serve(c):
    kind = c.recv(1)
    while True:
        if kind == b"L":  # a pull connection: a byte asks for the parameters
            if not c.recv(1):
                return
            c.sendall(blob)
        elif not push:  # a PS that receives nothing: the worker sends it no push
            return
        else:  # a push connection: read a step's gradients, apply, acknowledge
            got = 0
            while got < push:
                d = c.recv(min(1 << 20, push - got))
                if not d:
                    return
                got += len(d)
            if serial:
                with applying:
                    time.sleep(apply_s)
            else:
                time.sleep(apply_s)
            c.sendall(b"k")
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((addr, port)); srv.listen(256); print("ready", flush=True)
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

_WORKER = r"""
import json, random, socket, sys, threading, time
spec = json.loads(sys.stdin.read())
conns = []
for host, port, pull, push in spec["ps"]:
    a = socket.create_connection((host, port)); a.sendall(b"L")
    b = socket.create_connection((host, port)); b.sendall(b"U")
    conns.append((a, b, pull, push))
time.sleep(random.random() * spec["start_spread_s"])
blobs = {n: b"\0" * n for _, _, _, n in conns}
failed = []
def pull_one(a, n):
    a.sendall(b"P")
    got = 0
    while got < n:
        d = a.recv(1 << 20)
        if not d:
            failed.append("a PS closed its pull connection"); return
        got += len(d)
def push_one(b, n):
    b.sendall(blobs[n])
    if b.recv(1) != b"k":
        failed.append("a PS closed its push connection")
def each(fn, jobs):
    if len(jobs) == 1:
        fn(*jobs[0])
    else:
        ts = [threading.Thread(target=fn, args=j) for j in jobs]
        for t in ts: t.start()
        for t in ts: t.join()
    if failed:
        raise SystemExit(failed[0])
pulls = [(a, n) for a, _, n, _ in conns if n]
pushes = [(b, n) for _, b, _, n in conns if n]
ends = [time.monotonic()]
for _ in range(spec["steps"]):
    each(pull_one, pulls)
    time.sleep(spec["before_push_s"])
    each(push_one, pushes)
    ends.append(time.monotonic())
print(json.dumps(ends))
"""


@dataclass(frozen=True)
class EmulatedStep:
    """One worker step as the emulator runs it: the bytes each PS sends the worker
    (``pull_bytes``) and receives from it (``push_bytes``), per PS, and the idle time
    before the pushes (s, the worker's) and after them (s, each PS's, before it answers)."""

    pull_bytes: tuple[int, ...]
    push_bytes: tuple[int, ...]
    before_push_s: float = 0.0
    after_push_s: float = 0.0


@dataclass(frozen=True)
class EmulatedLink:
    """How each PS's link is shaped (``netns.Topology``'s arguments): ``bandwidth`` a tc rate,
    ``queue``/``delay``/``tcp_cc``/``burst``/``qdisc`` as the lab takes them (None: its
    default)."""

    bandwidth: str
    queue: str | None = None
    delay: str | None = None
    tcp_cc: str | None = None
    burst: str = "gso"
    qdisc: str = "fifo"


def link_for(prof: Profile, bandwidth_bps: float) -> EmulatedLink:
    """The link at ``bandwidth_bps`` (bits/s), shaped as the profile's lab run shaped its PS
    links where it came from the lab, else as the lab does by default; its congestion control
    the one the profile's PS hosts ran (``Profile.ps_congestion_control``: the lab's, asked
    for or the host default it recorded, else the PS manifests' record), the emulating host's
    default where nothing says."""
    cfg = prof.lab or {}  # the lab's config (replay/profile.py load_profile)
    return EmulatedLink(bandwidth=f"{bandwidth_bps:.0f}bit", queue=cfg.get("queue"),
                        delay=cfg.get("delay"),
                        tcp_cc=cfg.get("tcp_cc") or prof.ps_congestion_control,
                        burst=cfg.get("burst") or "gso", qdisc=cfg.get("qdisc") or "fifo")


def step_bytes(prof: Profile, ps: int, placement: str) -> EmulatedStep:
    """The step's bytes on ``ps`` PSes (``grid.ps_loads``), no idle time yet."""
    pulled, pushed = ps_loads(prof, ps, placement)
    return EmulatedStep(tuple(round(b) for b in pulled), tuple(round(b) for b in pushed))


def before_push_share(phases: dict[str, float]) -> float:
    """The share of a step's idle time before its pushes: the profile's worker phase over its
    worker and server phases (``Profile.phases``, s); all of it before without them."""
    worker, server = phases.get("worker", 0.0), phases.get("server", 0.0)
    return worker / (worker + server) if worker + server > 0 else 1.0


def with_idle(step: EmulatedStep, idle_s: float, share_before: float) -> EmulatedStep:
    """``step`` with ``idle_s`` seconds of idle time, ``share_before`` of it before the
    pushes and the rest after them."""
    return EmulatedStep(step.pull_bytes, step.push_bytes, idle_s * share_before,
                        idle_s * (1.0 - share_before))


def throughput(ends: Sequence[Sequence[float]], batch: int) -> tuple[float, float]:
    """(examples/s over the span every worker ran after its first SKIP steps, the median
    step in s) from each worker's step end times (s, the first its start)."""
    t0 = max(e[SKIP] for e in ends)
    t1 = min(e[-1] for e in ends)
    if t1 <= t0:
        raise PredictError("the emulated workers' steady spans do not overlap")
    done = sum(sum(1 for t in e if t0 < t <= t1) for e in ends)
    steps = [b - a for e in ends for a, b in zip(e[SKIP:], e[SKIP + 1:], strict=False)]
    return done * batch / (t1 - t0), statistics.median(steps)


def run_job(link: EmulatedLink, servers: int, workers: int,
            ps_program: Callable[[int, str], list[str]], worker_program: str,
            worker_spec: Callable[[list[str]], dict[str, Any]],
            start_spread_s: float = 0.0) -> list[list[float]]:
    """One emulated job in the lab's namespaces: ``servers`` PSes and ``workers`` workers,
    every PS link shaped as ``link``. ``ps_program(k, addr)``: PS k's ``python -c`` source
    and arguments (it prints ``ready`` once listening on ``addr``:PORT); every worker runs
    ``worker_program`` with ``worker_spec`` (given the PSes' addresses) as JSON on its stdin,
    its ``start_spread_s`` added (s: once connected, each worker waits a uniformly random
    time below it before its first step; 0: none), and prints its step end times (monotonic
    s, the first its start) as JSON. Root only."""
    from gradwire.replay.netns import LabError, Topology, json_result

    try:
        with Topology(num_ps=servers, num_workers=workers, bandwidth=link.bandwidth,
                      delay=link.delay, queue=link.queue, tcp_cc=link.tcp_cc,
                      burst=link.burst, qdisc=link.qdisc) as topo:
            for k, ps in enumerate(topo.ps):
                server = topo.spawn(ps, [sys.executable, "-c", *ps_program(k, ps.addr)],
                                    stdout=subprocess.PIPE, text=True)
                assert server.stdout is not None
                if server.stdout.readline().strip() != "ready":
                    raise LabError(f"the emulated {ps.name} did not start")
            spec = json.dumps(worker_spec([ps.addr for ps in topo.ps])
                              | {"start_spread_s": start_spread_s})
            procs = []
            for w in topo.workers:
                p = topo.spawn(w, [sys.executable, "-c", worker_program],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                assert p.stdin is not None
                p.stdin.write(spec)
                p.stdin.close()
                p.stdin = None  # written and closed: communicate() has nothing to send
                procs.append(p)
            return [json_result(p, RUN_TIMEOUT_S, f"emulated worker {i}")
                    for i, p in enumerate(procs)]
    except LabError as exc:
        raise PredictError(f"the emulator's namespaces: {exc}") from None


def run_once(step: EmulatedStep, link: EmulatedLink, workers: int, steps: int = STEPS,
             serial_apply: bool = False, start_spread_s: float = 0.0) -> list[list[float]]:
    """One emulated job of ``workers`` workers and ``len(step.pull_bytes)`` PSes: each
    worker's step end times (monotonic s, the first its start). ``serial_apply``: each PS
    applies one push at a time (``scripts/diag_bare_ps.py``'s study), where ``emulate``'s
    applies overlap, as the capture's gaps measure them; ``start_spread_s``: ``run_job``'s.
    Root only."""
    def ps_program(k: int, addr: str) -> list[str]:
        return [_PS, addr, str(PORT), str(step.pull_bytes[k]), str(step.push_bytes[k]),
                str(step.after_push_s), "serial" if serial_apply else "overlap"]

    def worker_spec(addrs: list[str]) -> dict[str, Any]:
        return {"ps": [[a, PORT, pull, push] for a, pull, push in
                       zip(addrs, step.pull_bytes, step.push_bytes, strict=True)],
                "before_push_s": step.before_push_s, "steps": steps}

    return run_job(link, len(step.pull_bytes), workers, ps_program, _WORKER, worker_spec,
                   start_spread_s)


def can_emulate() -> str | None:
    """Why this machine cannot run the emulator (None: it can): it needs Linux network
    namespaces, root, and iproute2's ``ip`` and ``tc``."""
    if not sys.platform.startswith("linux"):
        return "it needs Linux network namespaces"
    if os.geteuid() != 0:
        return "it needs root (it builds network namespaces and shapes their links with tc)"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"it needs iproute2 ({' and '.join(missing)} not found)"
    return None


def busiest_direction(pulled: Sequence[float], pushed: Sequence[float], steps_per_s: float,
                      bandwidth_bps: float) -> tuple[str, float]:
    """The PS link direction that carries the most bytes a step (``pulled``/``pushed``: per
    PS; ``downlink ps:i``: PS i to the workers; ``uplink ps:i``) and its payload over its
    rate at ``steps_per_s`` steps a second (all workers together): how busy the emulated job
    kept it."""
    loads = [(n, f"downlink ps:{i}") for i, n in enumerate(pulled)]
    loads += [(n, f"uplink ps:{i}") for i, n in enumerate(pushed)]
    nbytes, where = max(loads)
    return where, 8.0 * nbytes * steps_per_s / bandwidth_bps


@dataclass(frozen=True)
class Calibration:
    """The emulated step's time off the wire: the profile's own step (s, ``own_step_s``)
    against the emulated 1-worker step at the profile's rate and PS count (s,
    ``bare_step_s``). ``phases``: with no idle time, the difference the step's idle time,
    ``share_before`` of it before the pushes; ``tensors``: with the template's times, the
    difference added to its gap before the next step where the gap can take it; where it
    cannot (``gap_short``: the traced ops alone run longer than the profile's step), no gap
    and the time ops scaled by ``time_factor`` (<= 1), which brought the emulated step to
    ``scaled_step_s`` (s; None where even without time ops it stays above the profile's:
    then the gaps are only emptied)."""

    own_step_s: float
    bare_step_s: float
    share_before: float
    step: str = PHASES
    start: str = RANDOM
    max_runs: int = MAX_RUNS
    gap_short: bool = False
    time_factor: float = 1.0
    scaled_step_s: float | None = None

    @property
    def idle_s(self) -> float:
        """The idle time a step (s): what the profile's step spent off the emulated wire."""
        return max(0.0, self.own_step_s - self.bare_step_s)

    def said(self) -> str:
        """One line on where the idle time came from."""
        if self.step == TENSORS:
            change = 1e3 * (self.own_step_s - self.bare_step_s)
            head = (f"emulate: the step's graph op by op took {1e3 * self.bare_step_s:.1f} ms "
                    f"a step against the profile's own {1e3 * self.own_step_s:.1f} ms")
            if not self.gap_short:
                return f"{head}: {change:+.2f} ms in its gap before the next step"
            if self.scaled_step_s is not None:
                return (f"{head}, more than its gap before the next step holds: no gap, "
                        f"and its compute, PS work and delays scaled by "
                        f"{self.time_factor:.3f}, which took it to "
                        f"{1e3 * self.scaled_step_s:.1f} ms")
            return (f"{head}, more than its gap before the next step holds, and its time "
                    "ops could not take the rest: no gap, the templates' times kept")
        short = (" (the emulated transfers alone took longer than the profile's step: no "
                 "idle time)" if self.own_step_s < self.bare_step_s else "")
        return (f"emulate: {1e3 * self.idle_s:.2f} ms idle a step (the profile's own step "
                f"{1e3 * self.own_step_s:.1f} ms less the emulated transfers' "
                f"{1e3 * self.bare_step_s:.1f} ms){short}, {100 * self.share_before:.0f}% "
                "before the pushes as its captures split it")

    def summary(self) -> dict[str, float]:
        """The JSON output's ``profile.emulate``."""
        return {"own_step_s": self.own_step_s, "bare_step_s": self.bare_step_s,
                "idle_s": self.idle_s, "share_before_push": self.share_before,
                "step": self.step, "start": self.start, "gap_short": self.gap_short,
                "time_factor": self.time_factor, "scaled_step_s": self.scaled_step_s,
                "steps_per_run": STEPS, "runs": RUNS, "max_runs": self.max_runs}


# a runner: one emulated job of a step (an EmulatedStep, or tensors' list of TensorStep),
# on a link, of W workers, keyword ``start_spread_s`` (``run_job``'s) -> each worker's step
# end times (s)
Runner = Callable[..., list[list[float]]]


def _bare_step(prof: Profile, placement: str, step: str) -> Any:
    """The step at the profile's own PS count before calibration: ``phases`` with no idle
    time, ``tensors`` the templates as they are."""
    if step == TENSORS:
        from gradwire.replay.emulate_tensors import tensor_steps

        return tensor_steps(prof.templates, prof.ps_count, placement)
    return step_bytes(prof, prof.ps_count, placement)


def _calibrated_step(prof: Profile, ps: int, placement: str, cal: Calibration) -> Any:
    """The step on ``ps`` PSes with the calibration's time off the wire."""
    if cal.step == TENSORS:
        from gradwire.replay.emulate_tensors import tensor_steps, with_gap, without_gaps
        from gradwire.replay.tracecost import with_time_factor

        if cal.gap_short:
            timed = with_time_factor(prof, cal.time_factor)
            return without_gaps(tensor_steps(timed.templates, ps, placement))
        return with_gap(tensor_steps(prof.templates, ps, placement),
                        1e6 * (cal.own_step_s - cal.bare_step_s))
    return with_idle(step_bytes(prof, ps, placement), cal.idle_s, cal.share_before)


def _step_loads(step: Any) -> tuple[list[float], list[float]]:
    """The bytes a step pulls from and pushes to each PS (a tensors step: its templates'
    mean)."""
    if isinstance(step, EmulatedStep):
        return list(step.pull_bytes), list(step.push_bytes)
    from gradwire.replay.emulate_tensors import step_loads

    return step_loads(step)


def _default_runner(step: str) -> Runner:
    """The namespaces' runner of a ``step`` mode."""
    if step == TENSORS:
        from gradwire.replay.emulate_tensors import run_tensors

        return run_tensors
    return run_once


def calibrate(prof: Profile, placement: str, runner: Runner | None = None,
              step: str = EMULATE_STEPS[0],
              say: Callable[[str], None] = lambda _msg: None,
              max_runs: int = MAX_RUNS) -> Calibration:
    """The profile's own step against the emulated 1-worker step of ``step``'s bare form
    (``_bare_step``) at the profile's rate and PS count, run as a row is (``_runs``: RUNS
    to ``max_runs`` runs, their median) and in the statistic a row reports (the batch over
    its examples/s, the mean step over the steady span: a median step would leave the
    emulator's own slow steps out of the calibration but in the rows); for ``tensors``
    whose gaps cannot take the difference, the time ops' factor too (``fit_time_factor``:
    a few more runs, one each)."""
    steps_us, _after = own_steps_us(prof)
    if not steps_us:
        raise PredictError("the emulator needs the profile's own steps timed by its captures "
                           "(untraced captured steps), and it has none", path=prof.source or None)
    run = runner or _default_runner(step)
    rate_bps = profile_bandwidth_bps(prof)
    link = link_for(prof, rate_bps)

    def one_worker_step_s(job: Any) -> float:
        return prof.batch_size / throughput(run(job, link, 1, start_spread_s=0.0),
                                            prof.batch_size)[0]

    say(f"emulate: calibrating, the profile's own configuration at W=1 ({format_rate(rate_bps)})")
    bare = _bare_step(prof, placement, step)
    runs = _runs(run, bare, link, 1, 0.0, prof.batch_size, say, "calibration", max_runs)
    own_s = statistics.median(steps_us) / 1e6
    bare_s = prof.batch_size / statistics.median(r for r, _ in runs)
    cal = Calibration(own_s, bare_s, before_push_share(prof.phases), step)
    if step != TENSORS:
        return cal
    from gradwire.replay.emulate_tensors import fit_time_factor, gap_holds

    if gap_holds(bare, 1e6 * (own_s - bare_s)):
        return cal
    say("emulate: the step's graph takes longer than the profile's step even with no gap: "
        "fitting its time ops")
    factor, reached = fit_time_factor(prof, placement, one_worker_step_s, own_s)
    return dataclasses.replace(cal, gap_short=True, time_factor=factor, scaled_step_s=reached)


def known_to_target(rates: Sequence[float]) -> bool:
    """Whether the about-95% interval of the median of ``rates`` lies within CI_TARGET of
    the median on both sides."""
    mid = statistics.median(rates)
    low, high = median_interval(list(rates))
    return mid - low <= CI_TARGET * mid and high - mid <= CI_TARGET * mid


def _runs(run: Runner, job: Any, link: EmulatedLink, workers: int, spread_s: float,
          batch: int, say: Callable[[str], None], where: str,
          max_runs: int = MAX_RUNS) -> list[tuple[float, float]]:
    """Emulated runs of ``workers`` workers (``spread_s``: ``run_job``'s start spread):
    RUNS, then RUNS more at a time until their median is known to CI_TARGET or ``max_runs``
    have run; (examples/s, median step s) each; ``where`` names the configuration in the
    progress."""
    out: list[tuple[float, float]] = []
    while len(out) < max_runs and (len(out) < RUNS or not known_to_target([r for r, _ in out])):
        if len(out) == RUNS:
            say(f"emulate: W={workers} {where}, runs {min(r for r, _ in out):.1f}-"
                f"{max(r for r, _ in out):.1f} examples/s apart: more, up to {max_runs}")
        for _ in range(min(RUNS, max_runs - len(out))):
            say(f"emulate: W={workers} {where}, run {len(out) + 1} of {RUNS}-{max_runs}")
            out.append(throughput(run(job, link, workers, start_spread_s=spread_s), batch))
    return out


def emulated_rows(prof: Profile, workers: Sequence[int], ps_list: Sequence[int],
                  bandwidths: Sequence[float], placement: str,
                  say: Callable[[str], None] = lambda _msg: None, runner: Runner | None = None,
                  step: str = EMULATE_STEPS[0], start: str = RANDOM,
                  max_runs: int = MAX_RUNS) -> tuple[list[Prediction], Calibration]:
    """``emulate``'s row for every configuration (W x PSes x rate): the median of RUNS to
    ``max_runs`` emulated runs of ``step``'s job (``_runs``; ``runner`` None: in the
    namespaces), the about-95% interval of that median as its interval (runs of one job: no
    phase range), its busiest link direction; and the calibration they share. ``start``
    ``random``: the workers of W >= 2 start at independent phases, each after a uniformly
    random wait below the configuration's emulated 1-worker step (the median step of its
    W = 1 runs, run for it where W = 1 is not asked for)."""
    if (why := can_emulate()) is not None and runner is None:
        raise PredictError(f"--model emulate runs the profile's transfers over real TCP: {why}")
    run = runner or _default_runner(step)
    cal = dataclasses.replace(calibrate(prof, placement, run, step, say, max_runs),
                              start=start, max_runs=max_runs)
    say(cal.said())
    rows = []
    for m in ps_list:
        job = _calibrated_step(prof, m, placement, cal)
        pulled, pushed = _step_loads(job)
        for bw in bandwidths:
            link = link_for(prof, bw)
            config = f"M={m} {format_rate(bw)}"
            done: dict[int, list[tuple[float, float]]] = {}
            spread_s = 0.0
            if start == RANDOM and max(workers) > 1:
                done[1] = _runs(run, job, link, 1, 0.0, prof.batch_size, say, config,
                                max_runs)
                spread_s = statistics.median(s for _, s in done[1])
                say(f"emulate: workers start at random within {1e3 * spread_s:.1f} ms, the "
                    f"emulated 1-worker step at {config}")
            for w in workers:
                rates = [r for r, _ in done.get(w) or _runs(
                    run, job, link, w, spread_s if w > 1 else 0.0, prof.batch_size, say, config,
                    max_runs)]
                rate = statistics.median(rates)
                where, busy = busiest_direction(pulled, pushed, rate / prof.batch_size, bw)
                rows.append(Prediction(
                    model=EMULATE, workers=w, ps=m, bandwidth_bps=bw, order="-",
                    flow_control=True, examples_per_s=rate, steps_per_s=rate / prof.batch_size,
                    ci=median_interval(rates), steps=STEPS * len(rates), bottleneck=where,
                    utilisation=busy, events=0, start=start, mechanism=ASYNC_PS))
    return rows, cal


def check_emulable(opts: PredictOptions, prof: Profile, recorded_batch: int,
                   ps_list: Sequence[int]) -> None:
    """Refuse ``--model emulate`` where it would not run the job asked about: another
    mechanism than the asynchronous PS, a what-if that changes the job itself (the idle
    time comes from the profile's own step; ``recorded_batch``: the batch it ran at), or
    more workers or PSes (``ps_list``) than the namespaces hold; before anything runs."""
    from gradwire.replay.netns import MAX_PS, MAX_WORKERS

    if max(opts.workers) > MAX_WORKERS or max(ps_list) > MAX_PS:
        raise PredictError(f"--model emulate runs at most {MAX_WORKERS} workers and {MAX_PS} "
                           f"PSes (one network namespace each); predict more with sim", usage=True)
    if tuple(opts.mechanisms) != (ASYNC_PS,):
        raise PredictError(f"--model emulate runs the asynchronous PS only, not "
                           f"{', '.join(m for m in opts.mechanisms if m != ASYNC_PS)}", usage=True)
    if opts.changes_job(recorded_batch):
        raise PredictError("--model emulate runs the profile's own job: its idle time is the "
                           "profile's step; drop --compute-scale, --add-layer, "
                           "--to-batch-size and the job plan, or predict them with sim", usage=True)
