"""The host-side command line, run from inside an extracted bundle with the
host's bare python3 (stdlib only):

    cd ROOT/opt/ai-engine/releases/<version>
    python3 -m engine.deploy.remote install  --root ROOT [--health-timeout S] [--keep N] [--check-host MODE]
                                              [--venv-cache DIR]
    python3 -m engine.deploy.remote rollback --root ROOT [--to VERSION]
    python3 -m engine.deploy.remote stop     --root ROOT
    python3 -m engine.deploy.remote status   --root ROOT
    python3 -m engine.deploy.remote logs     --root ROOT [--lines N]

Progress goes to stderr. The last line on stdout is `AIE-RESULT <json>`,
which the deployer parses; exit status 0 when the operation succeeded, 1
when it failed (the JSON says why), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.deploy import DeployError, install, supervise
from engine.deploy.service import CHECK_HOST_MODES

RESULT_PREFIX = "AIE-RESULT "
HERE_RELEASE = Path(__file__).resolve().parents[2]  # the release this copy of the code came with


def _settings(args: argparse.Namespace) -> install.Settings:
    return install.Settings(health_timeout_s=args.health_timeout, stop_timeout_s=args.stop_timeout,
                            keep_releases=args.keep, check_host=args.check_host)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m engine.deploy.remote",
                                     description="ai-engine host-side deploy operations (run from a release directory)")
    sub = parser.add_subparsers(dest="op", required=True, metavar="OP")
    for name, text in (("install", "install this release, activate it, start, verify; roll back on failure"),
                       ("rollback", "activate the previous release (or --to VERSION)"),
                       ("stop", "stop the engine (SIGTERM, SIGKILL after --stop-timeout)"),
                       ("status", "active release, pid, health, uptime"),
                       ("logs", "print the engine log's last lines")):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--root", required=True, help="the host root the engine is deployed under (/ on a real host)")
        p.add_argument("--health-timeout", type=float, default=60.0, help="seconds a release has to become ready")
        p.add_argument("--stop-timeout", type=float, default=30.0, help="seconds between SIGTERM and SIGKILL")
        p.add_argument("--keep", type=int, default=3, help="releases kept for rollback")
        p.add_argument("--check-host", choices=CHECK_HOST_MODES, default="auto",
                       help="before a supervised start, a failing libexec/check-host stops it (enforce) or is "
                            "reported (warn); auto: enforce only when --root is /")
        if name == "install":
            p.add_argument("--release", default=str(HERE_RELEASE), help="the extracted release (default: this one)")
            p.add_argument("--python", default=sys.executable, help="interpreter that builds the release venv")
            p.add_argument("--venv-cache", default=None,
                           help="directory of venvs kept by wheel set: a new root links one in instead of pip")
        if name == "rollback":
            p.add_argument("--to", default=None, help="release version to activate (default: the previous one)")
        if name == "logs":
            p.add_argument("--lines", type=int, default=50, help="how many lines")
    return parser


def run(args: argparse.Namespace) -> tuple[int, dict]:
    root = Path(args.root)
    if args.op == "install":
        out = install.install(root, Path(args.release), _settings(args), python=args.python,
                              venv_cache=Path(args.venv_cache) if args.venv_cache else None)
    elif args.op == "rollback":
        out = install.rollback(root, _settings(args), to=args.to)
    elif args.op == "stop":
        out = install.stop(root, _settings(args))
    elif args.op == "status":
        return 0, install.status(root)
    else:
        lines = supervise.log_tail(root, args.lines)
        if lines:
            print("\n".join(lines))
        return 0, {"lines": len(lines)}
    return (0 if out.ok else 1), json.loads(out.to_json())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code, result = run(args)
    except DeployError as exc:
        code, result = 1, {"status": "failed", "reason": str(exc)}
    except OSError as exc:
        code, result = 1, {"status": "failed", "reason": f"{exc.filename or ''}: {exc.strerror or exc}"}
    print(RESULT_PREFIX + json.dumps(result, sort_keys=True), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
