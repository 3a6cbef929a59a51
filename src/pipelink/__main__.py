"""``python -m pipelink``: the same as the ``pipelink`` command."""

from .cli import _entry

_entry()
