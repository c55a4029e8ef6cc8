"""The fix preflight's probe, run in a build's interpreter: `python -m mtpbench.fixes.probe PATCH-NAME`.

It imports the module of one registered patch and, when the module has a `check()`, asks what `apply()`
would do in this interpreter, changing nothing and starting no engine. The answer is one JSON object on
the last line of stdout: `{"known": false}` for a patch without `check()`, else
`{"known": true, "applies": bool, "detail": str}`. An unknown patch name or a failing check ends in a
traceback and a non-zero exit, which `status.preflight` reports as "probe exited N: <last stderr line>".
Standard library only at module level: the build's interpreter may lack mtpbench's dependencies.
"""

from __future__ import annotations

import importlib
import json
import sys

from mtpbench.fixes.registry import patch_module


def answer(name: str) -> dict[str, object]:
    """What patch `name`'s `check()` says here (raises KeyError for a name the registry does not know)."""
    module_name = patch_module(name)
    if module_name is None:
        raise KeyError(name)
    module = importlib.import_module(module_name)
    check = getattr(module, "check", None)
    if check is None:
        return {"known": False}
    ok, detail = check()
    return {"known": True, "applies": bool(ok), "detail": str(detail)}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    print(json.dumps(answer(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
