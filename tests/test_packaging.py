"""Every package directory is listed in pyproject.toml (an installed wheel would miss it)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is in the standard library from 3.11")
def test_all_subpackages_are_listed():
    import tomllib
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts)
               for p in (ROOT / "dpplugins").rglob("__init__.py")}
    assert on_disk <= listed
    assert config["package-dir"]["dpplugins.integrations"] == "integrations"
    assert (ROOT / "integrations" / "__init__.py").exists()
