"""``python -m deltalog``: the same as the ``deltalog`` command."""

from deltalog.cli import run

run()
