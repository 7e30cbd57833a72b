"""`python -m hostspec provision ...`: apply a rendered tree without invoke —
what a remote host runs on a tree shipped to it in a bundle.

Exit status: 0 done / in sync, 1 an error or a failed item, 2 drift found by
--check. Errors print one line each, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path

from engine.errors import EngineError, print_error
from .report import ProvisionError, ProvisionReport


def read_tree(directory: Path) -> dict:
    """A rendered tree on disk (as `invoke render` writes it) -> {relpath: RenderedFile}."""
    from .render import RenderedFile

    if not directory.is_dir():
        raise ProvisionError(f"--tree {directory}: not a directory (expected a tree written by `invoke render`)")
    tree = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            st = path.lstat()
            if not stat.S_ISREG(st.st_mode):
                raise ProvisionError(f"--tree {directory}: {path} is not a regular file; a rendered tree holds only files")
            relpath = path.relative_to(directory).as_posix()
            tree[relpath] = RenderedFile(relpath, path.read_bytes(), stat.S_IMODE(st.st_mode))
    if not tree:
        raise ProvisionError(f"--tree {directory}: no files in it; render first (invoke render --out {directory})")
    return tree


def print_report(report: ProvisionReport, *, check: bool) -> int:
    for line in report.lines():
        print(line)
    if report.failed:
        return 1
    return 2 if check and report.drifted else 0


def run_provision(args: argparse.Namespace) -> int:
    from .provision import provision_tree, rollback

    spec = None
    if args.spec:
        from .hugepages import resolve_model_memory
        from .loader import load_spec

        spec = resolve_model_memory(load_spec([Path(s) for s in args.spec]), args.models)
    root = Path(args.root)
    if args.rollback:
        if args.check:
            raise ProvisionError("--rollback and --check cannot be combined: rollback restores, check only compares")
        return print_report(rollback(root, live=args.live, spec=spec), check=False)
    if args.tree:
        tree = read_tree(Path(args.tree))
    elif spec is not None:
        from .render import render_tree

        tree = render_tree(spec, role=args.role)
    else:
        raise ProvisionError("nothing to provision: pass --tree DIR (a rendered tree) or --spec FILE")
    report = provision_tree(tree, root, check=args.check, live=args.live, spec=spec)
    return print_report(report, check=args.check)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hostspec", description="ai-engine host spec tools")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    prov = commands.add_parser(
        "provision", help="install a rendered tree into ROOT and apply live state",
        description="Install a rendered tree into ROOT: only changed files, atomically, after saving a backup set "
                    "under ROOT/var/lib/ai-engine/provision/backups. With ROOT / (or --live) also apply sysctl, "
                    "hugepages, THP, GRUB, systemd and the service account, and read them back.")
    prov.add_argument("--tree", metavar="DIR", help="rendered tree to install (as written by `invoke render --out DIR`)")
    prov.add_argument("--spec", metavar="FILE", action="append",
                      help="spec file(s), later ones overlaid on earlier; needed for live state, renders the tree "
                           "when --tree is not given")
    prov.add_argument("--models", metavar="DIR", default=None,
                      help="converted models (`invoke convert --out DIR`) that a model's memory: auto is read from")
    prov.add_argument("--role", choices=("engine", "balancer"), default=None,
                      help="render only the files of a host with this role (default: every file the spec describes)")
    prov.add_argument("--root", metavar="ROOT", default="/", help="where to install (default: /, the live system)")
    prov.add_argument("--check", action="store_true",
                      help="change nothing; print what differs (diffs, live values); exit 2 on drift, 0 in sync")
    prov.add_argument("--rollback", action="store_true",
                      help="restore the newest backup set not yet rolled back (and its live values when live)")
    live = prov.add_mutually_exclusive_group()
    live.add_argument("--live", dest="live", action="store_const", const=True, default=None,
                      help="apply live kernel state even when ROOT is not / (e.g. inside a namespace)")
    live.add_argument("--no-live", dest="live", action="store_const", const=False,
                      help="install files only, even when ROOT is /")
    prov.set_defaults(func=run_provision)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (EngineError, OSError) as exc:  # SpecError, ProvisionError, unreadable files
        return print_error(exc)
    except KeyboardInterrupt:
        # Every file written so far was replaced whole; the backup set is complete.
        print("error: interrupted; files are each wholly old or new, run again or --rollback", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
