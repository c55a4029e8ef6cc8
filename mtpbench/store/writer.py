"""A run folder being written (`RunWriter`): its manifest, rewritten atomically whenever it changes, and its
append-only records, in the format the runner and its workers produce (manifest.py's `new_manifest` and
`write_json_atomic`, records.py's `dump_record`).

The runner writes a run's manifest through it (cells as they change state, the run's status when it ends);
its records come from the workers (engine/worker.py's locked `append_record`). Tests and benchmarks that
need a run on disk without running anything write both halves through it, so a synthetic run is a run in
the real format, never a hand-made look-alike.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mtpbench.schema import SCHEMA_VERSION, CellStatus, RunStatus
from mtpbench.store.manifest import MANIFEST, new_manifest, new_run_dir, now_iso, write_json_atomic
from mtpbench.store.records import RECORDS, dump_record

# What names a cell-repeat: the first keys of its manifest entry, and what every record of it carries (the
# worker stamps the same keys, in this order).
CELL_KEYS = ("cell", "build", "mode", "variant", "repeat", "hash_seed")


class RunWriter:
    """A run folder and its manifest, as a dict that is written whole on every `save` (temp file + rename:
    a reader sees the old or the new manifest, never half of one). The folder's name is the run id."""

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self.manifest = manifest

    @classmethod
    def create(cls, path: Path, *, config: dict[str, Any], config_path: str, prompts: dict[str, Any]) -> RunWriter:
        """A new run folder at `path` (which must not exist), with an empty records file; nothing is saved
        until `save`."""
        path.mkdir(parents=True)
        (path / RECORDS).touch()
        return cls(path, new_manifest(path.name, config, config_path, prompts))

    @classmethod
    def in_new_folder(
        cls, out: Path, *, config: dict[str, Any], config_path: str, prompts: dict[str, Any]
    ) -> RunWriter:
        """A new `<out>/<UTC stamp>-<config name>[-n]` folder that no other run shares (manifest.py's
        `new_run_dir`: the runner's way), its logs folder and empty records file made."""
        path = new_run_dir(out, str(config["name"]))
        return cls(path, new_manifest(path.name, config, config_path, prompts))

    @property
    def run_id(self) -> str:
        return str(self.manifest["run_id"])

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    @property
    def records_path(self) -> Path:
        return self.path / RECORDS

    @property
    def cells(self) -> list[dict[str, Any]]:
        """The manifest's cell-repeat entries, in the order they were added."""
        cells: list[dict[str, Any]] = self.manifest["cells"]
        return cells

    def add_cell(
        self,
        *,
        build: str,
        mode: str,
        variant: str,
        repeat: int,
        hash_seed: int,
        status: CellStatus = CellStatus.PENDING,
        **extra: Any,
    ) -> int:
        """A cell-repeat's manifest entry (not saved yet); its index, which `record` and `update_cell` take."""
        self.cells.append(
            {
                "cell": f"{build}/{mode}/{variant}",
                "build": build,
                "mode": mode,
                "variant": variant,
                "repeat": repeat,
                "hash_seed": hash_seed,
                "status": CellStatus(status),
                **extra,
            }
        )
        return len(self.cells) - 1

    def update_cell(self, index: int, **fields: Any) -> None:
        """Change a cell-repeat's entry and save the manifest (a cell's state is on disk as soon as it changes)."""
        self.cells[index].update(fields)
        self.save()

    def record(self, index: int, type: str, **fields: Any) -> dict[str, Any]:
        """A record of cell-repeat `index` as a worker writes it: schema, run id, the cell's keys, type, fields."""
        cell = self.cells[index]
        return {
            "schema": SCHEMA_VERSION,
            "run_id": self.run_id,
            **{key: cell[key] for key in CELL_KEYS},
            "type": type,
            **fields,
        }

    def append(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Append records to records.jsonl, one complete JSON line each; how many. A generator is written as
        it is drawn (a benchmark's 10⁶ records never sit in memory). The workers' lock is taken, so a line
        never lands inside another writer's line."""
        n = 0
        with self.records_path.open("a", encoding="utf-8") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            for record in records:
                f.write(dump_record(record))
                n += 1
        return n

    def save(self) -> None:
        write_json_atomic(self.manifest_path, self.manifest)

    def finish(self, status: RunStatus, *, finished: str | None = None) -> None:
        """The run's status and end time (now unless given), saved."""
        self.manifest.update(status=RunStatus(status), finished=finished or now_iso())
        self.save()


__all__ = ["CELL_KEYS", "RunWriter"]
