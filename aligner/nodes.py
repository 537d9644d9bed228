"""Load node bundles for alignment: traces, capture streams and clock domains.

A *clock domain* is a set of timestamps read from one clock. gradwire gives one domain to each
host, identified by its hostname and its non-loopback addresses: every process of a host (TF and
the capture tool alike, both reading CLOCK_REALTIME) shares it. Nodes in separate network
namespaces are separate hosts as far as the cluster can tell, so each lab node is its own domain.
A worker's RunMetadata also holds the step stats of the parameter servers it talked to, stamped
by *their* clocks; those ops belong to the domain of the task that ran them, found through the
cluster spec, or to a domain of their own (``task:ps:0``) when no bundle of that task was given.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gradwire.bundle import (
    CAPTURE_NAMES,
    Bundle,
    find_bundles,
    one_bundle_per_task,
    open_bundle,
    usable_cpus,
)
from gradwire.collector.h2capture import capture_streams
from gradwire.collector.h2pings import PingLog, PingTimes
from gradwire.collector.summary import EndpointNames, task_of
from gradwire.collector.transport import TransportCounter, TransportStats
from gradwire.errors import BundleError
from gradwire.procpool import map_in_processes
from gradwire.records import Frame, StepTrace, Stream

log = logging.getLogger(__name__)
_LOOPBACK = ("127.0.0.1", "::1")


@dataclass
class NodeData:
    """One bundle as the aligner sees it. Times stay on the node's own clock.

    Attributes:
        name: the bundle folder's name (``worker0``).
        path: the bundle folder.
        domain: this node's clock domain (``hostname/addr,addr``).
        addresses: the node's non-loopback addresses.
        steps: recorded steps (may be empty: a PS usually only captures).
        streams: HTTP/2 streams of its capture (empty without one).
        settings: its capture's frames that carry HTTP/2 SETTINGS (advertised windows).
        cluster: the cluster spec its TraceHook saw (``{}`` if none).
        transport: its capture's TCP retransmissions and egress queueing delays, observed in
            the pass that gave its streams (None without a capture).
        pings: the HTTP/2 PINGs its capture shows clients sending it on the connections it
            serves, from the same pass (``collector/h2pings.py``; None without a capture).
    """

    name: str
    path: Path
    domain: str
    addresses: tuple[str, ...]
    steps: list[StepTrace] = field(default_factory=list)
    streams: list[Stream] = field(default_factory=list)
    settings: list[Frame] = field(default_factory=list)
    cluster: dict[str, list[str]] = field(default_factory=dict)
    capture_problem: str | None = None  # why its capture was set aside (see drop_uncovered)
    task: str = ""  # the cluster task the manifest names (``worker:0``), if any
    spec: dict = field(default_factory=dict)  # the cluster spec the manifest recorded
    span_s: tuple[float, float] | None = None  # collection start and end (realtime, s)
    session: dict = field(default_factory=dict)  # its validated trace/session.json ({} if none)
    transport: TransportStats | None = None
    pings: PingTimes | None = None  # the PINGs its clients sent it (None without a capture)


def domain_of(bundle: Bundle) -> tuple[str, tuple[str, ...]]:
    """Clock domain and non-loopback addresses of a bundle's host, from its manifest (whose
    ``host`` open_bundle has validated: an object, ``addresses`` a list of strings)."""
    host = bundle.manifest["host"]
    addrs = tuple(sorted(a for a in host.get("addresses") or [] if a not in _LOOPBACK
                         and not a.startswith("fe80")))
    return f"{host.get('hostname', '?')}/{','.join(addrs)}", addrs


def load_node(path: str | Path | Bundle) -> NodeData:
    """Open one bundle (or take one already opened) and read its steps, and its capture's
    streams and transport statistics in one pass (the capture is the slow part).

    Every field read here was validated by open_bundle and read_step (gradwire/schema.py).
    """
    bundle = path if isinstance(path, Bundle) else open_bundle(path)
    domain, addrs = domain_of(bundle)
    node = NodeData(name=bundle.path.name, path=bundle.path, domain=domain, addresses=addrs)
    node.steps = bundle.load_steps()
    node.task = bundle.task
    node.session = bundle.session or {}
    node.cluster = dict(node.session.get("cluster_spec") or {})
    node.spec = dict(bundle.manifest.get("cluster_spec") or node.cluster)
    clock = bundle.manifest["clock_samples"]
    end = clock.get("end")  # a collection killed before its end sample is open-ended
    node.span_s = (clock["start"]["realtime_ns"] / 1e9,
                   end["realtime_ns"] / 1e9 if end else math.inf)
    if bundle.capture_file is not None:
        # the queueing delays are those of the segments the host sent: all its addresses
        counter = TransportCounter(bundle.manifest["host"].get("addresses") or (),
                                   bundle.ports)
        # the endpoints it serves by the cluster spec: a cluster on loopback shares addresses
        served = tuple(ep for ep, task in EndpointNames(node.spec).by_addr.items()
                       if node.task and task == node.task)
        log_pings = PingLog(addrs, served)
        node.streams = capture_streams(bundle.capture_file, bundle.ports or None,
                                       node.settings, counter, pings=log_pings)
        node.transport = counter.stats(bundle.capture_file)
        node.pings = log_pings.times()
        if not node.streams:
            log.warning("%s: no HTTP/2 streams in the capture (cut short, or filtered to other "
                        "ports?); aligning %s from its trace alone", bundle.capture_file,
                        node.name)
    elif bundle.manifest.get("capture"):
        log.warning("%s: the manifest names a capture but it is missing; aligning %s from its "
                    "trace alone", bundle.path, node.name)
    return node


TIMELINE_SUFFIXES = (".json", ".pbtxt", ".txt")


def load_timeline_node(path: str | Path) -> NodeData:
    """A TF timeline file without a bundle (Chrome trace JSON, or a RunMetadata text proto
    ``.pbtxt``/``.txt``) as a node with one step and no capture. Its ops are timed by the
    clocks of their tasks; with no tensor names in a Chrome trace, nothing relates them."""
    from gradwire.aligner.loaders import load_chrome_trace, load_run_metadata_text

    path = Path(path)
    trace = (load_chrome_trace(path) if path.suffix == ".json"
             else load_run_metadata_text(path))
    first = trace.devices[0] if trace.devices else path.stem
    return NodeData(name=path.stem, path=path, domain=f"task:{task_of(first)}", addresses=(),
                    steps=[trace])


def load_nodes(paths: Sequence[str | Path | Bundle],
               progress: Callable[[str], None] | None = None) -> list[NodeData]:
    """Every bundle under ``paths`` (each a node bundle or a folder of them, or a bundle
    already opened, which is not opened again), loaded in order; a path that is a timeline
    file (see ``load_timeline_node``) loads as a node of its own.

    Raises BundleError when two bundles share a name or nothing usable is found.
    """
    for p in paths:
        if not isinstance(p, Bundle) and Path(p).is_file() and \
                Path(p).suffix not in TIMELINE_SUFFIXES:
            raise BundleError("not a bundle folder, nor a TF timeline (.json, or .pbtxt/.txt "
                              "RunMetadata); a capture belongs in a bundle (gradwire collect)",
                              path=p)
    sources: list[Path | Bundle] = [b for p in paths for b in (
        [p] if isinstance(p, Bundle) else [Path(p)] if Path(p).is_file() else find_bundles(p))]
    sources = _each_once(sources)
    folders = [s.path if isinstance(s, Bundle) else s for s in sources]
    captures = sum(1 for s in sources if _has_capture(s))
    processes = min(captures, usable_cpus())  # a capture is the slow part: one each
    if progress:
        progress(f"reading {', '.join(str(f) for f in folders)}" if len(folders) == 1 else
                 f"reading {len(folders)} bundles ({', '.join(f.name for f in folders)})"
                 + (f", {processes} at once" if processes > 1 else ""))
    nodes = map_in_processes(_load_source, sources, processes)
    names = [n.name for n in nodes]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise BundleError(f"two bundles are both named {dup[0]!r}: give node bundles distinct "
                          "folder names", path=folders[names.index(dup[0])])
    one_bundle_per_task((n.task, n.name, n.path) for n in nodes)
    _same_run(nodes)
    if not any(n.steps for n in nodes) and not any(n.streams for n in nodes):
        raise BundleError("no recorded steps and no capture streams to align", path=folders[0])
    return nodes


def _each_once(sources: list[Path | Bundle]) -> list[Path | Bundle]:
    """``sources`` without a folder or file met again (given twice, or as a folder and as
    a bundle under it): the same node read twice is still one node."""
    seen: set[Path] = set()
    out: list[Path | Bundle] = []
    for s in sources:
        key = Path(s.path if isinstance(s, Bundle) else s).resolve()
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def _has_capture(source: Path | Bundle) -> bool:
    """Whether a bundle (opened, or its folder) holds a capture file, the slow part of
    loading it (a timeline file has none)."""
    if isinstance(source, Bundle):
        return source.capture_file is not None
    return source.is_dir() and any(os.path.lexists(source / n) for n in CAPTURE_NAMES)


def _load_source(source: Path | Bundle) -> NodeData:
    """One of ``load_nodes``' sources: a bundle (a folder, or one opened) or a timeline file."""
    if isinstance(source, Path) and source.is_file():
        return load_timeline_node(source)
    return load_node(source)


