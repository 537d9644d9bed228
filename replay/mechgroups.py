"""One sweep of several mechanisms predicted as each would be asked alone.

``--link auto``, ``--link-windows auto`` and ``--executor-gaps auto`` resolve by the
mechanisms predicted: the PS's own queue only on a lab FIFO, for synchronous PS and for an
asynchronous PS whose PSes ran CUBIC or Reno (then the switch's queue too), every
connection counted only for the asynchronous PS, a PS profile's executor waits dropped only
where every mechanism computes with its links idle. Resolved once for a whole sweep, a
mechanism's rows read otherwise beside another mechanism than alone (sync-ps on the lab's
ResNet-50 profile at W = 32, 25 Gbit/s: 28.2 examples/s beside the others, 32.3 alone), so a
comparison in one table was not the comparison of two predictions. ``predictflow`` groups
the mechanisms whose options resolve alike (``predictflow.mechanism_groups``), predicts each
group as its own sweep (``group_options``), and joins them here (``merged``): the rows in the
order one sweep gives them, the notes once each, the measured points each with the group of
its mechanism."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gradwire.replay.measured import ASYNC
from gradwire.replay.options import MODELS, PredictOptions, baselines_of

if TYPE_CHECKING:
    from gradwire.replay.predictflow import Predicted

# what a group's sweep resolved that can differ from the first's (JSON: mechanism_groups)
GROUP_SETTINGS = ("link", "uplink_queue", "link_windows", "link_shares", "executor_gaps")


def group_options(raw: PredictOptions, groups: Sequence[tuple[str, ...]]
                  ) -> list[tuple[tuple[str, ...], PredictOptions]]:
    """Each group of mechanisms with the options of its own sweep: ``raw``'s with its
    mechanisms; each baseline asked for (``--model all``: those of every mechanism) in the
    first group whose mechanisms it models (one none models: the first group); ``--timeline``
    and ``--explain``, which replay the first mechanism, in the first group. A group with no
    model left (no sim asked, none of the baselines its) is left out."""
    asked = baselines_of(tuple(m for g in groups for m in g)) if raw.models == ("all",) \
        else tuple(raw.baselines)
    home = {b: next((k for k, g in enumerate(groups) if b in baselines_of(g)), 0)
            for b in asked}
    out = []
    for k, group in enumerate(groups):
        models = (("sim",) if raw.sim else ()) + tuple(b for b in asked if home[b] == k)
        if models:
            out.append((group, dataclasses.replace(
                raw, mechanisms=group, models=models,
                **({} if k == 0 else {"timeline": None, "explain": None}))))
    return out


def of_mechanisms(measured: list[dict[str, Any]], groups: Sequence[tuple[str, ...]],
                  k: int) -> list[dict[str, Any]]:
    """The measured points the ``k``-th group's rows can match: those of its mechanisms, and
    in the first group those of none (so that one note says they match no row)."""
    every = {m for g in groups for m in g}
    return [p for p in measured if p.get("mechanism", ASYNC) in groups[k]
            or (k == 0 and p.get("mechanism", ASYNC) not in every)]


def merged(parts: Sequence[Predicted], groups: Sequence[tuple[str, ...]]) -> Predicted:
    """The groups' sweeps as one: the first's document, with every group's rows (the sim's
    first, by mechanism as asked, then each baseline's in ``MODELS``' order), measured points
    and notes (each once, in order); the profile's summary the first group's, and what each
    group resolved in ``mechanism_groups``."""
    order = [m for g in groups for m in g]

    def place(row: dict[str, Any]) -> tuple[int, int]:
        if row["model"] == "sim":
            return 0, order.index(row["mechanism"])
        return 1 + MODELS.index(row["model"]), 0

    first = parts[0]
    rows = sorted((r for p in parts for r in p.rows), key=place)
    measured = [m for p in parts for m in p.measured]
    notes = list(dict.fromkeys(n for p in parts for n in p.doc["notes"]))
    doc = {**first.doc, "rows": rows, "measured": measured, "notes": notes,
           "self_check": next((p.doc["self_check"] for p in parts if p.doc["self_check"]),
                              None),
           "replication": next((p.doc["replication"] for p in parts if p.doc["replication"]),
                               None),
           "mechanism_groups": [
               {"mechanisms": list(p.opts.mechanisms),
                **{k: getattr(p.opts, k) for k in GROUP_SETTINGS},
                # the profile's summary where it differs from the first group's
                "profile": {k: v for k, v in p.doc["profile"].items()
                            if first.doc["profile"].get(k) != v}} for p in parts]}
    opts = dataclasses.replace(first.opts, mechanisms=tuple(order),
                               models=tuple(dict.fromkeys(m for p in parts
                                                          for m in p.opts.models)))
    return dataclasses.replace(first, opts=opts, doc=doc, rows=rows, measured=measured)
