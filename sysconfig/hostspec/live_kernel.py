"""Live kernel state: sysctl, hugepage reservations, THP — apply, read back.

Every knob is a file under /proc/sys or /sys; the roots are parameters so a
test can point them at a network namespace's /proc or at a scratch copy.
Each knob is written, then read back, because the kernel may refuse a value
(EINVAL), clamp it, or — for hugepages — reserve fewer pages than asked when
memory is fragmented; the report says what the kernel actually did. The value
read before writing is returned so a backup set can restore it (tuned's
apply / verify / unapply).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .report import ItemResult

THP_DIR = "kernel/mm/transparent_hugepage"
# vm.nr_hugepages is driven by the hugepage plan (with per-node and 1G
# support); letting a sysctl entry write it too would fight the plan.
HUGEPAGE_SYSCTLS = ("vm.nr_hugepages", "vm.nr_hugepages_mempolicy", "vm.nr_overcommit_hugepages")


@dataclass(frozen=True)
class Knob:
    """One live value: where it lives, what the spec wants."""

    kind: str  # sysctl | hugepages | thp
    name: str  # what the operator reads: "vm.nr_hugepages", "net.core.somaxconn"
    base: str  # "proc" or "sys": which root `rel` is under
    rel: str
    want: str

    def path(self, proc: Path, sys: Path) -> Path:
        return (proc if self.base == "proc" else sys) / self.rel


def normalize(value: object) -> str:
    """sysctl prints multi-value keys tab-separated; compare by words."""
    return " ".join(str(value).split())


def sysctl_rel(key: str) -> str:
    # sysctl(8): dots separate levels, a slash stands for a dot inside a name
    # (net.ipv4.conf.eth0/100.rp_filter) — swap the two.
    return "sys/" + key.translate(str.maketrans("./", "/."))


def read_knob(knob: Knob, proc: Path, sys: Path) -> str | None:
    try:
        raw = knob.path(proc, sys).read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if knob.kind == "thp":
        # "always [madvise] never": the bracketed word is the active mode.
        match = re.search(r"\[([^\]]+)\]", raw)
        return match.group(1) if match else normalize(raw)
    return normalize(raw)


def write_knob(knob: Knob, value: str, proc: Path, sys: Path) -> None:
    with open(knob.path(proc, sys), "w") as handle:
        handle.write(value + "\n")


def page_size_kb(page_size: int | str) -> int:
    if isinstance(page_size, str):
        match = re.fullmatch(r"(\d+)\s*([KMG])i?B?", page_size.strip(), re.IGNORECASE)
        if not match:
            raise ValueError(f"hugepage size {page_size!r}: expected bytes or e.g. 2M, 1G")
        return int(match.group(1)) * {"K": 1, "M": 1024, "G": 1024 * 1024}[match.group(2).upper()]
    return page_size // 1024


def default_hugepage_kb(proc: Path) -> int | None:
    try:
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("Hugepagesize:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def sysctl_knobs(desired: dict) -> list[Knob]:
    return [
        Knob("sysctl", key, "proc", sysctl_rel(key), normalize(value))
        for key, value in sorted(desired.items())
        if key not in HUGEPAGE_SYSCTLS
    ]


def hugepage_knobs(page_size: int | str, count: int, per_node: dict | None, proc: Path) -> list[Knob]:
    kb = page_size_kb(page_size)
    pool = f"hugepages-{kb}kB"
    if per_node:
        return [
            Knob("hugepages", f"node{int(node)} {pool}", "sys",
                 f"devices/system/node/node{int(node)}/hugepages/{pool}/nr_hugepages", str(int(n)))
            for node, n in sorted(per_node.items(), key=lambda kv: int(kv[0]))
        ]
    name = "vm.nr_hugepages" if default_hugepage_kb(proc) == kb else f"{pool}/nr_hugepages"
    return [Knob("hugepages", name, "sys", f"kernel/mm/hugepages/{pool}/nr_hugepages", str(int(count)))]


def thp_knobs(enabled: str | None, defrag: str | None) -> list[Knob]:
    knobs = []
    if enabled is not None:
        knobs.append(Knob("thp", "transparent_hugepage.enabled", "sys", f"{THP_DIR}/enabled", str(enabled)))
    if defrag is not None:
        knobs.append(Knob("thp", "transparent_hugepage.defrag", "sys", f"{THP_DIR}/defrag", str(defrag)))
    return knobs


def check_knob(knob: Knob, proc: Path, sys: Path) -> ItemResult:
    have = read_knob(knob, proc, sys)
    if have is None:
        return ItemResult(knob.kind, knob.name, "drift", f"want {knob.want}, but {knob.path(proc, sys)} does not exist")
    if have == knob.want:
        return ItemResult(knob.kind, knob.name, "in-sync", f"{knob.want}")
    return ItemResult(knob.kind, knob.name, "drift", f"want {knob.want}, have {have}")


def apply_knob(knob: Knob, proc: Path, sys: Path) -> tuple[ItemResult, str | None]:
    """Write the wanted value when it differs and read it back. Returns the
    result and the value found before (None when the knob does not exist)."""
    path = knob.path(proc, sys)
    before = read_knob(knob, proc, sys)
    if before is None:
        return ItemResult(knob.kind, knob.name, "failed", f"{path} does not exist on this kernel"), None
    if before == knob.want:
        return ItemResult(knob.kind, knob.name, "unchanged", knob.want), before
    try:
        write_knob(knob, knob.want, proc, sys)
    except OSError as exc:
        return ItemResult(knob.kind, knob.name, "failed",
                          f"kernel refused {knob.want} ({exc.strerror}); still {before}"), before
    after = read_knob(knob, proc, sys)
    if after == knob.want:
        return ItemResult(knob.kind, knob.name, "changed", f"{before} -> {after}"), before
    if knob.kind == "hugepages" and after is not None and after.isdigit() and int(after) < int(knob.want):
        detail = (f"kernel reserved {after} of {knob.want} pages (was {before}): memory is fragmented or short; "
                  "reserve at boot (the GRUB drop-in does) or retry after `echo 1 > /proc/sys/vm/compact_memory`")
        return ItemResult(knob.kind, knob.name, "failed", detail), before
    return ItemResult(knob.kind, knob.name, "failed", f"wrote {knob.want}, kernel reads back {after} (was {before})"), before


def restore_knob(kind: str, name: str, base: str, rel: str, value: str, proc: Path, sys: Path) -> ItemResult:
    """Put back a value recorded in a backup set."""
    result, _ = apply_knob(Knob(kind, name, base, rel, value), proc, sys)
    return result


def cmdline_missing(wanted: list[str], proc: Path) -> list[str] | None:
    """Wanted kernel arguments absent from the running kernel's command line
    (None when /proc/cmdline cannot be read)."""
    try:
        running = set((proc / "cmdline").read_text().split())
    except OSError:
        return None
    return [arg for arg in wanted if arg not in running]


def parse_sysctl_conf(text: str) -> dict[str, str]:
    """`key = value` lines of a sysctl.d file (sysctl.d(5)); a leading '-'
    only means "ignore errors" and is dropped."""
    values = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        key, value = line.split("=", 1)
        values[key.strip().lstrip("-")] = normalize(value)
    return values
