"""How many hugepages to reserve, and why.

`count: auto` sizes the reservation from what the engine will map into
hugepages: the arena plus each model's planned memory (its `memory` key; a
model without one is taken to fit in the arena), plus headroom, rounded up
to whole pages. Only the spec is read — never a build artifact — so the
plan, and everything rendered from it, is a function of the spec alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from engine.units import format_size


@dataclass(frozen=True)
class HugepagePlan:
    page_size: int  # bytes
    count: int  # pages to reserve in total
    per_node: dict[int, int]  # NUMA node -> pages; empty: the kernel spreads them
    reason: str  # how count was arrived at, for reports
    need_pages: int = field(default=0)  # pages the engine maps at start (what check-host requires free)


def _ceil_div(a: Fraction | int, b: int) -> int:
    return int(-(-Fraction(a) // b))


def engine_need(spec) -> tuple[int, list[str]]:
    """Bytes the engine maps into hugepages, with a line per contribution."""
    engine = spec.data["engine"]
    if not engine["arena"]["hugepages"]:
        return 0, ["engine.arena.hugepages is false"]
    total, parts = engine["arena"]["size"], [f"arena {format_size(engine['arena']['size'])}"]
    for model in engine["models"]:
        if model["memory"] is not None:
            total += model["memory"]
            parts.append(f"{model['name']} {format_size(model['memory'])}")
    return total, parts


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
