"""How many hugepages to reserve, and why.

`count: auto` sizes the reservation from what the engine will map into
hugepages: the arena plus each model's planned memory (its `memory` key; a
model without one is taken to fit in the arena), plus headroom, rounded up
to whole pages. The plan is a function of its inputs: the spec, and for a
model whose `memory` is `auto` the converted model it names. Such a spec
is resolved first (resolve_model_memory: the figure the converter recorded
in OUT/<name>.aie, weights + the largest arena peak of the shapes it
planned, max_shapes among them), by whoever holds the converted models:
`invoke render --models OUT`, deploy after its convert step, a host's
provisioning from its release's models/. An unresolved `auto` is a
one-line error saying what to run, never a guess.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from engine.units import format_size

from hostspec.errors import SpecError


@dataclass(frozen=True)
class HugepagePlan:
    page_size: int  # bytes
    count: int  # pages to reserve in total
    per_node: dict[int, int]  # NUMA node -> pages; empty: the kernel spreads them
    reason: str  # how count was arrived at, for reports
    need_pages: int = field(default=0)  # pages the engine maps at start (what check-host requires free)


def _ceil_div(a: Fraction | int, b: int) -> int:
    return int(-(-Fraction(a) // b))


AUTO_HINT = ("run `invoke convert --out build/models`, then render with `--models build/models` "
             "(deploy converts first and does this itself)")


def engine_need(spec) -> tuple[int, list[str]]:
    """Bytes the engine maps into hugepages, with a line per contribution."""
    engine = spec.data["engine"]
    if not engine["arena"]["hugepages"]:
        return 0, ["engine.arena.hugepages is false"]
    total, parts = engine["arena"]["size"], [f"arena {format_size(engine['arena']['size'])}"]
    for i, model in enumerate(engine["models"]):
        memory = model["memory"]
        if memory == "auto":
            raise _unresolved(spec, i)
        if memory is not None:
            total += memory
            how = " (converted)" if model["name"] in spec.resolved_memory else ""
            parts.append(f"{model['name']} {format_size(memory)}{how}")
    return total, parts


def _unresolved(spec, i: int) -> SpecError:
    return SpecError([spec.problem(("engine", "models", i, "memory"),
                                   "auto is the converted model's planned memory, and no converted model was given",
                                   AUTO_HINT)])


def resolve_model_memory(spec, models_dir: str | Path | None):
    """The spec with each `memory: auto` replaced by the planned memory the
    converter recorded in models_dir/<name>.aie (engine.aie_format.
    planned_memory); the spec itself when no model asks or the arena takes
    no hugepages (memory is not counted then). A missing or unreadable
    converted model is a SpecError at that model's memory key."""
    autos = [i for i, m in enumerate(spec.data["engine"]["models"]) if m["memory"] == "auto"]
    if not autos or not spec.data["engine"]["arena"]["hugepages"]:
        return spec
    if models_dir is None:
        raise _unresolved(spec, autos[0])
    # Only here: reading a .aie needs numpy, which hostspec alone (rendering
    # and provisioning from the engine wheel without its dependencies) does not.
    from engine import aie_format
    from engine.errors import ModelFormatError

    data = copy.deepcopy(spec.data)
    resolved, problems = dict(spec.resolved_memory), []
    for i, model in enumerate(data["engine"]["models"]):
        if model["memory"] != "auto":
            continue
        path = Path(models_dir) / f"{model['name']}.aie"
        key = ("engine", "models", i, "memory")
        if not path.is_file():
            problems.append(spec.problem(key, f"auto needs the converted model {path}, which does not exist",
                                         AUTO_HINT.replace("build/models", str(models_dir))))
            continue
        try:
            model["memory"] = aie_format.planned_memory(path)
        except ModelFormatError as exc:
            problems.append(spec.problem(key, f"auto reads the converted model: {exc}",
                                         "convert it again (`invoke convert`)"))
            continue
        resolved[model["name"]] = str(path)
    if problems:
        raise SpecError(problems)
    return dataclasses.replace(spec, data=data, resolved_memory=resolved)


def hugepage_plan(spec) -> HugepagePlan:
    hp = spec.data["host"]["hugepages"]
    page = hp["size"]
    need, parts = engine_need(spec)
    need_pages = _ceil_div(need, page)
    if hp["count"] == "auto":
        want = Fraction(need) * (100 + Fraction(str(hp["headroom"]))) / 100
        count = _ceil_div(want, page)
        reason = (f"auto: {' + '.join(parts)} = {format_size(need)}, + {hp['headroom']}% headroom, "
                  f"in {format_size(page)} pages = {count}")
    else:
        count = hp["count"]
        reason = f"fixed: host.hugepages.count = {count} pages of {format_size(page)}"
    return HugepagePlan(page_size=page, count=count, per_node=dict(hp["per_node"]), reason=reason,
                        need_pages=min(need_pages, count) if hp["count"] != "auto" else need_pages)