# collections of one run overlap in time; hosts' clocks may disagree by this much (s)
RUN_SLACK_S = 60.0


def _same_run(nodes: Sequence[NodeData]) -> None:
    """Raise BundleError when two bundles were recorded in different clusters, or at times
    that do not overlap: their captures and traces would be matched as if one run."""
    def addresses(spec: dict) -> set[str]:  # TF_CONFIG's and TF's own forms alike
        return {a for v in spec.values() for a in (v.values() if isinstance(v, dict) else v)}

    with_spec = [n for n in nodes if n.spec]
    for n in with_spec[1:]:
        if not addresses(n.spec) & addresses(with_spec[0].spec):
            raise BundleError(f"bundles {with_spec[0].name} and {n.name} were recorded in "
                              "different clusters (no task address in common): give the "
                              "bundles of one run", path=n.path)
    timed = [n for n in nodes if n.span_s]
    for k, m in enumerate(timed):
        for n in timed[k + 1:]:
            a, b = m.span_s, n.span_s
            gap = max(a[0] - b[1], b[0] - a[1])  # > 0: one ended before the other started
            if gap > RUN_SLACK_S:
                raise BundleError(f"bundles {m.name} and {n.name} were recorded {gap:,.0f} s "
                                  "apart (their collections do not overlap): give the bundles "
                                  "of one run", path=n.path)


