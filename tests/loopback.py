"""A real 1-PS/1-worker TensorFlow cluster on loopback, each task under `gradwire collect`.

Used by the tests and by scripts that record bundles; the ports are picked free each run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from gradwire.collector.ringhop import free_ports  # re-exported for the tests

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "ps_train.py"


def run_cluster(out: Path, steps: int = 8, width: int = 1024, first_step: int = 2,
                record: int = 3, timeout_s: float = 240) -> dict[str, subprocess.CompletedProcess]:
    """Run the example script as PS and worker, each under `gradwire collect` on ``lo``."""
    ps_port, worker_port = free_ports(2)
    cluster = {"ps": [f"127.0.0.1:{ps_port}"], "worker": [f"127.0.0.1:{worker_port}"]}

    def argv(role: str, extra: list[str]) -> tuple[list[str], dict[str, str]]:
        env = dict(os.environ, TF_CONFIG=json.dumps(
            {"cluster": cluster, "task": {"type": role, "index": 0}}))
        cmd = [sys.executable, "-m", "gradwire", "collect", "--out", str(out / f"{role}0"),
               "--iface", "lo", "--", sys.executable, str(EXAMPLE), *extra]
        return cmd, env

    ps_cmd, ps_env = argv("ps", [])
    ps = subprocess.Popen(ps_cmd, env=ps_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    try:
        w_cmd, w_env = argv("worker", ["--steps", str(steps), "--width", str(width),
                                       "--first-step", str(first_step), "--record", str(record)])
        worker = subprocess.run(w_cmd, env=w_env, capture_output=True, text=True,
                                timeout=timeout_s)
    finally:
        ps.send_signal(signal.SIGTERM)
        ps_out, _ = ps.communicate(timeout=60)
    return {
        "worker": worker,
        "ps": subprocess.CompletedProcess(ps_cmd, ps.returncode, ps_out, ""),
    }
