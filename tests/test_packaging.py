"""What a wheel holds: every package of the product and every file the product reads beside its modules.

setuptools installs the packages ``[tool.setuptools] packages`` lists and, of their other files, those
``[tool.setuptools.package-data]`` names; anything else stays behind in the checkout, and the installed
command fails on it (``symcost validate`` once read its tables from ``tests/``). These tests read
``pyproject.toml`` and the tree, so a file or a package added without its line fails here, not after
an install.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path, PurePosixPath

import pytest

from codegen.validation import collectives, memory, step_time
from codegen.validation.csvfile import DATA_DIR
from conftest import ROOT

#: The product's top-level packages (the rest of the checkout — tests, bench, docs — is not installed).
TOPS = ("symbolic", "hardware", "codegen", "generated")

SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
PACKAGES = tuple(SETUPTOOLS["packages"])
PACKAGE_DATA = SETUPTOOLS.get("package-data", {})


def _product_files() -> list[PurePosixPath]:
    """The product's files, relative to the root, without byte-code."""
    out = []
    for top in TOPS:
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                out.append(PurePosixPath(path.relative_to(ROOT).as_posix()))
    return sorted(out)


FILES = _product_files()


def _packages_of(directory: PurePosixPath) -> list[str]:
    """The listed packages whose folders hold *directory* (setuptools globs each one's patterns from its
    own folder, so a package's pattern may reach into a subpackage's folder)."""
    dotted = ".".join(directory.parts)
    return [p for p in PACKAGES if dotted == p or dotted.startswith(p + ".")]


def _matches(relative: PurePosixPath, pattern: str) -> bool:
    """setuptools' reading of a package-data pattern: a glob relative to the package's folder, ``*`` within
    one path segment."""
    parts = PurePosixPath(pattern).parts
    return len(parts) == len(relative.parts) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(relative.parts, parts))


def test_every_folder_of_modules_is_a_listed_package():
    folders = sorted({".".join(f.parent.parts) for f in FILES if f.suffix == ".py"})
    assert folders, "no module found: the test would prove nothing"
    missing = [f for f in folders if f not in PACKAGES]
    assert not missing, f"pyproject.toml [tool.setuptools] packages lacks {missing}: a wheel would leave them out"


@pytest.mark.parametrize("path", [f for f in FILES if f.suffix != ".py"], ids=str)
def test_every_data_file_is_package_data(path):
    packages = _packages_of(path.parent)
    assert packages, f"{path} lies in no listed package"
    patterns = {package: PACKAGE_DATA.get(package, []) for package in packages}
    assert any(_matches(PurePosixPath(*path.parts[len(package.split(".")):]), pattern)
               for package, listed in patterns.items() for pattern in listed), \
        f"{path}: no package-data pattern of pyproject.toml reaches it ({patterns}): a wheel would leave it out"


@pytest.mark.parametrize("path", [collectives.DEFAULT_DATA, memory.ZERO_CSV, memory.MEGATRON_CSV, memory.RUNS_CSV,
                                  step_time.DEFAULT_DATA], ids=lambda p: p.name)
def test_the_default_validation_tables_are_shipped_beside_the_modules(path):
    """The tables ``symcost validate`` reads by default lie in the product's packages, never in tests/."""
    relative = PurePosixPath(Path(path).resolve().relative_to(ROOT).as_posix())
    assert relative.parts[0] in TOPS, f"{relative}: outside the installed packages"
    assert relative in FILES


@pytest.mark.parametrize("name", ["nemo_step_times.csv", "layout_sweeps.csv"])
def test_the_shipped_step_time_tables_equal_the_shared_measurements(name):
    """``symcost validate step-time --data`` reads copies of the shared measurement files: they must not drift."""
    shipped = DATA_DIR / name
    assert PurePosixPath(shipped.resolve().relative_to(ROOT).as_posix()) in FILES
    shared = ROOT.parent / "shared" / "measurements" / name
    if not shared.exists():
        pytest.skip("the shared measurements folder is not beside this clone")
    assert shipped.read_bytes() == shared.read_bytes()