def cluster_of(nodes: Sequence[NodeData]) -> dict[str, list[str]]:
    """The cluster spec recorded by the nodes' TraceHooks (the first one found)."""
    return next((n.cluster for n in nodes if n.cluster), {})


@dataclass(frozen=True)
class Domains:
    """Which clock domain each cluster task belongs to.

    ``loopback``: every task of the cluster spec listens on a loopback address (one host, as in
    examples/ps_train.py); only then is loopback traffic the cluster's.
    """

    by_task: dict[str, str]
    loopback: bool = False

    def of_device(self, device: str) -> str:
        """Clock domain of a TF device (``task:<job>:<i>`` when no bundle holds the task)."""
        task = task_of(device)
        return self.by_task.get(task, f"task:{task}")


def map_domains(nodes: Sequence[NodeData]) -> Domains:
    """Tie cluster tasks and addresses to the nodes' clock domains."""
    cluster = cluster_of(nodes)
    names = EndpointNames(cluster)
    by_ip = {a: n.domain for n in nodes for a in n.addresses}
    by_task = {task: by_ip[ip] for (ip, _port), task in names.by_addr.items() if ip in by_ip}
    for n in nodes:  # the task a bundle's own manifest names is on its host (a PS's bundle
        if n.task:   # has no trace to name it, and its host's address may be in no spec)
            by_task.setdefault(n.task, n.domain)
    loopback = _all_loopback(names.by_addr)
    bundle_domains = {n.domain for n in nodes if n.addresses or n.streams}
    if len(bundle_domains) == 1 and loopback:  # it all runs on that host
        (host,) = bundle_domains
        for task in names.by_addr.values():
            by_task.setdefault(task, host)
    return Domains(by_task=by_task, loopback=loopback)


