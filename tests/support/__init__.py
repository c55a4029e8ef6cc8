"""What tests share besides fixtures: synthetic runs in the on-disk format (`synthetic_runs`, `serving_runs`,
`probe_records`, `reference_runs`), stand-ins for programs (`fake_worker`, `fake_uv`, `fake_api_server`: run
as scripts or with `python -m tests.support.<name>`, never imported by mtpbench), the runner driven with the
fake worker (`fake_runs`, with `wait_for`, the one poll-until-true loop), the CLI in this process (`cli`) and
a headless Chromium (`browser`)."""
