"""`invoke render`: spec files -> rendered tree under an output directory.
Prints every problem on one line and returns 1 instead of raising, so the
task never shows a traceback for a bad spec."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence, TextIO

from hostspec.errors import SpecError
from hostspec.hugepages import hugepage_plan, resolve_model_memory
from hostspec.loader import load_spec
from hostspec.render import render_tree, source_names, write_tree


def run_render(specs: Sequence[Path | str] | None, out_dir: Path | str, *, models_dir: Path | str | None = None,
               stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr) -> int:
    """Render `specs` into `out_dir`; 0 on success, 1 on a bad spec or output dir.
    models_dir: the converted models (OUT of `invoke convert`) a model's
    `memory: auto` is read from."""
    out = Path(out_dir)
    if out.resolve() == Path("/"):
        print("render: refusing to write into / (render builds a tree to inspect; "
              "install it with `invoke provision`)", file=stderr)
        return 1
    try:
        spec = resolve_model_memory(load_spec(specs), models_dir)
    except SpecError as exc:
        for problem in exc.problems:
            print(problem, file=stderr)
        print(f"render: {len(exc.problems)} problem(s) in the spec; nothing written", file=stderr)
        return 1
    for warning in spec.warnings:
        print(warning, file=stderr)
    tree = render_tree(spec)
    try:
        write_tree(tree, out)
    except OSError as exc:
        print(f"render: cannot write {exc.filename or out}: {exc.strerror or exc}", file=stderr)
        return 1
    print(f"rendered {', '.join(source_names(spec))} (sha256 {spec.digest[:12]}) into {out}/", file=stdout)
    for rel, f in sorted(tree.items()):
        print(f"  {rel}  ({len(f.content)} bytes, mode {f.mode:o})", file=stdout)
    print(f"hugepages: {hugepage_plan(spec).reason}", file=stdout)
    print(f"{len(tree)} files written", file=stdout)
    return 0
