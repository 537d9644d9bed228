"""An older gradwire, importable beside this checkout's, for side-by-side benchmarks.

``old_gradwire(rev, into)`` checks ``rev`` out with ``git worktree add --detach`` and lays out a
folder whose ``gradwire`` package is that revision's, collector/, aligner/ and replay/ linked in
as pyproject's package-dir maps them. Run ``python -m gradwire`` with ``PYTHONPATH`` set to the
returned folder (``old_env``), from a working directory outside this checkout (``python -m``
and ``-c`` put the working directory first on the path), and the older code runs, with the
same interpreter and packages.
``drop_old_gradwire`` removes the worktree again; ``older_gradwire`` does both around a block.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBPACKAGES = ("collector", "aligner", "replay")  # pyproject's package-dir: gradwire.<name>


def old_gradwire(rev: str, into: Path) -> Path:
    """A folder to put on PYTHONPATH for gradwire at ``rev`` (into/src checked out, into/site)."""
    src, site = into / "src", into / "site" / "gradwire"
    proc = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(src), rev],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"git worktree add {rev}: {proc.stderr.strip()}")
    site.mkdir(parents=True)
    for item in (src / "gradwire").iterdir():
        (site / item.name).symlink_to(item)
    for name in SUBPACKAGES:
        (site / name).symlink_to(src / name)
    return site.parent


def old_env(site: Path) -> dict[str, str]:
    """This process's environment with ``site`` first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    return env


def drop_old_gradwire(into: Path) -> None:
    """Remove the worktree ``old_gradwire`` made under ``into``."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(into / "src")],
                   capture_output=True)


@contextmanager
def older_gradwire(rev: str | None) -> Iterator[tuple[dict[str, str], Path] | None]:
    """Within the block, gradwire at ``rev`` as (environment, working directory) to run
    ``python -m gradwire`` with (``old_env``; the worktree removed afterwards); None for no
    ``rev``."""
    if not rev:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="gradwire-at-") as tmp:
        site = old_gradwire(rev, Path(tmp))
        try:
            yield old_env(site), site
        finally:
            drop_old_gradwire(Path(tmp))
