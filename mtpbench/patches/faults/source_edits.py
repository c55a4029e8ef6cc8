"""Source-level faults of the Gemma4 MTP draft's attention inputs, each one edit of vLLM 0.32's real proposer
(vllm/v1/spec_decode/gemma4.py) made by a build's `post_install` step: the bug class the gate, the reference and
the metadata-binding probe must see (issue 34; `mtpbench selftest --class` runs them, docs/probes.md).

Unlike the patches beside it, nothing here runs inside an engine: a fault is data (the file, the text it
replaces, the text it puts there, the upstream report it stands for), and `post_install_step` turns it into the
argv a build runs with its own interpreter. The edit writes a new file and renames it over the installed one,
so it never writes through an inode that uv's cache or another environment might share (issue 34 part 1).
Each edit must find its text exactly once, or the build fails to provision: a fault that silently edits
nothing would be a clean build under a fault's name.

Standard library only (the config stage reads the steps; the selftest builds its builds from them).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CLASS_FAULTS", "EDIT_SCRIPT", "SourceFault", "fault_named", "post_install_step"]

PROPOSER_FILE = "vllm/v1/spec_decode/gemma4.py"

# Run as `{python} -c EDIT_SCRIPT FILE OLD NEW` in the build's environment: FILE is relative to that
# environment's site-packages (sysconfig's purelib, so no vLLM import: it takes seconds and compiles nothing).
EDIT_SCRIPT = """\
import os, pathlib, sys, sysconfig
path = pathlib.Path(sysconfig.get_paths()["purelib"], sys.argv[1])
text = path.read_text()
found = text.count(sys.argv[2])
if found != 1:
    sys.exit(f"{path}: the text to replace occurs {found} times, not once: {sys.argv[2]!r}")
fresh = path.with_name(path.name + ".mtpbench-edit")
fresh.write_text(text.replace(sys.argv[2], sys.argv[3]))
os.replace(fresh, path)
print(f"edited {path}")
"""


@dataclass(frozen=True)
class SourceFault:
    name: str
    file: str  # relative to the environment's site-packages
    old: str  # the text of vLLM 0.32.0 it replaces (exactly once)
    new: str
    what: str  # one line: what the edited proposer does
    upstream: str  # the report it stands for
    # What the metadata-binding probe can name: "block-table", "kv-sharing" or "" (it cannot see the fault).
    localizable: str


CLASS_FAULTS: tuple[SourceFault, ...] = (
    SourceFault(
        name="block-table-group0",
        file=PROPOSER_FILE,
        old="cm.block_table_tensor = self._per_group_block_tables[gid][:batch_size]",
        new="cm.block_table_tensor = self._per_group_block_tables[0][:batch_size]",
        what="every draft group's metadata is built with KV-cache group 0's block table",
        upstream=(
            "vllm-ascend#16980: Gemma4 MTP draft layers of several KV-cache groups share group[0]'s block "
            "table, draft acceptance 0 %"
        ),
        localizable="block-table",
    ),
    SourceFault(
        name="kv-sharing-first-layer",
        file=PROPOSER_FILE,
        old="target_idx = candidates[-1]",
        new="target_idx = candidates[0]",
        what="each draft layer shares the KV of the first target layer of its attention type, not the last",
        upstream=(
            "llama.cpp#23398 review: a Gemma4 MTP assistant wired to the wrong trunk layers' KV; vllm-ascend#13045: "
            "the draft shares the KV of the target's last sliding (58) and full (59) layers"
        ),
        localizable="kv-sharing",
    ),
    SourceFault(
        name="kv-sharing-other-type",
        file=PROPOSER_FILE,
        old="candidates = type_to_target_indices.get(draft_layer_type, [])",
        new=(
            'candidates = type_to_target_indices.get("full_attention" if draft_layer_type == '
            '"sliding_attention" else "sliding_attention", [])'
        ),
        what="each draft layer shares the KV of a target layer of the other attention type",
        upstream=(
            "llama.cpp#23398 review (the assistant's SWA / full source layers asserted by type); vLLM's "
            "gemma4.py maps each draft layer to a target layer of the same type"
        ),
        localizable="kv-sharing",
    ),
)


def post_install_step(fault: SourceFault) -> dict[str, list[str]]:
    """The `post_install` step that makes the edit (`{run: [...]}` of builds.<name>.post_install)."""
    return {"run": ["{python}", "-c", EDIT_SCRIPT, fault.file, fault.old, fault.new]}


def fault_named(name: str) -> SourceFault:
    for fault in CLASS_FAULTS:
        if fault.name == name:
            return fault
    raise KeyError(name)
