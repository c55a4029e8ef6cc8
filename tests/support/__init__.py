"""What tests share besides fixtures, imported one way (`from tests.support.<module> import ...`): runs written
in the on-disk format (`synthetic_runs`, `serving_runs`, `probe_records`, `reference_runs`); stand-ins for
programs (`fake_worker`, `fake_uv`, `fake_api_server`: run by path or with `python -m tests.support.<name>`,
never imported by mtpbench); the runner driven with the fake worker (`fake_runs`); the engine tests' run
factory and command line (`engine_runs`, behind tests/engine/conftest.py); `polling.wait_for`, the one
poll-until-true loop; the CLI in this process (`cli`) and a headless Chromium (`browser`)."""
