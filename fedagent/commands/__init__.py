"""fedagent subcommands: one module per group, argument parsing only."""
