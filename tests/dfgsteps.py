"""Hand-made traced steps (global-DFG ``DfgStep``s on one clock, us) for the template
builder's tests: ops, transfers and the partition graph's same-device edges."""

from __future__ import annotations

from collections.abc import Iterable

from gradwire.aligner.dfg import DfgOp, DfgStep, DfgTransfer
from gradwire.aligner.transfers import Transfer
from gradwire.records import DataDep, OpRecord

PS0 = "/job:ps/replica:0/task:0/device:CPU:0"
PS1 = "/job:ps/replica:0/task:1/device:CPU:0"
WK = "/job:worker/replica:0/task:0/device:CPU:0"


def record(name: str, device: str, start: float, end: float, op_type: str = "Op",
           tensor: str = "") -> OpRecord:
    """An op as traced in step 1, named as its partition-graph node."""
    return OpRecord(step=1, name=name, op_type=op_type, device=device, start_us=int(start),
                    end_us=int(end), graph_node=name, tensor=tensor)


def op(name: str, device: str, start: float, end: float, op_type: str = "Op") -> DfgOp:
    """A traced op from ``start`` to ``end`` (us)."""
    return DfgOp(id=name, kind="op", task=device, start_us=start, end_us=end,
                 record=record(name, device, start, end, op_type))


def transfer(edge: str, src: str, dst: str, producer: OpRecord, request: float, first: float,
             last: float, received: float, nbytes: int | None = None,
             wire_bytes: float | None = None) -> DfgTransfer:
    """A transfer received into ``edge + '_R'`` (a pull unless it leaves the worker): its
    tensor ``nbytes`` (default ``last - first``, 1 byte per us) and its bytes on the wire
    (default ``last - first``)."""
    recv = record(f"{edge}_R", dst, request, received, tensor=edge)
    t = Transfer(txn=edge, direction="push" if src == WK else "pull", edge=edge,
                 src_device=src, dst_device=dst, src_domain=src, dst_domain=dst, step_id=1,
                 bytes_=int(last - first) if nbytes is None else nbytes, recv=recv,
                 producer=producer)
    return DfgTransfer(id=edge, kind="transfer", transfer=t, request_us=request,
                       first_data_us=first, last_data_us=last, recv_start_us=request,
                       recv_end_us=received, producer_end_us=producer.end_us,
                       wire_bytes=last - first if wire_bytes is None else wire_bytes,
                       wire_times=True)


def step(ops: Iterable[DfgOp], transfers: Iterable[DfgTransfer],
         deps: Iterable[tuple[str, str, str]]) -> DfgStep:
    """Step 1 of bundle ``w``; ``deps``: (source op, op that waits for it, their device)."""
    return DfgStep(bundle="w", step=1, ops=tuple(ops), transfers=tuple(transfers),
                   deps=tuple(DataDep(src=a, dst=b, src_device=d, dst_device=d)
                              for a, b, d in deps))


def op_named(tpl, prefix: str) -> int:
    """The first op of template ``tpl`` whose name starts with ``prefix``."""
    return next(i for i, n in enumerate(tpl.name) if n.startswith(prefix))
