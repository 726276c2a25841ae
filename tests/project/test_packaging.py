"""The wheel as users get it: license, typing marker, metadata, and the one source of the version."""

from __future__ import annotations

import email
import importlib.metadata
import re
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import subagentd

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = "https://github.com/subagentd/subagentd"
# Building the wheel (hatchling in an isolated environment) takes seconds, more under load.
pytestmark = pytest.mark.timeout(360)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Iterator[zipfile.ZipFile]:
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (path,) = out.glob("subagentd-*.whl")
    with zipfile.ZipFile(path) as archive:
        yield archive


def metadata(wheel: zipfile.ZipFile) -> email.message.Message:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return email.message_from_bytes(wheel.read(name))


def test_wheel_is_typed_and_carries_the_license(wheel):
    names = wheel.namelist()
    assert "subagentd/py.typed" in names
    assert "subagentd/client/__init__.py" in names  # the public Python client ships typed
    # its typed methods ship as written by scripts/generate_client.py, the generator does not
    assert "subagentd/client/methods.py" in names
    assert [n for n in names if "generat" in n] == []
    (license_name,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    text = wheel.read(license_name).decode()
    assert text == (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n\nCopyright (c) 2026 the subagentd authors\n")


def test_wheel_metadata_version_license_classifiers_and_urls(wheel):
    meta = metadata(wheel)
    assert meta["Version"] == subagentd.__version__
    assert meta["License-Expression"] == "MIT"
    assert meta["License-File"] == "LICENSE"
    classifiers = meta.get_all("Classifier")
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert urls["Repository"] == REPOSITORY
    assert urls["Issues"] == f"{REPOSITORY}/issues"
    assert meta["Requires-Python"] == ">=3.11"


def test_the_version_is_written_once():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["hatch"]["version"]["path"] == "subagentd/__init__.py"
    source = (ROOT / "subagentd" / "__init__.py").read_text()
    assert re.findall(r"^__version__ = \"([^\"]+)\"$", source, re.M) == [subagentd.__version__]
    # The installed distribution (editable here) reports the same version.
    assert importlib.metadata.version("subagentd") == subagentd.__version__


def test_clients_name_the_same_repository():
    package = (ROOT / "clients" / "typescript" / "package.json").read_text()
    assert f'"url": "git+{REPOSITORY}.git"' in package
    go_mod = (ROOT / "clients" / "go" / "go.mod").read_text()
    assert go_mod.startswith("module github.com/subagentd/subagentd/clients/go\n")
