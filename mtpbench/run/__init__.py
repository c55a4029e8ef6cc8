"""Planning and executing the matrix: cells, schedule, executors (local, device pool, Ray), devices, doctor.
Writes the manifest (through the store's RunWriter); the engine writes the records.

What a caller wants, and the module it imports it from (no face here: each name from its module):
- plan: `expand` a config into cell-repeats (`Cell`), `cell_jobs` gives each its job (`CellJob`), `engine_args_for` a
  mode, `estimate` what a run will cost (cells.py, cost.py);
- run: `execute` a new run or `resume` one (`load_for_resume` reads it back), steered by `RunOptions` and
  `StopSignals`, ending in a `RunOutcome` or `RunInterrupted`; `time_breakdown` says where its time went
  (runner.py, control.py, cost.py);
- execute one worker: `make_executor` (`LocalExecutor`, `RayExecutor`), `supervise`, `kill_group`,
  `WorkerSpec` (executors.py); reach a Ray cluster: `join`, `RaySettings`, `RayDeadlines`, `fit_problem`
  (ray/cluster.py); a worker's PYTHONPATH: `worker_pythonpath`, `user_pythonpath` (pythonpath.py);
- builds: `resolve_builds` (a config's builds from pins given their environments, before planning),
  `preview_builds` and `build_state` (where they stand, installing nothing), `unresolved` (envs/builds.py);
  one build's environment (`Provisioned`, from envs/provision.py's `provision`, named by module), the cache's
  entries (`list_cached`, `remove_cached`, `CacheEntry`, `builds_root`; envs/provision.py), the installer
  (`default_installer`, `Installer`; envs/installers.py);
- bisect: `search` an ordered list of builds for the first bad one (`Judged`, `Outcome`, `BisectResult`,
  `max_builds`), `git_bisect_code` (bisect.py).
doctor.py, devices.py and ray/auth.py (who may use a Ray cluster: its token, its exposure) are imported by module name.

The package imports nothing: `python -m mtpbench.run.ray.keeper` imports it before the keeper runs, and the keeper,
alive as long as its cluster, stays a small standard-library process instead of loading the whole stage
(pydantic, pandas) for nothing.
"""
