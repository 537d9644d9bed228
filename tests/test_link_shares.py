"""``predict --link-shares windows``: a shared link's transfers share it by windows drawn from
the profile's own transfers' (replay/grid.py ``measured_share_windows``, the kernel's weighted
virtual clock: tests/test_kernel.py holds it to the oracle and to a closed form)."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import gradwire

from gradwire.bundle import SAMPLE_BUNDLE
from gradwire.errors import PredictError
from gradwire.replay.generators import link_share_rows, link_windows
from gradwire.replay.grid import SHARE_DRAWS, byte_quantiles, measured_share_windows
from gradwire.replay.options import PredictOptions
from gradwire.replay.predictflow import auto_link_shares
from gradwire.replay.profile import load_profile, ps_addresses


def test_byte_quantiles_draw_a_transfer_in_proportion_to_its_bytes():
    # 1 KB at 10, 3 KB at 30: three of four draws are 30
    assert byte_quantiles([(30.0, 3000), (10.0, 1000)], 4) == (10.0, 30.0, 30.0, 30.0)
    assert byte_quantiles([(5.0, 1)], 3) == (5.0, 5.0, 5.0)
    assert byte_quantiles([], 4) == () and byte_quantiles([(5.0, 0)], 4) == ()


def test_share_rows_shuffle_by_seed_and_keep_the_draws():
    rows = link_share_rows(((1.0, 2.0, 3.0, 4.0), ()), 2, 3, seed=0)
    assert rows.shape == (2 * 2 + 3, 4)
    for r in rows[:2]:  # each PS's downlink: the pull windows, in an order of its own
        assert sorted(r) == [1.0, 2.0, 3.0, 4.0]
    assert np.all(rows[2:] == 1.0)  # the uplinks without windows, and the extra links: alike
    again = link_share_rows(((1.0, 2.0, 3.0, 4.0), ()), 2, 3, seed=0)
    assert np.array_equal(rows, again)
    orders = {tuple(link_share_rows(((1.0, 2.0, 3.0, 4.0), ()), 1, 0, s)[0]) for s in range(8)}
    assert len(orders) > 1  # replications draw apart
    assert link_share_rows(((), ()), 2, 0, seed=0) is None  # equal shares


def test_each_ps_link_draws_its_own_windows_at_the_profile_s_ps_count():
    # pooled pulls 1, pushes 2; PS 0's pulls 3, PS 1's 4; PS 0's pushes 5, PS 1's 6
    windows = ((1.0,), (2.0,), (3.0,), (4.0,), (5.0,), (6.0,))
    assert link_windows(windows, 2) == [(3.0,), (4.0,), (5.0,), (6.0,)]
    rows = link_share_rows(windows, 2, 1, seed=0)
    assert rows[:, 0].tolist() == [3.0, 4.0, 5.0, 6.0, 1.0]
    # at another PS count (a 2-PS profile predicted for 3) every link draws the pooled ones
    assert link_windows(windows, 3) == [(1.0,)] * 3 + [(2.0,)] * 3
    assert link_windows(((1.0,), (2.0,)), 2) == [(1.0,), (1.0,), (2.0,), (2.0,)]


def test_each_ps_is_placed_by_its_bundle_or_else_the_cluster_spec():
    # PS 0 recorded (its bundle names the task), PS 1 not: the worker's cluster spec places it
    worker = SimpleNamespace(task="worker:0", addresses=("10.0.0.100",),
                             cluster={"ps": ["10.0.0.10:2222", "[fd00::11]:2222"],
                                      "worker": ["10.0.0.100:2222"]})
    ps0 = SimpleNamespace(task="ps:0", addresses=("10.0.0.10", "10.1.0.10"), cluster={})
    al = SimpleNamespace(nodes=[worker, ps0])
    assert ps_addresses(al, ["ps:0", "ps:1"]) == (("10.0.0.10", "10.1.0.10"), ("fd00::11",))
    assert ps_addresses(al, ["ps:2"]) == ((),)  # nothing places it: its links draw the pooled
    # TF's other form of the spec: the tasks by index
    worker.cluster = {"ps": {"0": "10.0.0.10:2222", "1": "10.0.0.11:2222"}}
    assert ps_addresses(SimpleNamespace(nodes=[worker]), ["ps:0", "ps:1"]) == (
        ("10.0.0.10",), ("10.0.0.11",))


def test_the_ps_links_draw_the_pooled_windows_unless_each_ps_is_told_apart():
    prof = load_profile([SAMPLE_BUNDLE])
    pooled = measured_share_windows(prof)
    ps_host = prof.transport.hosts[0]
    worker_host = prof.worker_transport.hosts[0]
    for places in ((ps_host, ps_host),  # two PSes on one host
                   (ps_host, worker_host),  # a PS beside the profiled worker
                   (ps_host, ("10.9.9.9",))):  # the second PS has no transfers of its own
        two = replace(prof, ps_tasks=["ps:0", "ps:1"], ps_addresses=places)
        assert measured_share_windows(two) == pooled


def test_the_sample_profile_s_transfers_kept_windows_both_ways():
    prof = load_profile([SAMPLE_BUNDLE])
    pulls, pushes = measured_share_windows(prof)
    assert len(pulls) == len(pushes) == SHARE_DRAWS
    assert all(x > 0 for x in pulls + pushes)
    assert list(pulls) == sorted(pulls) and list(pushes) == sorted(pushes)


def test_predict_shares_by_window_says_so_and_moves_the_shared_rows():
    """On the shipped sample: the one-worker row, alone on its links, is unchanged; W = 4
    moves; auto (the default) is windows for its asynchronous PS; the JSON and -v say which
    windows; refused with a link that has no shares."""
    rows, docs, said = {}, {}, {}
    for shares in ("equal", "windows", "auto"):
        proc = gradwire("-v", "predict", "--sample", "--workers", "1,4", "--link-shares",
                        shares, "--format", "json", timeout=300)
        assert proc.returncode == 0, proc.stderr
        docs[shares] = json.loads(proc.stdout)
        rows[shares] = [r["examples_per_s"] for r in docs[shares]["rows"] if r["model"] == "sim"]
        said[shares] = proc.stderr
    assert rows["windows"][0] == pytest.approx(rows["equal"][0])
    assert rows["windows"][1] != rows["equal"][1] and rows["windows"][1] > 0
    assert docs["equal"]["profile"]["link_share_windows_bytes"] is None
    pulls, pushes = docs["windows"]["profile"]["link_share_windows_bytes"]
    assert len(pulls) == len(pushes) == SHARE_DRAWS
    assert "(--link-shares windows)" in said["windows"] and "KB (10-50-90%" in said["windows"]
    assert "--link-shares" not in said["equal"]
    assert rows["auto"] == rows["windows"]
    bad = gradwire("predict", "--sample", "--link", "fifo", "--link-shares", "windows")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "--link-shares windows shares the processor-shared links" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_auto_shares_by_window_only_the_asynchronous_ps_on_shared_links():
    # registered for the asynchronous PS through the lab's FIFO
    # (docs/preregistered/issue21-link-shares-second.md); a fair queue's HTB classes serve the
    # nodes in turn whatever their windows
    assert auto_link_shares(("async-ps",), "fair", {}) == "windows"
    assert auto_link_shares(("async-ps",), "fair", {"qdisc": "fair"}) == "equal"
    assert auto_link_shares(("async-ps", "sync-ps"), "fair", {}) == "equal"
    assert auto_link_shares(("ring-allreduce",), "fair", {}) == "equal"
    assert auto_link_shares(("async-ps",), "hostqueue", {}) == "equal"


def test_link_shares_is_checked_with_the_other_options():
    with pytest.raises(PredictError, match="--link-shares"):
        PredictOptions(bundles=(SAMPLE_BUNDLE,), link_shares="unequal")
    with pytest.raises(PredictError, match="--link hostqueue has none"):
        PredictOptions(bundles=(SAMPLE_BUNDLE,), link="hostqueue", link_shares="windows")
    kept = PredictOptions(bundles=(SAMPLE_BUNDLE,), link="overflow", link_shares="windows")
    assert kept.link_shares == "windows"
