"""mtpbench's tests: a package so that every test imports its helpers one way, `from tests.support.<module>
import ...` (the repository root is on pytest's path: pyproject.toml's `pythonpath`)."""
