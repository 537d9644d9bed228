"""``--emulate-step tensors``: the emulator runs the profile's step op by op, each transfer a
message of its own over real TCP.

``replay/emulate.py``'s step is one pull and one push per PS with the step's idle time in two
pieces. Here each worker runs the profile's step template itself (``replay/template.py``: the
ops the sim replays, with their dependencies), on the emulator's namespaces and links:

- a pull (``DOWN``) is a request on the worker's pull connection to its PS, answered with the
  pull's bytes; one connection per PS carries every pull, in the order they were asked for,
  as one byte stream (TensorFlow's gRPC channel, whose HTTP/2 frames share one TCP
  connection);
- a push (``UP``) is its bytes on the worker's push connection to its PS, done when the PS
  has read them all and answered;
- every other op (compute chunks, request and parsing delays, the PS's work, the gap before
  the next step) takes its template time, in its place in the graph: a push starts when the
  compute that produced its gradient is done, as in TensorFlow, not after the whole step's
  compute. The PS's work is timed in the worker (each worker's own), so the workers' applies
  overlap, as ``emulate``'s do.

Timed ops run on a clock that does not fall behind: an op's end is its start plus its time,
and its start the latest end of what it waits for, so the event loop's own delays do not add
up along a chain of short ops; transfers end when their last byte is read (or answered).

The step's time outside the wire is calibrated as ``emulate``'s is: one emulated 1-worker run
at the profile's rate and PS count, against the profile's own step; the difference goes into
the gap before the next step. Where the gap cannot take it (the traced ops alone run longer
than the profile's step), the gaps go and the time ops (compute, PS work, delays) are scaled
by the one factor that brings the emulated 1-worker step to the profile's own
(``fit_time_factor``). The rest is ``emulate``'s: the namespaces,
the link, the runs and their median. Registered beside ``phases`` on seven jobs
(docs/preregistered/issue21-emulate-w8*.md, -steps*.md, -third*.md): level with it at the
median over their 28 points (2.4% against 2.2%), within the issue's 15% at every one where
``phases`` missed by 18.3% at a pair; so the default since.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gradwire.errors import PredictError
from gradwire.replay.emulate import PORT, STEPS, EmulatedLink, run_job
from gradwire.replay.predict import placed_templates
from gradwire.replay.template import DELAY, DOWN, GAP, PS, UP, WORKER, Profile, StepTemplate
from gradwire.replay.tracecost import scale_to

# the PS: a pull connection answers each 8-byte request (a byte count) with that many bytes,
# in order; a push connection reads each message (an 8-byte count, then the bytes) and
# answers it with one byte
_PS = r"""
import socket, struct, sys, threading
addr, port, biggest = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
blob = memoryview(bytearray(max(1, biggest)))
def exact(c, view):
    got = 0
    while got < len(view):
        k = c.recv_into(view[got:])
        if not k:
            return False
        got += k
    return True
