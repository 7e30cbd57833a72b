"""`ai-engine serve --config FILE [--root DIR]`: serve every model in the config
until SIGTERM (what the systemd unit runs)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, metavar="FILE", help="engine.yaml (rendered by provisioning)")
    parser.add_argument("--root", metavar="DIR", default=None,
                        help="prefix every absolute path in the config with DIR (a deployment into a local root)")


def run(args: argparse.Namespace) -> int:
    from engine.server.config import load_config
    from engine.server.server import run_server

    config = load_config(args.config, args.root)
    if config.arena.mlock:
        from engine.arena import check_mlock

        # Before any model loads: a refusal is a start-up error that says what
        # to set, not a failed first request later.
        check_mlock(config.arena.size)
    return run_server(config, config_path=args.config, root=args.root)
