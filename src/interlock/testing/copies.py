"""A clean copy of a working tree: what the tests' shared runs and the rehearsal benchmark start
from, as a user's fresh clone would be, with uncommitted work included."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

#: the identity the copy's commits are made under
GIT_USER = ("-c", "user.email=t@t", "-c", "user.name=t")


def working_tree_copy(source: Path, root: Path) -> Path:
    """A fresh git repository at ``root`` holding ``source``'s tracked (and untracked, not ignored)
    files, without artifacts, metrics or the lock file, committed once."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=source,
                            capture_output=True, text=True, check=True).stdout.split()
    for name in listed:
        if (source / name).is_file() and not name.startswith(("data/", "metrics/")) and name != "dvc.lock":
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, root / name)
    for command in (["init", "-q"], [*GIT_USER, "add", "-A"],
                    [*GIT_USER, "commit", "-qm", "copy", "--allow-empty"]):
        subprocess.run(["git", *command], cwd=root, check=True, capture_output=True)
    return root
