"""`mtpbench build prepare|list|verify|remove`: the environments of builds from pins (run/envs/provision.py),
made ahead of a run, listed with their sizes and states, checked byte for byte against what was installed
(run/envs/envfiles.py), removed. A run provisions what it needs by itself; these commands let a CI job fill the
cache in its own step and a user see, trust and reclaim the space."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from mtpbench.cli.common import console, say
from mtpbench.cli.progress import install_view
from mtpbench.errors import ExitCode, UserError


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f}"


def prepare(
    config: Annotated[str, typer.Argument(metavar="CONFIG", help="Config file, or a shipped config's name.")],
    build: Annotated[list[str] | None, typer.Option(help="Only this build (repeatable).")] = None,
) -> int:
    """Provision the config's builds from pins (cached: a build already there is ready at once)."""
    from mtpbench.config import load_config
    from mtpbench.run.envs.builds import resolve_builds

    cfg = load_config(config)
    unknown = [b for b in build or [] if b not in cfg.builds]
    if unknown:
        raise UserError(f"--build {unknown[0]}: not a build of {config} (builds: {', '.join(cfg.builds)})")
    with install_view() as view:
        _, done = resolve_builds(cfg, build or None, on_step=view.step, on_output=view.output)
    if not done:
        console.print(f"{config}: no build from pins to provision", markup=False, highlight=False)
        return 0
    t = Table(show_header=True)
    for col in ("build", "vllm", "key", "state", "seconds", "interpreter"):
        t.add_column(col, justify="right" if col == "seconds" else "left", overflow="fold")
    for p in done:
        state = "cached" if p.from_cache else "installed"
        t.add_row(p.name, p.vllm or "-", p.key, state, f"{p.seconds:.2f}", str(p.python))
    console.print(t)
    return 0


def list_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document instead of the table.")] = False,
) -> int:
    """The environments in mtpbench's builds cache, with what they hold and their sizes."""
    from mtpbench.run.envs.provision import builds_root, list_cached

    root = builds_root()
    entries = list_cached(root)
    if as_json:
        rows = [
            {
                "key": e.key,
                "state": e.state,
                "changed": list(e.changed),
                "path": str(e.path),
                "size_bytes": e.size_bytes,
                "vllm": (e.stamp or {}).get("vllm"),
                "requirements": (e.stamp or {}).get("requirements"),
                "created": (e.stamp or {}).get("created"),
                "seconds": (e.stamp or {}).get("seconds"),
            }
            for e in entries
        ]
        console.print_json(json.dumps({"root": str(root), "builds": rows}))
        return 0
    if not entries:
        console.print(f"no build environments in {root}", markup=False, highlight=False)
        return 0
    t = Table(show_header=True, title=str(root))
    for col in ("key", "state", "vllm", "requirements", "MiB", "installed in s", "created"):
        t.add_column(col, justify="right" if col in ("MiB", "installed in s") else "left", overflow="fold")
    for e in entries:
        s = e.stamp or {}
        seconds = f"{s['seconds']:.1f}" if isinstance(s.get("seconds"), int | float) else "-"
        reqs = " ".join(s.get("requirements") or []) or "-"
        t.add_row(e.key, e.state, s.get("vllm") or "-", reqs, _mib(e.size_bytes), seconds, s.get("created") or "-")
    console.print(t)
    total = sum(e.size_bytes for e in entries)
    console.print(f"{len(entries)} folder(s), {_mib(total)} MiB", markup=False, highlight=False)
    for e in entries:
        if e.state == "modified":
            say(f"{e.key}: modified since it was made: {', '.join(e.changed[:3])} (mtpbench build verify {e.key[:8]})")
    return 0


def verify(
    keys: Annotated[
        list[str] | None, typer.Argument(metavar="[KEY...]", help="Keys (or their first 6+ characters); none: all.")
    ] = None,
) -> int:
    """Hash every pinned file of the environments again (vLLM, its platform plugin, torch's Python side) and
    compare with what was installed; exit 3 when one changed."""
    from mtpbench.run.envs.envfiles import full_changes, named, read_digest, write_digest
    from mtpbench.run.envs.provision import builds_root, list_cached

    entries = [e for e in list_cached(builds_root()) if e.state != "incomplete"]
    chosen = [_one(entries, key) for key in keys] if keys else entries
    if not chosen:
        console.print(f"no build environments in {builds_root()}", markup=False, highlight=False)
        return 0
    failed = False
    for e in chosen:
        digest = read_digest(e.path)
        if digest is None:
            failed = True
            console.print(f"{e.key}: its digest is missing or unreadable", markup=False, highlight=False)
            continue
        changed, recorded = full_changes(e.path, digest)
        if changed:
            failed = True
            console.print(f"{e.key}: modified: {named(changed)}", markup=False, highlight=False)
            continue
        if recorded != digest:  # times moved, bytes did not: trusted by the quick check from now on
            write_digest(e.path, recorded)
        files = len(digest["files"])
        console.print(f"{e.key}: unchanged ({files} files hashed)", markup=False, highlight=False)
    return ExitCode.RUN_FAILED if failed else 0


def _one(entries: list[Any], key: str) -> Any:
    if len(key) < 6:
        raise UserError(f"{key}: give at least 6 characters of a key (mtpbench build list)")
    hits = [e for e in entries if e.key.startswith(key)]
    if len(hits) != 1:
        raise UserError(f"{key}: {'no' if not hits else 'more than one'} environment with this key")
    return hits[0]


def remove(
    keys: Annotated[
        list[str] | None, typer.Argument(metavar="KEY...", help="Keys (or their first 6+ characters).")
    ] = None,
    incomplete: Annotated[bool, typer.Option("--incomplete", help="Every leftover of an interrupted install.")] = False,
    remove_all: Annotated[bool, typer.Option("--all", help="Every environment in the cache.")] = False,
) -> int:
    """Remove environments from the builds cache (a later run installs them again)."""
    from mtpbench.run.envs.provision import builds_root, list_cached, remove_cached

    if remove_all and (keys or incomplete):
        # A mixed request is a typo waiting to happen: "remove these" and "remove everything" at once.
        named = "keys" if keys else "--incomplete"
        raise UserError(f"--all removes every environment: give it alone, or name {named} without --all")
    if not keys and not incomplete and not remove_all:
        raise UserError("name keys to remove, or --incomplete, or --all")
    entries = list_cached(builds_root())
    chosen = []
    for key in keys or []:
        chosen.append(_one(entries, key))
    if incomplete:
        chosen += [e for e in entries if e.state == "incomplete"]
    if remove_all:
        chosen = list(entries)
    for e in {e.path: e for e in chosen}.values():
        remove_cached(e)
        console.print(f"removed {e.key} ({_mib(e.size_bytes)} MiB)", markup=False, highlight=False)
    return 0


# The group cli/__init__.py puts on the app as `build`.
build_app = typer.Typer(no_args_is_help=True, help="Environments of builds from pins: prepare, list, verify, remove.")
build_app.command("prepare")(prepare)
build_app.command("list")(list_cmd)
build_app.command("verify")(verify)
build_app.command("remove")(remove)
