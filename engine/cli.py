"""`ai-engine` command line. Subcommands live in their own modules and are
listed in COMMANDS (name -> module); each module provides
`add_arguments(parser)` and `run(args) -> int`. Errors derived from
EngineError print as one line and exit 1 (or the error's own `exit_code`);
nothing else reaches the user as a traceback unless AIE_DEBUG=1.

Exit status: 0 done; 1 an error the message explains; 2 bad command line;
98 `serve` cannot listen on a configured address (port in use);
70 internal error (a bug: AIE_DEBUG=1 shows the traceback); 130 interrupted.
Output into a pipe whose reader went away (`ai-engine arena-dump --json | head`)
ends the command quietly with 0: the reader had what it wanted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from engine import __version__
from engine.errors import EngineError, missing_package, print_error

# name -> (module, one-line help). Modules are imported only when used, so
# `ai-engine --help` stays fast and a broken subcommand cannot break others.
COMMANDS: dict[str, tuple[str, str]] = {
    "isa": ("engine.commands.isa", "print the kernel ISA path this CPU selects"),
    "arena-dump": ("engine.commands.arena_dump", "create an arena and print its backing and statistics"),
    "convert": ("engine.commands.convert", "convert an ONNX model to a .aie file and print its planned memory"),
    "quantize": ("engine.commands.quantize", "quantize an ONNX model to int8 (QDQ ONNX) from calibration samples"),
    "serve": ("engine.commands.serve", "serve the models of an engine.yaml over HTTP (KServe v2) and TCP"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ai-engine", description="ai-engine inference engine")
    parser.add_argument("--version", action="version", version=f"ai-engine {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_module", None):
        parser.print_help()
        return 2
    try:
        code = int(importlib.import_module(args._module).run(args) or 0)
        sys.stdout.flush()  # a reader that left shows up here, where it is handled, not at exit
        return code
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except EngineError as exc:
        return print_error(exc, f"ai-engine {args.command}: error")
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - last line of defence for users
        if os.environ.get("AIE_DEBUG"):
            raise
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "engine").split(".")[0] not in ("engine", "hostspec"):
            # e.g. `convert` on a host, whose venv has no onnx; a module of ours missing is a bug
            return print_error(missing_package(exc, "this command"), f"ai-engine {args.command}: error")
        print(f"ai-engine {args.command}: internal error: {type(exc).__name__}: {exc} "
              "(set AIE_DEBUG=1 for a traceback)", file=sys.stderr)
        return 70


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of what is
    still buffered for the vanished reader raises nothing at exit (the
    recipe in Python's signal module documentation, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
