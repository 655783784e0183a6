"""Build hook: a wheel carries envs/, manifests/ and schemas/ inside the xtask package
(xtask/_data/<name>), where xtask.resources.data_dir finds them. Everything else is in
pyproject.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
DATA_DIRS = ("envs", "manifests", "schemas")  # as xtask.resources.DATA_DIRS


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # an editable install reads the repository's folders
        for name in DATA_DIRS:
            target = Path(self.build_lib) / "xtask" / "_data" / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(HERE / name, target)


setup(cmdclass={"build_py": BuildPyWithData})
