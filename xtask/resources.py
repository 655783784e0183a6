"""Where the project's data folders are: ``envs/``, ``manifests/`` and ``schemas/``.

In a checkout (or an editable install) they are the repository's own folders. A wheel carries
them inside the package, as ``xtask/_data/<name>`` (``setup.py`` copies them in at build time),
so an installed ``xtask`` works from any folder without the repository. Every module finds them
through :func:`data_dir`, never through a path relative to the repository.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

DATA_DIRS = ("envs", "manifests", "schemas")
PACKAGED = "_data"  # the folder inside the xtask package a wheel carries them in


def data_dir(name: str) -> Path:
    """The folder ``name`` (one of :data:`DATA_DIRS`): the packaged copy when installed from a
    wheel, else the repository's."""
    if name not in DATA_DIRS:
        raise ValueError(f"{name!r} is not one of the data folders {DATA_DIRS}")
    packaged = Path(str(resources.files("xtask").joinpath(PACKAGED, name)))
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[1] / name
