"""The ``pyrmq`` console command: a click group that subcommands register on."""

import click

from pyrmq import __version__
from pyrmq.cli.commands.admin import admin
from pyrmq.cli.commands.bench import bench
from pyrmq.cli.commands.serve import broker, namesrv, serve
from pyrmq.cli.commands.store_demo import store_demo


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="pyrmq")
def main() -> None:
    """Run and inspect a pyrmq broker and its store."""


main.add_command(store_demo)
main.add_command(serve)
main.add_command(namesrv)
main.add_command(broker)
main.add_command(bench)
main.add_command(admin)

if __name__ == "__main__":
    main()
