"""A checkpoint's manifest (`checkpoint.json`): every file, its size and its SHA-256.

Written last inside the checkpoint folder, so its presence says the save finished. Sizes are
checked whenever a folder is listed (cheap: a cut-short file); checksums when a checkpoint is used
(resume, export, eval, serve), since a file can be damaged without changing size (a zeroed
safetensors header, a bad disk block, a copy gone wrong). Hashing costs ~0.4 CPU-s per GB (SHA-NI);
the files are hashed in two threads (hashlib releases the GIL on large reads).

Format: {"step": N, "format": 2, "files": {"actor/model.safetensors": {"size": 538090408,
"sha256": "..."}}}. Format 1 (before checksums) maps each file to its size; such a checkpoint is
accepted on sizes alone, with a note.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

MANIFEST = "checkpoint.json"
CHUNK = 1 << 22  # 4 MiB reads


class Manifest:
    """A parsed checkpoint.json: {relative path: (size, sha256 or None)}."""

    def __init__(self, folder: str, files: dict[str, tuple[int, Optional[str]]], data: dict):
        self.folder, self.files, self.data = folder, files, data

    @property
    def has_checksums(self) -> bool:
        return all(sha is not None for _, sha in self.files.values())


def sha256_of(path: str, fsync: bool = False) -> str:
    """The file's SHA-256 hex digest; `fsync` also flushes it to disk (checkpoint writing)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
        if fsync:
            os.fsync(f.fileno())
    return h.hexdigest()


def _files_of(folder: str) -> list[str]:
    return sorted(os.path.relpath(p, folder) for p in glob.glob(os.path.join(folder, "**", "*"), recursive=True)
                  if os.path.isfile(p) and os.path.basename(p) != MANIFEST)


def _hash_all(folder: str, rels: list[str], fsync: bool = False) -> dict[str, str]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        digests = pool.map(lambda rel: sha256_of(os.path.join(folder, rel), fsync), rels)
        return dict(zip(rels, digests))


def write_manifest(folder: str, write_text, **extra) -> None:
    """Hash (and fsync) every file of `folder`, then write its manifest with `write_text(path, text)`
    (an atomic writer) and `extra` keys (the step)."""
    rels = _files_of(folder)
    digests = _hash_all(folder, rels, fsync=True)
    files = {rel: {"size": os.path.getsize(os.path.join(folder, rel)), "sha256": digests[rel]} for rel in rels}
    write_text(os.path.join(folder, MANIFEST), json.dumps({**extra, "format": 2, "files": files}, indent=1))


def drop_from_manifest(folder: str, prefix: str, write_text) -> None:
    """Forget the files under `prefix` (deleted by pruning); the others keep their recorded checksums."""
    m = read_manifest(folder)
    data = dict(m.data)
    data["files"] = {rel: v for rel, v in m.data["files"].items() if not rel.startswith(prefix)}
    write_text(os.path.join(folder, MANIFEST), json.dumps(data, indent=1))


def read_manifest(folder: str) -> Manifest:
    """Raises OSError/ValueError/KeyError/TypeError on a missing or unreadable manifest."""
    with open(os.path.join(folder, MANIFEST)) as f:
        data = json.load(f)
    files = {}
    for rel, entry in data["files"].items():
        files[rel] = (int(entry), None) if isinstance(entry, int) else (int(entry["size"]), str(entry["sha256"]))
    return Manifest(folder, files, data)


def problem_of(folder: str, verify: Optional[str] = None) -> Optional[str]:
    """Why `folder` is not a whole, intact checkpoint, or None. Sizes always; with `verify` the
    checksums of the files under that prefix too ("" = every file, "actor/" = the policy's folder)."""
    if not os.path.isfile(os.path.join(folder, MANIFEST)):
        return f"no {MANIFEST} (the save did not finish)"
    try:
        m = read_manifest(folder)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return f"unreadable {MANIFEST} ({type(e).__name__}: {e})"
    for rel, (size, _) in m.files.items():
        path = os.path.join(folder, rel)
        if not os.path.isfile(path):
            return f"{rel} is missing"
        if os.path.getsize(path) != size:
            return f"{rel} has {os.path.getsize(path)} bytes, the manifest says {size}"
    if verify is None:
        return None
    checked = [rel for rel, (_, sha) in m.files.items() if sha is not None and rel.startswith(verify)]
    digests = _hash_all(folder, checked)
    for rel in checked:
        if digests[rel] != m.files[rel][1]:
            return f"{rel} does not match its SHA-256 in {MANIFEST}: the file changed after it was saved (damaged)"
    return None


def unchecked_note(folder: str) -> Optional[str]:
    """A note for a checkpoint written before manifests had checksums (checked by size only), else None."""
    try:
        if read_manifest(folder).has_checksums:
            return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return f"note: {folder} has no checksums (written by an older hybridrl); its files were checked by size only"
