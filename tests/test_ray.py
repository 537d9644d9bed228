"""`gradwire predict --backend ray` on a real local Ray instance (no mocks): the same predictions
as the local process pool, the command's outputs when it starts its own instance or joins a
running one, and one-line errors for an address nobody listens on and for a missing extra."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
import time

import pytest
from conftest import SAMPLE, assert_one_line_error, assert_sweep_stops_midway, gradwire, need

from gradwire.replay.profile import load_profile
from gradwire.replay.sweep import Job, run_jobs

SWEEP = ["--workers", "1-3", "--bandwidth", "1Gbit", "--steps", "50", "--max-steps", "400"]


def need_ray() -> None:
    need(importlib.util.find_spec("ray") is not None, "Ray (pip install 'gradwire[ray]')")


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray instance (2 CPUs) for the module, shut down at its end."""
    need_ray()
    import ray

    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
    )
    yield ray
    ray.shutdown()


def _rows(path) -> list[dict]:
    return json.loads(path.read_text())["rows"]


@pytest.mark.slow
def test_ray_tasks_give_the_local_pools_predictions_in_job_order(ray_session):
    prof = load_profile([SAMPLE])
    jobs = [
        Job(w, m, 1e9, order, None, 3, 50, 400)
        for m in (1, 2)
        for w in (1, 2, 3)
        for order in ("observed", "random")
    ]
    local = run_jobs(prof, jobs, 2, progress=False)
    on_ray = run_jobs(prof, jobs, 2, progress=False, backend="ray")
    assert on_ray == local  # every field, to the bit
    assert [(p.workers, p.ps, p.order) for p in on_ray] == [
        (j.workers, j.ps, j.order) for j in jobs
    ]
    assert ray_session.is_initialized()  # a session it did not start is left running


@pytest.mark.slow
def test_predict_on_its_own_ray_instance_writes_json_and_csv(tmp_path):
    need_ray()
    local = gradwire(
        "predict", str(SAMPLE), *SWEEP, "--quiet", "--json", str(tmp_path / "local.json")
    )
    assert local.returncode == 0, local.stderr
    out = tmp_path / "ray"
    proc = gradwire(
        "predict",
        str(SAMPLE),
        *SWEEP,
        "--backend",
        "ray",
        "--jobs",
        "2",
        "--out",
        str(out),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rows = _rows(out / "predictions.json")
    assert [r["workers"] for r in rows] == [1, 2, 3]
    assert rows == _rows(tmp_path / "local.json")
    with (out / "predictions.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [float(r["examples_per_s"]) for r in table] == [r["examples_per_s"] for r in rows]
    assert "sim" in proc.stdout


@pytest.mark.slow
def test_predict_joins_a_running_ray_cluster_by_address(ray_session, tmp_path):
    # the command inherits this process's environment: with Ray >= 2.60 that holds
    # RAY_AUTH_MODE=token, set by ray.init, so it presents the instance's token
    address = ray_session.get_runtime_context().gcs_address
    local = run_jobs(
        load_profile([SAMPLE]),
        [Job(w, 1, 1e9, "observed", None, 0, 50, 400) for w in (1, 2, 3)],
        1,
        progress=False,
    )
    proc = gradwire(
        "predict",
        str(SAMPLE),
        *SWEEP,
        "--flow-control",
        "off",
        "--link-windows",  # the jobs above are built with independent directions
        "off",
        "--start",  # and random phases
        "random",
        "--link-shares",  # and equal shares
        "equal",
        "--backend",
        "ray",
        "--ray-address",
        address,
        "--quiet",
        "--json",
        str(tmp_path / "p.json"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert [r["examples_per_s"] for r in _rows(tmp_path / "p.json")] == [
        p.examples_per_s for p in local
    ]
    assert ray_session.is_initialized()  # the command left the cluster it joined running


def test_unreachable_ray_address_is_a_quick_one_line_error():
    need_ray()
    t0 = time.monotonic()
    proc = gradwire(
        "predict",
        str(SAMPLE),
        *SWEEP,
        "--backend",
        "ray",
        "--ray-address",
        "127.0.0.1:1",
        timeout=60,
    )
    assert_one_line_error(proc, "cannot connect to the Ray cluster at 127.0.0.1:1")
    assert time.monotonic() - t0 < 30


def test_ray_address_without_the_ray_backend_is_one_line():
    assert_one_line_error(
        gradwire("predict", str(SAMPLE), "--ray-address", "127.0.0.1:1"),
        "--ray-address needs --backend ray",
    )


def test_missing_ray_extra_names_the_fix():
    # a Python where `import ray` fails, as without the extra (None in sys.modules blocks it)
    code = (
        "import sys; sys.modules['ray'] = None; from gradwire.cli import main; "
        f"sys.exit(main(['predict', {str(SAMPLE)!r}, '--backend', 'ray']))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert_one_line_error(
        proc,
        "gradwire predict: error: --backend ray needs the optional "
        "'ray' extra: pip install 'gradwire[ray]'",
    )


def test_sigterm_stops_a_ray_sweep_as_it_stops_a_local_one(tmp_path):
    """ray.init installs its own SIGTERM handler (exit code 15, gradwire's stop skipped):
    predict keeps its own, so a SIGTERM midway stops a Ray sweep as it stops a local one."""
    need_ray()
    assert_sweep_stops_midway(tmp_path / "o", "--backend", "ray", "--jobs", "2")


class _WaitStoppedBySignal:
    """Stands in for Ray only where Ray cannot be made to fail on cue: its compiled wait
    returning while a signal handler's exception is set, which CPython wraps in a
    SystemError holding it (a CI run saw it for SIGTERM)."""

    def __init__(self, stop: BaseException) -> None:
        self.stop = stop

    def wait(self, pending, num_returns):
        try:
            raise self.stop
        except BaseException as inner:
            raise SystemError("CoreWorker.wait returned a result with an exception set") \
                from inner


def test_a_signal_inside_rays_wait_stops_the_sweep_as_itself():
    from gradwire.cli import Terminated
    from gradwire.replay.raybackend import _finished

    for stop in (Terminated(15), KeyboardInterrupt()):
        with pytest.raises(type(stop)):
            next(_finished(_WaitStoppedBySignal(stop), ["ref"]))
    with pytest.raises(SystemError):  # any other SystemError is Ray's own, left as it is
        next(_finished(_WaitStoppedBySignal(ValueError("x")), ["ref"]))
