"""Learner path 3: Binder. Build the environment from ``binder/`` the way repo2docker does
(a copy of the repository, ``pip install -r binder/requirements.txt`` from its root, then
``binder/postBuild``) in a fresh venv, then check that ``helpers`` imports and that JupyterLab
lists the ipywidgets front end as enabled.

Two things differ here from mybinder.org, both because this machine reaches only PyPI:
- the requirements' extra index (the CPU builds of torch at download.pytorch.org) cannot be
  reached, so pip is told not to retry it (``PIP_RETRIES=0``; with pip's default five retries
  per package the install takes about 14 minutes instead of one) and falls through to PyPI;
- torch is preinstalled in the venv (the CPU build CI uses), standing in for the one Binder
  takes from that index; the requirement ``torch>=2.4`` must accept it and leave it in place.
"""

from __future__ import annotations

import os
import re

import envkit
import pytest
from conftest import once_per_worker
from envkit import run

pytestmark = pytest.mark.env


@pytest.fixture(scope="module")
def binder_env(tmp_path_factory) -> dict:
    return once_per_worker("binder-env", lambda: _build_binder_env(tmp_path_factory))


def _build_binder_env(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("binder")
    repo = envkit.copy_project(base / "repo")
    python = envkit.base_python()
    torch_dir = envkit.torch_site(python, tmp_path_factory.getbasetemp())
    vpython = envkit.make_venv(python, base / "venv", torch_dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PYTHONPATH"))}
    env.update(
        PATH=f"{vpython.parent}{os.pathsep}{env.get('PATH', '')}",
        PIP_RETRIES="0",
        PIP_DEFAULT_TIMEOUT="20",
        HOME=str(base / "home"),  # postBuild writes user config
        JUPYTER_CONFIG_DIR=str(base / "home" / ".jupyter"),
    )
    (base / "home").mkdir()
    install = run(
        [vpython, "-m", "pip", "install", "-r", "binder/requirements.txt"], cwd=repo, env=env, timeout=1200
    )
    post = run(["bash", repo / "binder" / "postBuild"], cwd=repo, env=env, timeout=300)
    return {
        "python": vpython,
        "env": env,
        "repo": repo,
        "install": install,
        "postBuild": post,
        "torch_dir": torch_dir,
    }


def test_binder_requirements_install_the_helpers(binder_env):
    vpython = binder_env["python"]
    done = run(
        [
            vpython,
            "-c",
            "import helpers, ipywidgets, torch; from helpers import roofline; "
            "print(helpers.__file__); print(torch.__file__)",
        ],
        env=binder_env["env"],
    )
    helpers_path, torch_path = done.stdout.split()
    assert helpers_path.startswith(str(envkit.site_packages(vpython))), helpers_path  # not the checkout
    # torch>=2.4 accepted the preinstalled CPU build instead of pulling another torch
    assert torch_path.startswith(str(binder_env["torch_dir"])), torch_path


def test_binder_jupyterlab_has_the_widget_front_end_enabled(binder_env):
    listing = run([binder_env["python"].parent / "jupyter", "labextension", "list"], env=binder_env["env"])
    text = re.sub(r"\x1b\[[0-9;]*m", "", listing.stdout + listing.stderr)  # drop colours
    line = next((ln for ln in text.splitlines() if "@jupyter-widgets/jupyterlab-manager" in ln), "")
    assert re.search(r"\benabled\b", line) and re.search(r"\bOK\b", line), text
    lab = run([binder_env["python"], "-m", "jupyterlab", "--version"], env=binder_env["env"])
    assert int(lab.stdout.strip().split(".")[0]) >= 4, lab.stdout
