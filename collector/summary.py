"""What `gradwire inspect` reports about a bundle: nodes, steps, ops, bytes, capture, problems.

Bytes per direction come from two independent sources, side by side: the trace (tensor sizes
derived from shapes and dtypes, grouped ``src job:task -> dst job:task``) and the capture (TCP
payload bytes after reassembly, so each byte counts once however often TCP retransmitted it,
grouped by endpoint, the gRPC server side shown with its port). Capture bytes include HTTP/2 and
gRPC framing, so they should be a little above the trace's tensor bytes.
"""

from __future__ import annotations

import bisect
import ipaddress
import os
import re
import socket
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from gradwire.bundle import Bundle
from gradwire.collector.h2capture import SYN
from gradwire.collector.pcapfile import PcapReader
from gradwire.collector.stepstats import ACCUMULATE_OPS
from gradwire.collector.tcpstream import TcpDirection
from gradwire.errors import BundleError, CaptureError
from gradwire.records import StepTrace, VariableRecord

_DEVICE = re.compile(r"/job:(?P<job>[^/]+)/replica:\d+/task:(?P<task>\d+)")


def task_of(device: str) -> str:
    """``/job:ps/replica:0/task:1/device:CPU:0`` -> ``ps:1`` (the device itself if no job)."""
    m = _DEVICE.match(device)
    return f"{m.group('job')}:{m.group('task')}" if m else device


def step_summary(trace: StepTrace) -> dict[str, Any]:
    """Per-step figures from the trace: duration, ops per device, transfer bytes per direction."""
    by_dir: dict[str, int] = defaultdict(int)
    unknown = disagree = 0
    for op in trace.ops:
        if not op.is_transfer:
            continue
        key = f"{task_of(op.src_device)} -> {task_of(op.dst_device)}"
        if op.bytes_ is None:
            unknown += 1
        else:
            by_dir[key] += op.bytes_
            if op.bytes_reported is not None and abs(op.bytes_reported - op.bytes_) > max(
                0.05 * op.bytes_, 64
            ):
                disagree += 1
    return {
        "step": trace.step,
        "start_us": trace.start_us,
        "duration_ms": round((trace.end_us - trace.start_us) / 1000, 3),
        "ops": len(trace.ops),
        "ops_per_device": dict(Counter(op.device for op in trace.ops)),
        "transfers": sum(1 for op in trace.ops if op.is_transfer),
        "trace_bytes": dict(sorted(by_dir.items())),
        "transfers_unknown_size": unknown,
        "tf_size_disagrees": disagree,
        "capture_bytes": {},
    }


class EndpointNames:
    """Name capture endpoints after cluster tasks (``ps:0``) using the cluster spec.

    The server side of a connection is known by ``ip:port``; the client side (an ephemeral
    port) by its IP when exactly one other task lives there, else it keeps its IP.
    """

    def __init__(self, cluster: dict[str, list[str]] | None) -> None:
        self.by_addr: dict[tuple[str, int], str] = {}
        self.by_ip: dict[str, set[str]] = defaultdict(set)
        for job, hosts in (cluster or {}).items():
            # TF's two forms: a list of 'host:port', or an object of them by task index
            tasks = ((int(k), v) for k, v in hosts.items()) if isinstance(hosts, dict) \
                else enumerate(hosts)
            for idx, hostport in tasks:
                host, _, port = hostport.rpartition(":")
                ip = _resolve(host.strip("[]"))
                if ip and port.isdigit():
                    self.by_addr[(ip, int(port))] = f"{job}:{idx}"
                    self.by_ip[ip].add(f"{job}:{idx}")

    def direction(self, src: str, sport: int, dst: str, dport: int) -> str:
        """``'ps:0 -> worker:0'`` for a packet, falling back to addresses where unknown."""
        s_task = self.by_addr.get((src, sport))
        d_task = self.by_addr.get((dst, dport))
        if s_task is None and d_task is not None:
            s_task = self._client(src, d_task) or src
        elif d_task is None and s_task is not None:
            d_task = self._client(dst, s_task) or dst
        return f"{s_task or f'{src}:{sport}'} -> {d_task or f'{dst}:{dport}'}"

    def _client(self, ip: str, server_task: str) -> str | None:
        others = self.by_ip.get(ip, set()) - {server_task}
        return next(iter(others)) if len(others) == 1 else None


def bundle_task(bundle: Bundle) -> str:
    """The task ``bundle``'s manifest names, else the one cluster task of its cluster spec (the
    manifest's, else the trace's) that lives at one of this host's addresses, else '' (no
    spec, or several tasks on this host, as a whole cluster on one machine)."""
    if bundle.task:
        return bundle.task
    spec = bundle.manifest.get("cluster_spec") or (bundle.session or {}).get("cluster_spec")
    names = EndpointNames(spec if isinstance(spec, dict) else None)
    found = set().union(*(names.by_ip.get(a, set())
                          for a in bundle.manifest["host"].get("addresses") or ()))
    return found.pop() if len(found) == 1 else ""


