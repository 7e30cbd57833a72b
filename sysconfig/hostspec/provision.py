"""Install a rendered tree into ROOT and bring the live host in line: apply,
check (verify, changing nothing) and rollback — TuneD's apply / verify /
unapply over the files Ansible would template.

Order of an apply: pre-flight host check (live only) → plan → backup set of
everything about to change → files (atomic, see filesync) → live kernel
knobs, each read back → GRUB, systemd, service account. Nothing is written
before the plan and the backup exist, and a run with nothing to change writes
nothing at all.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from . import backups, live_kernel, live_system
from .filesync import atomic_remove, atomic_write, make_dirs, missing_dirs, plan_files, sha256, stale_temps, target_path
from .report import ItemResult, ProvisionError, ProvisionReport

__all__ = ["ItemResult", "ProvisionReport", "ProvisionError", "LiveTargets", "live_targets",
           "provision", "provision_tree", "rollback"]

# Rendered files whose change needs more than a file write (see render.py).
SYSCTL_CONF = "etc/sysctl.d/90-ai-engine.conf"
GRUB_DROPIN = "etc/default/grub.d/90-ai-engine.cfg"
SERVICE_UNIT = "etc/systemd/system/ai-engine.service"
LOCK_FILE = f"{backups.STATE_DIR}/lock"

PROC = Path("/proc")
SYS = Path("/sys")


@dataclass
class LiveTargets:
    """What the live host should look like, taken from a Spec."""

    sysctl: dict[str, str] = field(default_factory=dict)
    hugepage_size: int | str | None = None  # bytes or "2M"; None: leave the reservation alone
    hugepage_count: int = 0
    hugepage_per_node: dict = field(default_factory=dict)
    thp_enabled: str | None = None
    thp_defrag: str | None = None
    cmdline: list[str] = field(default_factory=list)
    user: str | None = None
    group: str | None = None

    def knobs(self, proc: Path) -> list[live_kernel.Knob]:
        knobs = live_kernel.sysctl_knobs(self.sysctl)
        # THP before the reservation: compaction for hugepages works better
        # once khugepaged is no longer collapsing pages behind it.
        knobs += live_kernel.thp_knobs(self.thp_enabled, self.thp_defrag)
        if self.hugepage_size is not None:
            knobs += live_kernel.hugepage_knobs(self.hugepage_size, self.hugepage_count, self.hugepage_per_node, proc)
        return knobs


def live_targets(spec) -> LiveTargets:
    from .hugepages import hugepage_plan
    from .render import desired_cmdline, desired_sysctl

    plan = hugepage_plan(spec)
    thp = spec.data["host"]["transparent_hugepage"]
    service = spec.data["service"]
    return LiveTargets(
        sysctl={k: live_kernel.normalize(v) for k, v in desired_sysctl(spec).items()},
        hugepage_size=plan.page_size,
        hugepage_count=int(plan.count),
        hugepage_per_node=dict(plan.per_node or {}),
        thp_enabled=thp.get("enabled"),
        thp_defrag=thp.get("defrag"),
        cmdline=list(desired_cmdline(spec)),
        user=service.get("user"),
        group=service.get("group") or service.get("user"),
    )


def is_live_root(root: Path) -> bool:
    return Path(root).resolve() == Path("/")


def _require_root(action: str) -> None:
    if os.geteuid() != 0:
        raise ProvisionError(
            f"{action} changes kernel settings, the boot config and system accounts and needs root "
            "(run it with sudo), or pass --root DIR to install the files into a directory")


@contextmanager
def _locked(root: Path):
    """One provision or rollback per ROOT at a time."""
    path = target_path(root, LOCK_FILE)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ProvisionError(f"another provision or rollback is running on {root} (lock {path})") from None
        yield


def _preflight(spec, proc: Path, sys: Path) -> list[ItemResult]:
    """Host problems (1G pages without pdpe1gb, a reservation larger than
    memory, unknown sysctl keys) stop a live run before anything changes."""
    from .errors import SpecError
    from .hostcheck import check_host

    problems = check_host(spec, proc=proc, sys=sys)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise SpecError(errors)
    return [ItemResult("host", p.path or "host", "note", str(p)) for p in problems]


def _cleanup_interrupted(tree: dict, root: Path, *, check: bool) -> list[ItemResult]:
    notes = []
    for temp in stale_temps(tree, root):
        if check:
            notes.append(ItemResult("file", str(temp), "note", "temp file of an interrupted run; the next apply removes it"))
        else:
            atomic_remove(temp)
            notes.append(ItemResult("file", str(temp), "note", "removed temp file of an interrupted run"))
    if not check:
        for staging in backups.remove_stale_staging(root):
            notes.append(ItemResult("file", str(staging), "note", "removed incomplete backup set of an interrupted run"))
    return notes


def _file_items(changes, *, check: bool) -> list[ItemResult]:
    items = []
    for change in changes:
        if not change.changed:
            items.append(ItemResult("file", change.relpath, "in-sync" if check else "unchanged"))
        elif check:
            items.append(ItemResult("file", change.relpath, "drift", change.describe(), change.unified_diff()))
    return items


def _system_steps(changed: set[str], targets: LiveTargets, root: Path, proc: Path, *, system: bool,
                  check: bool) -> tuple[list[ItemResult], bool]:
    """GRUB, systemd, cmdline and account steps; returns (items, reboot_required)."""
    items: list[ItemResult] = []
    reboot = False
    if GRUB_DROPIN in changed:
        reboot = not check
        if system:
            items.append(live_system.regenerate_grub(GRUB_DROPIN, targets.cmdline, check=check))
        else:
            items.append(ItemResult("grub", GRUB_DROPIN, "note", f"root {root} is not /: boot config not regenerated"))
    missing = live_kernel.cmdline_missing(targets.cmdline, proc)
    if missing is None:
        items.append(ItemResult("cmdline", "/proc/cmdline", "note", "unreadable: cannot tell whether the host was rebooted"))
    elif missing:
        status = "drift" if check else "note"
        items.append(ItemResult("cmdline", "/proc/cmdline", status,
                                f"not rebooted since cmdline change: running kernel lacks {' '.join(missing)}"))
    elif targets.cmdline:
        items.append(ItemResult("cmdline", "/proc/cmdline", "in-sync" if check else "unchanged", "all arguments present"))
    if SERVICE_UNIT in changed:
        if system:
            items.append(live_system.daemon_reload(SERVICE_UNIT, proc, check=check))
        else:
            items.append(ItemResult("systemd", SERVICE_UNIT, "note", f"root {root} is not /: daemon-reload skipped"))
    if targets.user:
        if system:
            items += live_system.ensure_account(targets.user, targets.group or targets.user, check=check)
        elif not check:
            items.append(live_system.account_in_root(targets.user, targets.group or targets.user, root))
    return items, reboot


def provision_tree(tree: dict, root: Path, *, check: bool = False, live: bool | None = None, spec=None,
                   proc: Path = PROC, sys: Path = SYS) -> ProvisionReport:
    """Install `tree` ({relpath: RenderedFile}) into ROOT. live=None means
    live only when ROOT is "/"; live state comes from `spec` (required then).
    proc/sys: where the live kernel knobs are read and written."""
    root = Path(root).resolve()
    live = is_live_root(root) if live is None else live
    for relpath in tree:
        if relpath == backups.STATE_DIR or relpath.startswith(backups.STATE_DIR + "/"):
            raise ProvisionError(f"rendered path {relpath!r}: inside {backups.STATE_DIR}, which holds provision's own "
                                 "backups; was --tree pointed at a provisioned root instead of a rendered tree?")
    if live and spec is None:
        raise ProvisionError("live provisioning needs the spec (--spec FILE): the rendered files alone do not say "
                             "which hugepages, THP mode and service account to apply; or pass --no-live")
    if live and not check:
        _require_root(f"live provisioning of {root}")
    targets = live_targets(spec) if spec is not None else None
    report = ProvisionReport()
    if spec is not None:
        report.items += [ItemResult("host", w.path or "spec", "note", str(w)) for w in spec.warnings]
    if live:
        report.items += _preflight(spec, proc, sys)
    # The real system steps (update-grub, systemctl, useradd) act on this
    # machine, so they only run when the files went into its real root.
    system = live and root == Path("/")

    if check:
        return _check(tree, root, targets, report, proc, sys, live=live, system=system)
    return _apply(tree, root, targets, report, proc, sys, live=live, system=system)


def _check(tree, root, targets, report, proc, sys, *, live: bool, system: bool) -> ProvisionReport:
    changes = plan_files(tree, root)
    report.items += _cleanup_interrupted(tree, root, check=True)
    report.items += _file_items(changes, check=True)
    if live:
        report.items += [live_kernel.check_knob(k, proc, sys) for k in targets.knobs(proc)]
        changed = {c.relpath for c in changes if c.changed}
        items, _ = _system_steps(changed, targets, root, proc, system=system, check=True)
        report.items += items
    return report


def _live_before(knobs, proc: Path, sys: Path) -> list[dict]:
    """The current value of every knob about to change, for the backup set."""
    before = []
    for knob in knobs:
        have = live_kernel.read_knob(knob, proc, sys)
        if have is not None and have != knob.want:
            before.append({"kind": knob.kind, "name": knob.name, "base": knob.base, "rel": knob.rel, "value": have})
    return before


def _write_files(pending, report: ProvisionReport) -> set[str]:
    written = set()
    for change in pending:
        try:
            atomic_write(change.target, change.new, change.new_mode, uid=change.old_uid, gid=change.old_gid)
        except OSError as exc:
            report.items.append(ItemResult("file", change.relpath, "failed", f"{change.target}: {exc.strerror}"))
            continue
        written.add(change.relpath)
        report.items.append(ItemResult("file", change.relpath, "changed", change.describe()))
    return written


def _apply(tree, root, targets, report, proc, sys, *, live: bool, system: bool) -> ProvisionReport:
    knobs = targets.knobs(proc) if live else []
    # The lock lives in ROOT's state directory; a run with nothing to write
    # must not create even that, so look before taking it.
    has_work = (any(c.changed for c in plan_files(tree, root)) or stale_temps(tree, root)
                or backups.has_stale_staging(root) or _live_before(knobs, proc, sys))
    if has_work:
        root.mkdir(parents=True, exist_ok=True)
    with _locked(root) if has_work else nullcontext():
        report.items += _cleanup_interrupted(tree, root, check=False)
        changes = plan_files(tree, root)
        pending = [c for c in changes if c.changed]
        # Everything about to change is saved before the first write.
        live_before = _live_before(knobs, proc, sys)
        dirs = missing_dirs([c.target for c in pending], root)
        if pending or live_before:
            report.backup_set = backups.create_set(root, pending, [str(d.relative_to(root)) for d in dirs], live_before)
        report.items += _file_items(changes, check=False)
        make_dirs(dirs)
        written = _write_files(pending, report)
        if live:
            report.items += [live_kernel.apply_knob(k, proc, sys)[0] for k in knobs]
            items, report.reboot_required = _system_steps(written, targets, root, proc, system=system, check=False)
            report.items += items
        elif targets is not None and targets.user:
            report.items.append(live_system.account_in_root(targets.user, targets.group or targets.user, root))
    return report


def provision(spec, root: Path = Path("/"), *, check: bool = False, live: bool | None = None,
              proc: Path = PROC, sys: Path = SYS) -> ProvisionReport:
    """Render `spec` and install it into ROOT (see provision_tree)."""
    from .render import render_tree

    return provision_tree(render_tree(spec), root, check=check, live=live, spec=spec, proc=proc, sys=sys)


def _restore_files(backup: backups.BackupSet, root: Path, report: ProvisionReport) -> set[str]:
    restored = set()
    for entry in backup.manifest["files"]:
        relpath = entry["path"]
        target = target_path(root, relpath)
        current = target.read_bytes() if target.is_file() else None
        edited = current is not None and sha256(current) != entry["new_sha256"]
        note = " (local edits made since that provision are discarded)" if edited else ""
        if not entry["existed"]:
            if atomic_remove(target):
                report.items.append(ItemResult("file", relpath, "changed", "removed: it did not exist before" + note))
                restored.add(relpath)
            else:
                report.items.append(ItemResult("file", relpath, "unchanged", "already absent"))
            continue
        saved = backup.saved_copy(relpath).read_bytes()
        if sha256(saved) != entry["sha256"]:
            raise ProvisionError(f"{backup.saved_copy(relpath)}: saved copy does not match its sha256 in "
                                 f"{backup.path / backups.MANIFEST}; the backup set is damaged, nothing more restored")
        if current == saved and (target.stat().st_mode & 0o7777) == entry["mode"]:
            report.items.append(ItemResult("file", relpath, "unchanged", "already as saved"))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, saved, entry["mode"], uid=entry.get("uid"), gid=entry.get("gid"))
        report.items.append(ItemResult("file", relpath, "changed", f"restored from {backup.path.name}" + note))
        restored.add(relpath)
    for rel in sorted(backup.manifest.get("created_dirs", []), key=lambda d: -len(Path(d).parts)):
        directory = target_path(root, rel)
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
    return restored


def _restore_live(backup: backups.BackupSet, root: Path, proc: Path, sys: Path) -> list[live_kernel.Knob]:
    """The live values to put back: the restored sysctl.d file, then the
    values recorded before that provision changed them (those win: they are
    what the host really had)."""
    knobs: dict[tuple[str, str], live_kernel.Knob] = {}
    conf = target_path(root, SYSCTL_CONF)
    if conf.is_file():
        for knob in live_kernel.sysctl_knobs(live_kernel.parse_sysctl_conf(conf.read_text())):
            knobs[(knob.base, knob.rel)] = knob
    for rec in backup.manifest.get("live_before", []):
        knobs[(rec["base"], rec["rel"])] = live_kernel.Knob(rec["kind"], rec["name"], rec["base"], rec["rel"], rec["value"])
    return list(knobs.values())


def rollback(root: Path, *, live: bool | None = None, spec=None, proc: Path = PROC, sys: Path = SYS) -> ProvisionReport:
    """Restore the newest backup set not yet rolled back, re-apply live state
    when live, and mark the set consumed: a second rollback goes one further."""
    root = Path(root).resolve()
    live = is_live_root(root) if live is None else live
    if live:
        _require_root(f"rolling back {root}")
    report = ProvisionReport(rolled_back=True)
    if not backups.backup_root(root).is_dir():
        report.items.append(ItemResult("file", str(root), "note", "nothing to roll back: no backup sets"))
        return report
    with _locked(root):
        backup = backups.newest_unconsumed(root)
        if backup is None:
            report.items.append(ItemResult("file", str(root), "note", "nothing to roll back: every backup set is consumed"))
            return report
        report.backup_set = backup.path
        restored = _restore_files(backup, root, report)
        if live:
            report.items += [live_kernel.apply_knob(k, proc, sys)[0] for k in _restore_live(backup, root, proc, sys)]
            system = root == Path("/")
            cmdline = live_targets(spec).cmdline if spec is not None else []
            if GRUB_DROPIN in restored:
                report.reboot_required = True
                if system:
                    report.items.append(live_system.regenerate_grub(GRUB_DROPIN, cmdline, check=False))
            if SERVICE_UNIT in restored and system:
                report.items.append(live_system.daemon_reload(SERVICE_UNIT, proc, check=False))
        backups.mark_consumed(backup)
    return report
