"""Bad input in a bundle's JSON (issue 19, "Bad input"): a one-line error naming file and field.

The corpus (tests/badbundles.py) is the sample bundle with one mutation each: wrong types,
NaN, times out of range, negative durations and sizes, huge integers, deep nesting, FIFOs, a
step file whose name and content disagree. Each goes (a) through the Python API, which must
raise a GradwireError subclass holding the fragments, and (b) for a subset through the real
CLI, which must exit non-zero with one line on stderr and no traceback. A hypothesis suite
then mutates the sample's JSON values at random: opening and loading either succeed or raise
a GradwireError, quickly.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from badbundles import CASES, SAMPLE, Raw, dumps, make
from conftest import gradwire
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradwire.bundle import open_bundle
from gradwire.errors import BundleError, GradwireError
from gradwire.schema import check_lab_result

NODES = ("ps0", "worker0")


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail (instead of hanging the run) when the block takes over ``seconds``: a FIFO opened
    for reading blocks until a writer comes."""
    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def read_all(root: Path, reader: str) -> None:
    """What the case's reader does with the bundles under ``root``."""
    if reader == "profile":
        from gradwire.replay.profile import load_profile

        load_profile([root])
        return
    for node in NODES:
        bundle = open_bundle(root / node)
        if reader == "steps":
            bundle.load_steps()


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 40
    assert {reader for _m, _f, reader in CASES.values()} == {"open", "steps", "profile"}


def test_an_unmutated_copy_reads_as_the_sample(tmp_path):
    root = make(tmp_path)
    for node in NODES:
        copy, sample = open_bundle(root / node), open_bundle(SAMPLE / node)
        assert copy.manifest == sample.manifest and copy.session == sample.session
        assert copy.load_steps() == sample.load_steps()


@pytest.mark.parametrize("case", list(CASES))
def test_bad_bundle_is_a_gradwire_error_naming_file_and_field(tmp_path, case):
    mutation, fragments, reader = CASES[case]
    root = make(tmp_path, mutation)
    with deadline(60), pytest.raises(GradwireError) as err:
        read_all(root, reader)
    message = str(err.value)
    assert "\n" not in message, message
    assert message.startswith(str(root)), message  # the file, by its full path
    for fragment in fragments:
        assert fragment in message, (fragment, message)


CLI_CASES = ["addresses a number", "schema_version true", "port 99999999", "clock_samples null",
             "clock sample NaN", "manifest nested 100,000 deep", "schema_version 5,000 digits",
             "manifest a FIFO", "capture a FIFO", "session a list", "steps_recorded a number",
             "record_seconds NaN", "step of another file", "op ends at 1e20 us",
             "op ends before it starts", "transfer bytes negative", "step table a FIFO",
             "batch size a word", "step end NaN"]


@pytest.mark.parametrize("case, command", [  # (inspect does not read lab_result.json)
    (case, command) for case in CLI_CASES for command in ("inspect", "predict")
    if not (command == "inspect" and CASES[case][2] == "profile")])
def test_bad_bundle_is_one_line_from_the_cli(tmp_path, case, command):
    mutation, fragments, _ = CASES[case]
    root = make(tmp_path, mutation)
    args = ["--workers", "1,2", "--quiet"] if command == "predict" else []
    proc = gradwire(command, str(root), *args, timeout=120)
    assert proc.returncode != 0, proc
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"gradwire {command}: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_the_sample_lab_result_is_a_measured_point():
    doc = json.loads((SAMPLE / "lab_result.json").read_text())
    check_lab_result(doc, "x.json", measured=True)


@pytest.mark.parametrize("edit, fragment", [
    (lambda d: d["config"].pop("workers"), "x.json: field config.workers is missing"),
    (lambda d: d.update(throughput_examples_per_s=None),
     "field throughput_examples_per_s is null, not a finite number of examples per second"),
    (lambda d: d["config"].update(ps=True), "field config.ps is true"),
])
def test_a_measured_point_needs_its_configuration_and_throughput(edit, fragment):
    doc = json.loads((SAMPLE / "lab_result.json").read_text())
    check_lab_result(doc, "x.json")  # fine as the profile's lab result
    edit(doc)
    with pytest.raises(BundleError, match=fragment.replace("(", r"\(")):
        check_lab_result(doc, "x.json", measured=True)


# -- hypothesis: random mutations of the sample's JSON values ----------------------------------

FILES = {"manifest": "worker0/manifest.json", "session": "worker0/trace/session.json",
         "step": "worker0/trace/step-00000004.ops.json"}
DOCS = {k: json.loads((SAMPLE / f).read_text()) for k, f in FILES.items()}

scalars = st.one_of(
    st.none(), st.booleans(), st.text(max_size=8),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, -1, 0, 1, 2**63, 10**20, 1e20, -1e-9]),
    st.builds(lambda n: Raw("9" * n), st.sampled_from([30, 400, 4299, 4301, 5000])),
    st.builds(lambda n: Raw("[" * n + "]" * n), st.sampled_from([10, 40, 900, 5000, 50000])),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6)


def _containers(doc: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """Every (path, container) of a document, the root included (ops: their first three)."""
    yield path, doc
    items = doc.items() if isinstance(doc, dict) else enumerate(doc[:3]) \
        if isinstance(doc, list) else ()
    for k, v in items:
        if isinstance(v, dict | list):
            yield from _containers(v, (*path, k))


CONTAINERS = {k: [p for p, _ in _containers(d)] for k, d in DOCS.items()}


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, str]:
    """(file key, its JSON text) after one to three random edits of its values."""
    which = draw(st.sampled_from(sorted(FILES)))
    doc = json.loads(json.dumps(DOCS[which]))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(CONTAINERS[which]))
        node = doc
        try:
            for k in path:
                node = node[k]
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit replaced it
        if isinstance(node, dict):
            if not node:
                continue
            key = draw(st.sampled_from(sorted(node)))
            if draw(st.booleans()) and draw(st.booleans()):
                del node[key]
            else:
                node[key] = draw(values)
        elif isinstance(node, list) and node:
            node[draw(st.integers(0, len(node) - 1))] = draw(values)
    if draw(st.booleans()) and draw(st.booleans()):  # the root itself
        return which, dumps(draw(values))
    return which, dumps(doc)


def _bundle(folder: Path, which: str, text: str) -> Path:
    """A worker bundle of the sample's JSON files (no capture) with ``which`` replaced."""
    root = folder / "worker0"
    (root / "trace").mkdir(parents=True)
    for f in ("manifest.json", *(p.relative_to(SAMPLE / "worker0").as_posix() for p in
                                 (SAMPLE / "worker0" / "trace").glob("*.json"))):
        (root / f).write_bytes((SAMPLE / "worker0" / f).read_bytes())
    (folder / FILES[which]).write_text(text)
    return root


@settings(derandomize=True, deadline=2000, max_examples=400,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated())
def test_random_mutations_open_or_raise_a_gradwire_error(case):
    which, text = case
    with tempfile.TemporaryDirectory() as tmp:
        root = _bundle(Path(tmp), which, text)
        t0 = time.monotonic()
        try:
            with deadline(10):
                open_bundle(root).load_steps()
        except GradwireError as exc:
            assert "\n" not in str(exc) and str(root) in str(exc), str(exc)
        assert time.monotonic() - t0 < 2.0