def serve(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    kind = c.recv(1)
    head = memoryview(bytearray(8))
    sink = memoryview(bytearray(1 << 20))
    while exact(c, head):
        n = struct.unpack("!Q", head)[0]
        if kind == b"L":
            c.sendall(blob[:n])
            continue
        while n:
            k = c.recv_into(sink[:min(n, len(sink))])
            if not k:
                return
            n -= k
        c.sendall(b"k")
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((addr, port))
srv.listen(256)
print("ready", flush=True)
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

# the worker: runs the step templates, in turn, ``steps`` times one after the other, each op
# when what it waits for is done (the module's docstring); prints its step end times
_WORKER = r"""
import collections, heapq, json, random, selectors, socket, struct, sys, time
spec = json.loads(sys.stdin.read())
steps_of = spec["templates"]  # [kind, amount, succ, ps] per template, used in turn
zeros = memoryview(bytearray(max([1] + [int(a) for t in steps_of for k, a in zip(t[0], t[1])
                                        if k == "u"])))
sel = selectors.DefaultSelector()
def fail(why):
    raise SystemExit(f"emulated worker: {why}")
class Conn:
    def __init__(self, host, port, tag):
        self.s = socket.create_connection((host, port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.s.sendall(tag)
        self.s.setblocking(False)
        self.pull = tag == b"L"
        self.out = collections.deque()  # memoryviews still to send
        self.wait = collections.deque()  # pulls: [op, bytes to come]; pushes: ops to answer
        self.writing = False
        sel.register(self.s, selectors.EVENT_READ, self)
    def send(self, *parts):
        self.out.extend(parts)
        self.flush()
    def flush(self):
        while self.out:
            try:
                k = self.s.send(self.out[0])
            except BlockingIOError:
                break
            if k == len(self.out[0]):
                self.out.popleft()
            else:
                self.out[0] = self.out[0][k:]
                break
        want = bool(self.out)
        if want != self.writing:
            sel.modify(self.s, selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0),
                       self)
            self.writing = want
    def read(self):
        try:
            k = self.s.recv_into(buf)
        except BlockingIOError:
            return
        if not k:
            fail("a PS closed its connection")
        t = time.monotonic()
        if not self.pull:
            for _ in range(k):
                if not self.wait:
                    fail("an answer to no push")
                done(self.wait.popleft(), t)
            return
        while k:
            if not self.wait:
                fail("bytes of no pull")
            head = self.wait[0]
            take = min(k, head[1])
            head[1] -= take
            k -= take
            if head[1] == 0:
                self.wait.popleft()
                done(head[0], t)
pull_c = [Conn(h, p, b"L") for h, p in spec["servers"]]
push_c = [Conn(h, p, b"U") for h, p in spec["servers"]]
buf = bytearray(1 << 20)
time.sleep(random.random() * spec["start_spread_s"])
timers, todo = [], []
kind = amount = succ = ps_of = indeg = at = None
left, last = 0, 0.0
def done(i, t):
    global left, last
    left -= 1
    if t > last:
        last = t
    for j in succ[i]:
        indeg[j] -= 1
        if t > at[j]:
            at[j] = t
        if indeg[j] == 0:
            todo.append(j)
def start(i):
    k, size, t = kind[i], int(amount[i]), at[i]
    if k == "t":
        if amount[i] <= 0:
            done(i, t)
        else:
            heapq.heappush(timers, (t + amount[i] * 1e-6, i))
    elif size <= 0:
        done(i, t)
    elif k == "p":
        c = pull_c[ps_of[i]]
        c.wait.append([i, size])
        c.send(struct.pack("!Q", size))
    else:
        c = push_c[ps_of[i]]
        c.wait.append(i)
        c.send(struct.pack("!Q", size), zeros[:size])
def begin(step, t):
    global kind, amount, succ, ps_of, indeg, at, left, last
    kind, amount, succ, ps_of = steps_of[step % len(steps_of)]
    indeg = [0] * len(kind)
    for s in succ:
        for j in s:
            indeg[j] += 1
    at, left, last = [t] * len(kind), len(kind), t
    todo.extend(i for i in range(len(kind)) if indeg[i] == 0)
ends = [time.monotonic()]
begin(0, ends[0])
while True:
    while todo:
        start(todo.pop())
    if left == 0:
        ends.append(last)
        if len(ends) > spec["steps"]:
            break
        begin(len(ends) - 1, last)
        continue
    now = time.monotonic()
    if timers and timers[0][0] <= now:
        while timers and timers[0][0] <= now:
            due, i = heapq.heappop(timers)
            done(i, due)
        continue
    for key, mask in sel.select(max(0.0, timers[0][0] - now) if timers else None):
        if mask & selectors.EVENT_WRITE:
            key.data.flush()
        if mask & selectors.EVENT_READ:
            key.data.read()
print(json.dumps(ends))
"""


@dataclass(frozen=True)
class TensorStep:
    """A step template as the emulated worker runs it: per op a kind (``t`` timed, ``p``
    pull, ``u`` push), its amount (us for timed ops, bytes for transfers), the ops that wait
    for it, and its PS index (transfers), of ``servers`` PSes; ``gaps``: the ops that are
    the step's gap before the next step (``GAP``)."""

    kind: tuple[str, ...]
    amount: tuple[float, ...]
    succ: tuple[tuple[int, ...], ...]
    ps: tuple[int, ...]
    servers: int
    gaps: tuple[int, ...] = ()

    def spec(self) -> list:
        """The worker program's form of it."""
        return [list(self.kind), list(self.amount), [list(s) for s in self.succ],
                list(self.ps)]

    def biggest_pull(self, ps: int) -> int:
        """The largest pull PS ``ps`` answers (bytes)."""
        return max((int(a) for k, a, p in zip(self.kind, self.amount, self.ps, strict=True)
                    if k == "p" and p == ps), default=0)


_KINDS = {DOWN: "p", UP: "u"}


def tensor_steps(templates: Sequence[StepTemplate], ps: int, placement: str
                 ) -> list[TensorStep]:
    """The profile's step templates on ``ps`` PSes (``placed_templates``: as profiled at its own
    count, else placed as the sim places them; the train op's control chain as TensorFlow has
    it on those PSes), as the emulated worker runs them."""
    out = []
    for t, where in zip(*placed_templates(templates, ps, placement), strict=True):
        if any(k not in (*_KINDS, DELAY, WORKER, PS) for k in t.kind):
            raise PredictError("--emulate-step tensors (the default) runs asynchronous PS "
                               "steps only, and this profile's step holds other kinds of "
                               "work: try --emulate-step phases")
        out.append(TensorStep(tuple(_KINDS.get(k, "t") for k in t.kind), tuple(t.amount),
                              tuple(tuple(s) for s in t.succ), tuple(where), ps,
                              tuple(i for i, n in enumerate(t.name) if n == GAP)))
    return out


def with_gap(steps: Sequence[TensorStep], extra_us: float) -> list[TensorStep]:
    """``steps`` with ``extra_us`` (us, either sign) more in each one's gap before the next
    step, never below 0."""
    return [dataclasses.replace(st, amount=tuple(
        max(0.0, a + extra_us) if i in st.gaps else a for i, a in enumerate(st.amount)))
        for st in steps]


def without_gaps(steps: Sequence[TensorStep]) -> list[TensorStep]:
    """``steps`` with no time in their gaps before the next step."""
    return with_gap(steps, -math.inf)


def gap_holds(steps: Sequence[TensorStep], change_us: float) -> bool:
    """Whether every step's gap can take ``change_us`` (us, either sign) and stay at 0 or
    above."""
    return all(st.amount[i] + change_us >= 0.0 for st in steps for i in st.gaps)


def fit_time_factor(prof: Profile, placement: str,
                    step_s: Callable[[list[TensorStep]], float], own_s: float
                    ) -> tuple[float, float | None]:
    """Where the profile's own step (``own_s``, s) is shorter than its templates run with no
    gap: the factor ``f`` on the templates' time ops (compute, PS work, delays;
    ``tracecost.scale_to``, as ``--trace-cost auto`` scales them) that brings the emulated
    1-worker step without gaps (``step_s``: one emulated run's step, s) down to it, and the
    step reached (s). (1.0, the step) where no gap already meets it; (1.0, None) where even
    without time ops the emulated step stays above it (the wire alone is slower)."""
    def step_us(p: Profile) -> float:
        return 1e6 * step_s(without_gaps(tensor_steps(p.templates, p.ps_count, placement)))

    _scaled, f, reached_us = scale_to(prof, step_us, step_us(prof), 1e6 * own_s)
    return f, None if reached_us is None else reached_us / 1e6


def run_tensors(steps: Sequence[TensorStep], link: EmulatedLink, workers: int,
                nsteps: int = STEPS, start_spread_s: float = 0.0) -> list[list[float]]:
    """One emulated job of ``workers`` workers running ``steps`` in turn: each worker's step
    end times (monotonic s, the first its start); ``start_spread_s``: ``emulate.run_job``'s.
    Root only."""
    def ps_program(k: int, addr: str) -> list[str]:
        return [_PS, addr, str(PORT), str(max(s.biggest_pull(k) for s in steps))]

    def worker_spec(addrs: list[str]) -> dict[str, Any]:
        return {"servers": [[a, PORT] for a in addrs], "steps": nsteps,
                "templates": [s.spec() for s in steps]}

    return run_job(link, max(s.servers for s in steps), workers, ps_program, _WORKER,
                   worker_spec, start_spread_s)


def step_loads(steps: Sequence[TensorStep]) -> tuple[list[float], list[float]]:
    """The bytes a step pulls from and pushes to each PS (lists by PS index), the templates'
    mean."""
    pulled = [0.0] * steps[0].servers
    pushed = [0.0] * steps[0].servers
    for st in steps:
        for k, a, p in zip(st.kind, st.amount, st.ps, strict=True):
            if k == "p":
                pulled[p] += a / len(steps)
            elif k == "u":
                pushed[p] += a / len(steps)
    return pulled, pushed
