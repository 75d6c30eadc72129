"""``python -m pyrmq``: the ``pyrmq`` command."""

from pyrmq.cli.main import main

main(prog_name="pyrmq")