# how far (seconds) a traced transfer may lie outside its host's capture before the capture is
# taken not to hold it: TF and the capture tool read the same clock (aligner/skew.py takes more
# than 1 ms of disagreement as a bad stamp), and a receive op starts before its request leaves
CAPTURE_SLACK_S = 0.005


def drop_uncovered(nodes: Sequence[NodeData], domains: Domains) -> None:
    """Set aside each capture that does not span the traced transfers stamped by its host's clock.

    A traced receive op starts before its request is sent and ends after its last DATA arrived,
    so a capture holding the call has packets after the op's start and before its end. A capture
    cut short (or of another run) holds other steps' calls of the same tensors instead, and
    matching the traced steps to them gives clock offsets wrong by the distance. For such a node
    the streams are emptied and ``capture_problem`` says why; the node is then aligned from its
    trace alone (``gradwire align`` warns, ``gradwire predict`` refuses it).
    """
    # a receive op is judged by the capture of the bundle of its own task (several tasks may
    # share a host's clock: a loopback cluster, two workers on one machine), else, when no
    # bundle names that task, by the one capture of its clock domain
    by_task = {n.task: n for n in nodes if n.task}
    per_domain: dict[str, list[NodeData]] = {}
    for n in nodes:
        if n.streams:
            per_domain.setdefault(n.domain, []).append(n)
    recvs: dict[str, list[tuple[int, int]]] = {}
    for n in nodes:
        for step in n.steps:
            for o in step.ops:
                if not o.is_transfer:
                    continue
                owner = by_task.get(task_of(o.device))
                if owner is None:
                    held = per_domain.get(domains.of_device(o.device), [])
                    owner = held[0] if len(held) == 1 else None
                if owner is not None:
                    recvs.setdefault(owner.name, []).append((o.start_us, o.end_us))
    for n in nodes:
        spans = recvs.get(n.name)
        times = [t for s in n.streams for t in (s.request_ns, s.first_data_ns, s.last_data_ns,
                                                s.end_ns) if t]
        if not spans or not times:
            continue
        first_s, last_s = min(times) / 1e9, max(times) / 1e9
        late = [a / 1e6 - last_s for a, _ in spans if a / 1e6 > last_s + CAPTURE_SLACK_S]
        early = [first_s - b / 1e6 for _, b in spans if b / 1e6 < first_s - CAPTURE_SLACK_S]
        if not late and not early:
            continue
        if late:
            when = (f"ends before {len(late)} of its {len(spans)} traced transfers start (by up "
                    f"to {1e3 * max(late):,.1f} ms)")
        else:
            when = (f"starts after {len(early)} of its {len(spans)} traced transfers end (by up "
                    f"to {1e3 * max(early):,.1f} ms)")
        n.capture_problem = f"its capture {when}: cut short, or of another run"
        n.streams = []


def is_loopback(ip: str) -> bool:
    """Whether an address (``[::1]`` brackets allowed) is a loopback one."""
    ip = ip.strip("[]")
    return ip == "::1" or ip.startswith("127.")


def is_loopback_spec(cluster: dict[str, list[str]] | None) -> bool:
    """Whether every task of a cluster spec listens on a loopback address."""
    return _all_loopback(EndpointNames(cluster).by_addr)


def _all_loopback(addrs: Iterable[tuple[str, int]]) -> bool:
    ips = [ip for ip, _port in addrs]
    return bool(ips) and all(is_loopback(ip) for ip in ips)


def bundle_names(nodes: Sequence[NodeData]) -> dict[str, str]:
    """Clock domain -> the names of the bundles recorded in it (``ps0+worker0``)."""
    out: dict[str, list[str]] = {}
    for n in nodes:
        out.setdefault(n.domain, []).append(n.name)
    return {d: "+".join(v) for d, v in out.items()}
