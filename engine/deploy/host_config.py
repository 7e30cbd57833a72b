"""The config step of a host install, run by the release's own venv python
(`venv/bin/python -P -m engine.deploy.host_config provision TREE ROOT [SPEC...]`
or `... rollback ROOT live|files`), where hostspec and its dependencies live;
engine.deploy.install, under the host's bare python3, cannot import them.

Prints one JSON line: what provision changed (or why it failed), or what
rollback restored. Exit 1 when provision failed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hostspec.__main__ import read_tree
from hostspec.errors import SpecError
from hostspec.hugepages import resolve_model_memory
from hostspec.loader import load_spec
from hostspec.provision import provision_tree, rollback
from hostspec.report import ProvisionError


def host_spec(tree_dir: Path, specs: list[Path]):
    """The release's spec, a model's memory: auto read from the release's
    converted models (TREE is RELEASE/rootfs, the models RELEASE/models:
    engine.deploy.bundle), so the live hugepage count is the rendered one."""
    return resolve_model_memory(load_spec(specs), tree_dir.parent / "models")


def provision(tree_dir: Path, root: Path, specs: list[Path]) -> tuple[int, dict]:
    """Install the rendered tree into root; with spec files (root is /), also
    the live kernel state they ask for."""
    try:
        spec = host_spec(tree_dir, specs) if specs else None
        report = provision_tree(read_tree(tree_dir), root, spec=spec, live=bool(specs))
    except (SpecError, ProvisionError, OSError) as exc:
        return 1, {"error": str(exc)}
    return 0, {"changed": report.count("changed"), "failed": [i.line() for i in report.items if i.status == "failed"],
               "summary": report.summary()}


def unprovision(root: Path, live: bool) -> dict:
    """Undo this run's provision on a host that has no release to fall back
    to: hostspec restores the newest backup set, the one provision just saved."""
    return {"summary": rollback(root, live=live).summary()}


def main(argv: list[str]) -> int:
    if argv[:1] == ["provision"] and len(argv) >= 3:
        code, result = provision(Path(argv[1]), Path(argv[2]), [Path(s) for s in argv[3:]])
    elif argv[:1] == ["rollback"] and len(argv) == 3 and argv[2] in ("live", "files"):
        code, result = 0, unprovision(Path(argv[1]), argv[2] == "live")
    else:
        print("usage: python -m engine.deploy.host_config provision TREE ROOT [SPEC...] | rollback ROOT live|files",
              file=sys.stderr)
        return 2
    print(json.dumps(result))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
