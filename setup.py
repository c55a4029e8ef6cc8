"""Build hook (everything else is in pyproject.toml): the shipped `configs/`, `prompts/` and `baselines/`
folders stay at the top of the source tree, where users and docs expect them, and go into the wheel as
package data under `mtpbench/_shipped/` (see mtpbench/shipped.py for how they are found)."""

from setuptools import find_packages, setup

SHIPPED = ("configs", "prompts", "baselines")

setup(
    packages=[*find_packages(include=["mtpbench", "mtpbench.*"]), *(f"mtpbench._shipped.{d}" for d in SHIPPED)],
    package_dir={f"mtpbench._shipped.{d}": d for d in SHIPPED},
)
