"""The release: `python -m build` makes a wheel and an sdist that `twine check` passes, with
the helpers' data files (the CJK font and its licence included), the version, the project
URLs and the licences; and the READMEs tell a learner how to install anywhere."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser

import envkit
import pytest
from conftest import ROOT

import helpers

pytestmark = pytest.mark.env


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    base = tmp_path_factory.mktemp("release")
    source = envkit.copy_project(base / "source")
    out = base / "dist"
    envkit.run([sys.executable, "-m", "build", "--outdir", out, source], timeout=900)
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(out.iterdir())
    return {"wheel": wheels[0], "sdist": sdists[0]}


def test_twine_check_passes(dist):
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", dist["wheel"], dist["sdist"]],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2


def test_wheel_holds_every_file_of_the_packages_and_the_metadata(dist):
    names = set(zipfile.ZipFile(dist["wheel"]).namelist())
    src = ROOT / "src"
    wanted = {
        p.relative_to(src).as_posix()
        for p in src.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc" and "egg-info" not in str(p)
    }
    assert sorted(wanted - names) == []
    assert {"helpers/data/fonts/TrainperfSansSC-Regular.otf", "helpers/data/strings_zh.json"} <= names
    meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
    meta = Parser().parsestr(zipfile.ZipFile(dist["wheel"]).read(meta_name).decode())
    assert meta["Name"] == "trainperf-course" and meta["Version"] == helpers.__version__
    import trainperf

    assert trainperf.__version__ == helpers.__version__
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert set(urls) >= {"Homepage", "Source"} and all(u.startswith("https://") for u in urls.values())
    assert meta["License-Expression"] == "MIT"
    assert {"LICENSE", "src/helpers/data/fonts/OFL.txt"} <= set(meta.get_all("License-File"))
    assert any(n.endswith(".dist-info/licenses/src/helpers/data/fonts/OFL.txt") for n in names)


def test_sdist_builds_the_same_package(dist):
    with tarfile.open(dist["sdist"]) as sdist:
        members = {m.split("/", 1)[1] for m in sdist.getnames() if "/" in m}
    assert {
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "src/helpers/__init__.py",
        "src/helpers/data/fonts/TrainperfSansSC-Regular.otf",
        "src/helpers/data/fonts/OFL.txt",
        "src/trainperf/cli.py",
    } <= members


def test_readmes_say_how_to_install_anywhere():
    """The set-up facts a learner needs, in both languages: PyTorch's CPU index, a PyPI mirror,
    the index name the setup cell installs, and --root for grading outside the checkout."""
    cpu = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
    for name in ("README.md", "README.zh.md"):
        text = (ROOT / name).read_text(encoding="utf-8")
        for needed in (
            cpu,
            "pip config set global.index-url",
            "PIP_INDEX_URL",
            "trainperf-course",
            "trainperf --root",
            "pip install -e",
            "TRAINPERF_SPEC",
        ):
            assert needed in text, f"{name} does not say {needed!r}"
    assert "an installed torch is\nkept" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "已经安装的 torch 会被保留" in (ROOT / "README.zh.md").read_text(encoding="utf-8")
    assert "README.zh.md" in (ROOT / "README.md").read_text(encoding="utf-8")
