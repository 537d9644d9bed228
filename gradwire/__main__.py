"""``python -m gradwire`` runs the same command as the ``gradwire`` console script."""

import sys

from gradwire.console import main

sys.exit(main())
