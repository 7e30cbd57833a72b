"""--rollback: restore the newest backup set, remove files that did not exist
before, mark the set consumed so the next rollback goes one further back."""

from __future__ import annotations

import json

import pytest
from provision_support import Rendered, seeded_tree, snapshot

from hostspec import backups
from hostspec.provision import provision_tree, rollback
from hostspec.report import ProvisionError


def contents(root):
    return {rel: (data, mode) for rel, (data, mode, _) in snapshot(root).items()}


def test_rollback_walks_back_one_set_at_a_time(tmp_path):
    a = seeded_tree(11, version="a")
    b = seeded_tree(11, version="b")
    b["etc/aie-test/only-in-b.conf"] = Rendered("etc/aie-test/only-in-b.conf", b"b only\n", 0o600)
    provision_tree(a, tmp_path, live=False)
    state_a = contents(tmp_path)
    provision_tree(b, tmp_path, live=False)
    assert contents(tmp_path) != state_a

    first = rollback(tmp_path, live=False)
    assert contents(tmp_path) == state_a
    assert not (tmp_path / "etc/aie-test/only-in-b.conf").exists()
    assert first.summary() == f"{len(b)} changed, 0 unchanged"

    second = rollback(tmp_path, live=False)
    assert contents(tmp_path) == {}
    # Directories the first provision created are gone again; ROOT keeps
    # only the provision state (backups, lock).
    assert sorted(p.name for p in tmp_path.iterdir()) == ["var"]
    assert second.backup_set.name.endswith("-0001")

    third = rollback(tmp_path, live=False)
    assert [i.detail for i in third.items] == ["nothing to roll back: every backup set is consumed"]
    assert all(s.consumed for s in backups.list_sets(tmp_path))


def test_rollback_of_a_fresh_root_says_there_is_nothing(tmp_path):
    report = rollback(tmp_path, live=False)
    assert report.summary() == "0 changed, 0 unchanged, 1 note"
    assert report.items[0].detail == "nothing to roll back: no backup sets"


def test_hand_edit_is_detected_then_rollback_restores_the_previous_provision(tmp_path):
    a = seeded_tree(12, version="a")
    b = seeded_tree(12, version="b")
    provision_tree(a, tmp_path, live=False)
    state_a = contents(tmp_path)
    provision_tree(b, tmp_path, live=False)
    rel = sorted(b)[1]
    (tmp_path / rel).write_bytes(b"edited by hand\n")

    check = provision_tree(b, tmp_path, check=True, live=False)
    (drift,) = [i for i in check.items if i.status == "drift"]
    assert drift.name == rel and "-edited by hand" in drift.diff

    report = rollback(tmp_path, live=False)
    assert contents(tmp_path) == state_a
    (edited,) = [i for i in report.items if i.name == rel]
    assert "local edits made since that provision are discarded" in edited.detail


def test_interrupted_rollback_can_be_rerun(tmp_path):
    a, b = seeded_tree(13, version="a"), seeded_tree(13, version="b")
    provision_tree(a, tmp_path, live=False)
    state_a = contents(tmp_path)
    provision_tree(b, tmp_path, live=False)
    # Simulate a rollback killed after restoring one file: the set is not yet
    # consumed, so running rollback again finishes the job.
    newest = backups.newest_unconsumed(tmp_path)
    rel = newest.manifest["files"][0]["path"]
    (tmp_path / rel).write_bytes(newest.saved_copy(rel).read_bytes())
    report = rollback(tmp_path, live=False)
    assert contents(tmp_path) == state_a
    assert report.count("unchanged") == 1 and report.count("changed") == len(a) - 1


def test_a_damaged_backup_copy_is_refused(tmp_path):
    a, b = seeded_tree(14, version="a"), seeded_tree(14, version="b")
    provision_tree(a, tmp_path, live=False)
    report = provision_tree(b, tmp_path, live=False)
    manifest = json.loads((report.backup_set / backups.MANIFEST).read_text())
    rel = manifest["files"][0]["path"]
    (report.backup_set / "files" / rel).write_bytes(b"bit rot\n")
    with pytest.raises(ProvisionError, match="saved copy does not match its sha256"):
        rollback(tmp_path, live=False)
    assert not backups.newest_unconsumed(tmp_path).consumed


def test_incomplete_backup_staging_is_ignored_and_cleaned(tmp_path):
    a, b = seeded_tree(15, version="a"), seeded_tree(15, version="b")
    provision_tree(a, tmp_path, live=False)
    staging = backups.backup_root(tmp_path) / f"{backups.STAGING_PREFIX}20250101T000000Z-0009-1"
    (staging / "files").mkdir(parents=True)
    assert [s.seq for s in backups.list_sets(tmp_path)] == [1]
    report = provision_tree(b, tmp_path, live=False)
    assert not staging.exists()
    assert report.backup_set.name.endswith("-0002")
