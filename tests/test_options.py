"""PredictOptions: ``gradwire predict``'s options made once from the command line, frozen, and
checked when made (a table of bad values, each a PredictError naming the option)."""

from __future__ import annotations

import dataclasses
import doctest
import math
from pathlib import Path

import pytest
from conftest import SAMPLE

from gradwire import cli
from gradwire.errors import GradwireError, PredictError
from gradwire.replay import options
from gradwire.replay.command import predict_options
from gradwire.replay.options import PredictOptions


def _opts(**kw) -> PredictOptions:  # type: ignore[no-untyped-def]
    return PredictOptions(bundles=(SAMPLE,), **kw)


def test_the_examples_in_the_module_run():
    assert doctest.testmod(options).failed == 0


def test_options_are_frozen_and_carry_their_defaults():
    opts = _opts()
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.steps = 5  # type: ignore[misc]
    assert (opts.workers, opts.steps, opts.win_of(123.0), opts.worker_nic_bps(1e9)) == (
        (1, 2, 4, 8, 16), 60, 123.0, 1e9)
    assert _opts(flow_control=False).win_of(123.0) is None and not _opts(win_bytes=9).fit_win
    assert _opts(worker_bandwidth="unlimited").worker_nic_bps(1e9) is None
    assert _opts(worker_bandwidth=5e6).worker_nic_bps(1e9) == 5e6
    assert issubclass(PredictError, GradwireError)


@pytest.mark.parametrize("kw, fragment", [
    ({"bundles": ()}, "give the profile's bundles"),
    ({"workers": ()}, "--workers names no count"),
    ({"workers": (0, 2)}, "--workers: counts run from 1 to 4096 (got 0)"),
    ({"ps": (5000,)}, "--ps: counts run from 1 to 4096 (got 5000)"),
    ({"bandwidths_bps": (1e9, math.nan)}, "a link rate must be a finite number"),
    ({"bandwidths_bps": ()}, "--bandwidth names no rate"),
    ({"profile_bandwidth_bps": -1.0}, "a link rate must be a finite number"),
    ({"order": "sideways"}, "--order must be one of observed"),
    ({"link": "lossy"}, "--link must be one of auto, fair, fifo, block, hostqueue"),
    ({"host_queue_bytes": 1e6, "link_windows": "ratio"},
     "--host-queue sizes the queue of --link hostqueue"),
    ({"start": "later"}, "--start must be one of auto"),
    ({"backend": "slurm"}, "--backend must be one of local, ray"),
    ({"format": "xml"}, "--format must be one of table, json, csv"),
    ({"models": ()}, "unknown model ''"),
    ({"models": ("sim", "magic")}, "unknown model 'magic'"),
    ({"worker_bandwidth": "fast"}, "--worker-bandwidth must be same, unlimited or a rate"),
    ({"worker_bandwidth": 0.0}, "a link rate must be a finite number"),
    ({"ps_cores": 0}, "--ps-cores must be >= 1 (got 0)"),
    ({"win_bytes": 0}, "--win must be >= 1"),
    ({"batch_size": -3}, "--batch-size must be >= 1"),
    ({"jobs": 0}, "--jobs must be >= 1"),
    ({"steps": 5}, "--steps must be at least 10 (got 5)"),
    ({"max_steps": 9}, "--max-steps must be at least 10 (got 9)"),
    ({"replications": 1}, "--replications must be at least 2"),
    ({"replications": 16, "max_replications": 8}, "at most --max-replications (got 16 and 8)"),
    ({"start": "together", "steps": 200, "max_steps": 100}, "--max-steps (100) is below"),
    ({"timeline": (2, 1, 1e9)}, "--timeline writes into the -o folder"),
    ({"timeline": (0, 1, 1e9), "out": Path("o")}, "--timeline needs at least 1 worker"),
    ({"timeline": (9999, 1, 1e9), "out": Path("o")}, "--timeline: at most 4096"),
    ({"ray_address": "head:6379"}, "--ray-address needs --backend ray"),
])
def test_bad_options_are_refused_naming_the_option(kw, fragment):
    with pytest.raises(PredictError) as err:
        PredictOptions(**({"bundles": (SAMPLE,)} | kw))
    assert fragment in str(err.value)


def test_the_command_line_makes_the_options_once(tmp_path):
    args = cli.build_parser().parse_args(
        ["predict", str(SAMPLE), "--workers", "1-3", "--bandwidth", "1Gbit,10Gbit", "--start",
         "together", "--flow-control", "off", "--worker-bandwidth", "unlimited", "--model",
         "sim,cynthia", "--timeline", "2,1,1Gbit", "-o", str(tmp_path / "out")])
    opts = predict_options(args)
    assert opts == PredictOptions(
        bundles=(SAMPLE,), workers=(1, 2, 3), bandwidths_bps=(1e9, 1e10), start="together",
        steps=200, flow_control=False, worker_bandwidth="unlimited", models=("sim", "cynthia"),
        timeline=(2, 1, 1e9), out=tmp_path / "out")
    assert opts.baselines == ["cynthia"] and opts.sim
    sample = predict_options(cli.build_parser().parse_args(["predict", "--sample"]))
    assert sample.sample and sample.bundles[0].name == "sample_bundle" and sample.steps == 60