def _resolve(host: str) -> str | None:
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        pass
    try:
        return socket.gethostbyname(host)
    except (OSError, ValueError):  # UnicodeError: a label over 63 characters
        return None


def capture_summary(bundle: Bundle, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Stream the capture once: packets, payload bytes per direction, and per recorded step."""
    assert bundle.capture_file is not None
    names = EndpointNames(bundle.manifest.get("cluster_spec"))
    reader = PcapReader(bundle.capture_file)
    starts = [s["start_us"] * 1000 for s in steps]
    ends = [(s["start_us"] + s["duration_ms"] * 1000) * 1000 for s in steps]
    totals: dict[str, int] = defaultdict(int)
    streams: dict[tuple[str, int, str, int], TcpDirection] = {}
    packets = on_ports = 0
    ports = set(bundle.ports)
    first = last = None
    for pkt in reader:
        packets += 1
        on_ports += pkt.sport in ports or pkt.dport in ports
        first = pkt.ts_ns if first is None else first
        last = pkt.ts_ns
        conn = (pkt.src, pkt.sport, pkt.dst, pkt.dport)
        tcp = streams.get(conn)
        if tcp is None:
            tcp = streams[conn] = TcpDirection()
        lost = tcp.gap_bytes
        chunks = tcp.feed(pkt.ts_ns, pkt.seq, pkt.payload, syn=bool(pkt.flags & SYN),
                          missing=pkt.cut_bytes)
        # new bytes only (retransmissions trimmed), and bytes the snap length cut off
        new = [(c.ts_ns, len(c.data)) for c in chunks] + [(pkt.ts_ns, tcp.gap_bytes - lost)]
        key = names.direction(pkt.src, pkt.sport, pkt.dst, pkt.dport)
        for ts_ns, nbytes in new:
            if not nbytes:
                continue
            totals[key] += nbytes
            i = bisect.bisect_right(starts, ts_ns) - 1
            if i >= 0 and ts_ns <= ends[i]:
                per = steps[i]["capture_bytes"]
                per[key] = per.get(key, 0) + nbytes
    for conn, tcp in streams.items():  # out-of-order bytes still held at the end
        held = sum(len(c.data) for c in tcp.flush(last or 0))
        if held:
            totals[names.direction(*conn)] += held
    retransmitted = sum(t.retransmitted_bytes for t in streams.values())
    return {
        "file": bundle.capture_file.name,
        "format": reader.format,
        "tcp_packets": packets,
        "packets_on_ports": on_ports if ports else None,
        "frames": reader.stats.frames,
        "skipped_frames": reader.stats.skipped_frames,
        "truncated": reader.stats.truncated,
        "duration_s": round((last - first) / 1e9, 3) if packets > 1 else 0.0,
        "payload_bytes": dict(sorted(totals.items())),
        "retransmitted_bytes": retransmitted,
    }


def variables_summary(variables: Sequence[VariableRecord]) -> dict[str, Any] | None:
    """The PS variables of a step's partition graphs: per task, how many and their bytes, and
    the biggest (None when the table lists none: a bundle from before they were kept)."""
    on_ps = [v for v in variables if task_of(v.device).startswith("ps:")]
    if not on_ps:
        return None
    per_task: dict[str, dict[str, int]] = {}
    for v in on_ps:
        t = per_task.setdefault(task_of(v.device), {"count": 0, "bytes": 0})
        t["count"] += 1
        t["bytes"] += v.bytes_ or 0
    big = max(on_ps, key=lambda v: v.bytes_ or 0)
    return {"per_task": dict(sorted(per_task.items())),
            "biggest": {"name": big.name, "task": task_of(big.device), "bytes": big.bytes_}}


def runmeta_problems(bundle: Bundle) -> tuple[list[str], list[str]]:
    """(problems, notes) of the recorded steps' lossless RunMetadata
    (``trace/step-NNNNNNNN.runmeta.pb``), which ``opdb ingest``, the memory estimate and
    ``opdb step`` read: each missing or unreadable file is a problem; without the protobuf
    package (gradwire[predict]) they are not read, and a note says so. One that is there but
    not a regular file, empty, or without step statistics is a problem named as such."""
    from gradwire.bundle import step_file

    files = {step: step_file(bundle.path, step, "runmeta.pb") for step in bundle.steps}
    present = {step: f for step, f in files.items() if os.path.lexists(f)}  # read: named
    problems = [f"step {step}: {f.name} is missing (opdb ingest and the memory estimate read "
                "it)" for step, f in files.items() if step not in present]
    try:
        from gradwire.collector.opingest import read_run_metadata
    except ImportError:  # protobuf: an optional dependency of the offline stages
        return problems, ([f"{len(present)} RunMetadata file(s) not read: the protobuf package "
                           "is not installed (pip install gradwire[predict])"] if present else [])
    for step, f in present.items():
        try:
            read_run_metadata(f)
        except BundleError as exc:
            problems.append(f"step {step}: {f.name}: {exc.message}")
    return problems, []


def summarize(bundle: Bundle) -> dict[str, Any]:
    """The whole inspection of one bundle as a JSON-ready dict.

    The manifest, session and step tables were validated as the bundle was opened and its
    steps read (gradwire/schema.py), so their fields are used as they are.
    """
    m = bundle.manifest
    problems: list[str] = list(m.get("problems", []))
    notes: list[str] = []
    traces = bundle.load_steps()
    steps = [step_summary(t) for t in traces]
    devices = sorted({d for t in traces for d in t.devices})
    if m["status"] == "stopped":
        notes.append(f"collection ended by signal {m.get('stop_signal')} (capture closed cleanly)")
    elif m["status"] != "complete":
        problems.append(f"collection status is {m['status']!r}, not 'complete'")
    task = m.get("task") or {}
    if not traces and task.get("type") == "ps":
        notes.append("no recorded steps: expected for a parameter server, whose ops are in the "
                     "workers' bundles (a worker's RunMetadata carries the PS devices)")
    elif not traces and not task:
        notes.append("no recorded steps: the bundle names no TensorFlow task (collected "
                     "without TF_CONFIG); a worker's steps come from its TraceHook")
    elif not traces:
        session = bundle.session or {}
        ran, first = session.get("steps_run"), session.get("options", {}).get("first_step")
        why = (f": the session ran {ran} step(s), and the TraceHook starts at first_step "
               f"{first}" if ran is not None and first is not None and ran <= first
               else " (no TraceHook ran, or it recorded nothing)")
        problems.append(f"no recorded steps{why}")
    # an interrupted atomic write's temporary file, beside the manifest or in trace/
    leftovers = [p for folder in (bundle.path, bundle.path / "trace")
                 for p in folder.glob(".tmp-*")]
    if leftovers:
        problems.append(f"{len(leftovers)} partial file(s) from an interrupted write ignored")
    meta_problems, meta_notes = runmeta_problems(bundle)
    problems += meta_problems
    notes += meta_notes
    for s in steps:
        if s["transfers_unknown_size"]:
            problems.append(f"step {s['step']}: {s['transfers_unknown_size']} transfers of "
                            "unknown size")
    disagree = sum(s["tf_size_disagrees"] for s in steps)
    if disagree:  # nothing is missing: the shape and dtype give the size
        notes.append(f"{disagree} transfers where TensorFlow's own size label disagrees with "
                     "the size from shape and dtype (the latter is used)")
    cap_info = m.get("capture") or {}
    capture: dict[str, Any] | None = None
    unreadable = None  # why the capture could not be read, if it could not
    if bundle.capture_file is not None:
        try:
            capture = capture_summary(bundle, steps)
        except CaptureError as exc:
            unreadable = str(exc)
            problems.append(unreadable)
        else:
            if capture["truncated"]:
                problems.append(f"{capture['file']} ends mid-packet (capture was cut short)")
            moved = any(op.is_transfer and task_of(op.src_device) != task_of(op.dst_device)
                        for t in traces for op in t.ops)  # between tasks: on the network
            if moved and capture.get("packets_on_ports") == 0 and not any(
                    "no packet captured" in p for p in problems):
                problems.append(f"{capture['file']} holds no packet of port(s) "
                                f"{','.join(map(str, bundle.ports)) or '?'}, though the traced "
                                "steps moved tensors: the cluster's ports and interface?")
    elif cap_info:
        problems.append(f"manifest names capture {cap_info.get('file')} but it is missing")
    drops = {k: cap_info.get(k) for k in ("drops_kernel", "drops_capturer", "drops_iface")}
    return {
        "bundle": str(bundle.path),
        "capture_unreadable": unreadable,
        "schema_version": m["schema_version"],
        "status": m["status"],
        "mode": m.get("mode"),
        "host": m["host"],
        "tf_version": m.get("tf_version"),
        "task": task or None,
        "ports": bundle.ports,
        "nodes": sorted({task_of(d) for d in devices}),
        "devices": devices,
        "variables": variables_summary(traces[0].variables if traces else ()),
        # PS training only; None: no recorded step with a PS to tell
        "synchronous": any(o.op_type in ACCUMULATE_OPS for o in traces[0].ops)
        if any(task_of(d).startswith("ps:") for d in devices) else None,
        "steps": steps,
        "capture": None if capture is None else {**capture, **drops,
                                                  "tool": cap_info.get("tool"),
                                                  "packets_captured": cap_info.get(
                                                      "packets_captured")},
        # the machine's busy and stolen cores over the capture (collect since 2026-11-29)
        "host_cpu": m.get("host_cpu"),
        "problems": problems,
        "notes": notes,
    }
