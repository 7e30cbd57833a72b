"""kill -9 at random moments during `python -m hostspec provision`: every
target is wholly old or wholly new afterwards, never a mix; temp files left
behind are not targets and the next run removes them."""

from __future__ import annotations

import random
import signal
import subprocess
import time

from provision_support import PYTHON, REPO, Rendered, write_tree_dir

from hostspec.filesync import TEMP_MARK
from hostspec.provision import provision_tree

FILES = 48
SIZE = 192 * 1024  # big enough that a write is not one page: a torn write would show
KILLS = 6          # kills that must land while provision runs
MAX_ATTEMPTS = 30  # on a loaded machine some kills land after the run ended: try again, bounded


def big_tree(version: str, seed: int) -> dict:
    rng = random.Random(seed)
    tree = {}
    for i in range(FILES):
        rel = f"opt/aie-kill/d{i % 4}/blob{i}.bin"
        # Different length per version too, so a truncated file is caught.
        body = rng.randbytes(SIZE + (i * 7 if version == "new" else 0))
        tree[rel] = Rendered(rel, f"{version}\n".encode() + body, 0o644)
    return tree


def start(tree_dir, root):
    return subprocess.Popen([PYTHON, "-m", "hostspec", "provision", "--tree", str(tree_dir), "--root", str(root),
                             "--no-live"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_kill_9_leaves_each_file_wholly_old_or_wholly_new(tmp_path):
    old, new = big_tree("old", 21), big_tree("new", 22)
    new_dir = write_tree_dir(new, tmp_path / "tree")
    rng = random.Random(2024)

    # One uninterrupted run sets the window in which the kills land.
    timing_root = tmp_path / "timing"
    provision_tree(old, timing_root, live=False)
    t0 = time.monotonic()
    done = start(new_dir, timing_root)
    assert done.wait(timeout=120) == 0, done.stderr.read().decode()
    window = time.monotonic() - t0

    interrupted = 0
    for k in range(MAX_ATTEMPTS):
        if interrupted >= KILLS:
            break
        root = tmp_path / f"root{k}"
        provision_tree(old, root, live=False)
        child = start(new_dir, root)
        # Timing varies with load: shrink the range after each kill that came too late.
        late = k - interrupted
        time.sleep(rng.uniform(0.1, 1.0) * window / (1 + late))
        child.send_signal(signal.SIGKILL)
        rc = child.wait(timeout=60)
        interrupted += rc == -signal.SIGKILL
        for rel in new:
            data = (root / rel).read_bytes()
            assert data in (old[rel].content, new[rel].content), f"kill {k}: {rel} is neither old nor new"

        # The next run completes the job and removes what the killed one left.
        again = start(new_dir, root)
        assert again.wait(timeout=120) == 0, again.stderr.read().decode()
        assert all((root / rel).read_bytes() == new[rel].content for rel in new)
        assert not [p for p in root.rglob(f"*{TEMP_MARK}*")], "temp files survived the next run"
        assert not [p for p in root.rglob(".staging-*")], "incomplete backup sets survived the next run"
    assert interrupted >= KILLS, f"only {interrupted} kills landed while provision ran (window {window:.2f}s); the test proved nothing"
