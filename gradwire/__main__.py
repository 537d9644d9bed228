"""``python -m gradwire`` runs the same command as the ``gradwire`` console script."""

from gradwire.cli import run

run()
