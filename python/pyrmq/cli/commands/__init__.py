"""Subcommands of the ``pyrmq`` console command; each module registers one."""
