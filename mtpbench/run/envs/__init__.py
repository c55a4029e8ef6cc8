"""Build environments: a config's builds made interpreters before a cell is planned, pinned builds provisioned and
cached, and the installers they are made with. installers.py is also run by path
(`python -I mtpbench/run/envs/installers.py`, the Makefile's first install), so it imports the standard library
only. The package imports nothing.

- builds.py: The one place a config's builds become interpreters, before the runner plans a cell
- envfiles.py: What a provisioned environment's pinned files are, and whether they are still what was installed
- installers.py: Installers a build's environment is made with, and what their failures mean
- provision.py: Builds from pins: the environment a `requirements` build runs in, installed by mtpbench and cached
"""
