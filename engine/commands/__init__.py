"""One module per `ai-engine` subcommand (see engine.cli.COMMANDS)."""
