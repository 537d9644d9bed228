"""A sweep of several mechanisms predicted as each would be asked alone (replay/mechgroups.py,
predictflow.mechanism_groups): the groups' options, the measured points each group matches,
the joined document; and on the shipped sample, every row of a mixed sweep equal to the row
of its mechanism asked alone."""

from __future__ import annotations

import json

import pytest
from conftest import gradwire

from gradwire.bundle import SAMPLE_BUNDLE
from gradwire.replay.mechgroups import group_options, merged, of_mechanisms
from gradwire.replay.options import PredictOptions
from gradwire.replay.predictflow import Predicted

GROUPS = [("sync-ps",), ("async-ps",), ("ring-allreduce", "butterfly")]


def _opts(**kw) -> PredictOptions:
    return PredictOptions(bundles=(SAMPLE_BUNDLE,), **kw)


def test_each_baseline_goes_with_the_group_it_models_and_the_recorded_runs_with_the_first():
    parts = group_options(_opts(models=("all",), explain=(2, 1, 1e9),
                                mechanisms=("sync-ps", "async-ps", "ring-allreduce",
                                            "butterfly")), GROUPS)
    assert [g for g, _ in parts] == GROUPS
    models = [o.models for _, o in parts]
    assert models[0] == ("sim", "sync-sum", "sync-max")
    assert models[1][0] == "sim" and "mva-exact" in models[1] and "sync-sum" not in models[1]
    assert models[2] == ("sim", "ring-ab", "ring-max")
    assert [o.explain for _, o in parts] == [(2, 1, 1e9), None, None]
    assert [o.mechanisms for _, o in parts] == GROUPS


def test_a_baseline_no_group_models_goes_with_the_first_and_a_group_with_no_model_is_left_out():
    parts = group_options(_opts(models=("mva-exact",), mechanisms=("sync-ps", "ring-allreduce")),
                          [("sync-ps",), ("ring-allreduce",)])
    assert [(g, o.models) for g, o in parts] == [(("sync-ps",), ("mva-exact",))]
    parts = group_options(_opts(models=("sim", "ring-ab"),
                                mechanisms=("sync-ps", "ring-allreduce")),
                          [("sync-ps",), ("ring-allreduce",)])
    assert [o.models for _, o in parts] == [("sim",), ("sim", "ring-ab")]


def test_each_measured_point_goes_to_the_group_of_its_mechanism_one_of_none_to_the_first():
    points = [{"mechanism": "async-ps", "w": 1}, {"mechanism": "butterfly", "w": 2},
              {"w": 3}, {"mechanism": "sync-ps+ina", "w": 4}]
    assert [p["w"] for p in of_mechanisms(points, GROUPS, 0)] == [4]
    assert [p["w"] for p in of_mechanisms(points, GROUPS, 1)] == [1, 3]  # none named: async
    assert [p["w"] for p in of_mechanisms(points, GROUPS, 2)] == [2]


def _part(opts: PredictOptions, rows: list[dict], notes: list[str], profile: dict
          ) -> Predicted:
    doc = {"profile": profile, "rows": rows, "measured": [], "notes": notes,
           "self_check": None, "replication": None}
    return Predicted(opts, doc, rows, [{"of": opts.mechanisms[0]}], {})


def test_the_joined_document_orders_rows_as_one_sweep_and_says_each_groups_settings():
    row = dict.fromkeys(("workers", "ps", "bandwidth_bps"), 1)
    first = _part(_opts(mechanisms=("sync-ps",), models=("sim", "sync-sum"), link="hostqueue"),
                  [{**row, "model": "sim", "mechanism": "sync-ps"},
                   {**row, "model": "sync-sum", "mechanism": "sync-ps"}],
                  ["note a", "note b"], {"executor_gaps": "keep", "batch_size": 32})
    second = _part(_opts(mechanisms=("ring-allreduce",), models=("sim", "ring-ab"),
                         executor_gaps="drop"),
                   [{**row, "model": "sim", "mechanism": "ring-allreduce"},
                    {**row, "model": "ring-ab", "mechanism": "ring-allreduce"}],
                   ["note b", "note c"], {"executor_gaps": "drop", "batch_size": 32})
    done = merged([first, second], [("sync-ps",), ("ring-allreduce",)])
    assert [(r["model"], r["mechanism"]) for r in done.rows] == [
        ("sim", "sync-ps"), ("sim", "ring-allreduce"), ("sync-sum", "sync-ps"),
        ("ring-ab", "ring-allreduce")]
    assert done.doc["rows"] == done.rows
    assert done.doc["notes"] == ["note a", "note b", "note c"]
    assert done.measured == [{"of": "sync-ps"}, {"of": "ring-allreduce"}]
    assert done.doc["profile"] == first.doc["profile"]
    groups = done.doc["mechanism_groups"]
    assert [(g["mechanisms"], g["link"], g["executor_gaps"], g["profile"]) for g in groups] == [
        (["sync-ps"], "hostqueue", "auto", {}),
        (["ring-allreduce"], "auto", "drop", {"executor_gaps": "drop"})]
    assert done.opts.mechanisms == ("sync-ps", "ring-allreduce")
    assert done.opts.models == ("sim", "sync-sum", "ring-ab")


def _rows(*args: str) -> dict[tuple, float]:
    proc = gradwire("predict", "--sample", "--workers", "2,4", "--bandwidth", "10Gbit",
                    "--format", "json", *args)
    assert proc.returncode == 0, proc.stderr
    return {(r["model"], r["mechanism"], r["workers"]): r["examples_per_s"]
            for r in json.loads(proc.stdout)["rows"]}


def test_a_mixed_sweep_reads_each_mechanism_as_it_reads_alone():
    """At 10 Gbit/s the sample's ring drops the PS profile's executor waits (faster) and the
    asynchronous PS counts every connection both ways; beside each other, before 2026-12-06,
    both took the settings of the mixed sweep (the ring 13% slower than alone)."""
    mixed = _rows("--model", "all", "--mechanism", "async-ps,ring-allreduce,sync-ps")
    alone: dict[tuple, float] = {}
    for m in ("async-ps", "ring-allreduce", "sync-ps"):
        alone |= _rows("--model", "all", "--mechanism", m)
    assert mixed.keys() == alone.keys()  # every baseline once
    for key, rate in alone.items():
        assert mixed[key] == pytest.approx(rate, rel=1e-9), key
