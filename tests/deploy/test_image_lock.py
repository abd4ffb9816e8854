"""The image installs from ``requirements.lock``: every runtime dependency of
pyproject.toml (and its ``postgres`` extra) pinned to one version with the hashes pip checks,
and the Dockerfile installing from it with ``--require-hashes`` only. (No image builder
runs in CI; docs/deploy.md says how a build was checked.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower().replace(
        "_", "-")


def _locked() -> dict[str, tuple[str, list[str]]]:
    """name → (version, hashes) of requirements.lock."""
    text = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    entries: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        head = block.split("\\", 1)[0].strip()
        match = re.match(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==([^\s;]+)", head)
        if match:
            entries[match[1].lower().replace("_", "-")] = (
                match[3], re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
    return entries


def test_every_runtime_dependency_is_pinned_with_hashes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"]}
    wanted |= {_name(r) for r in project["optional-dependencies"]["postgres"]}
    locked = _locked()
    assert wanted <= set(locked), sorted(wanted - set(locked))
    for name, (version, hashes) in locked.items():
        assert hashes, f"{name}=={version} has no hash"
    assert "psycopg-binary" in locked  # the extra's own dependency came along


def test_dockerfile_installs_only_the_locked_files() -> None:
    """The Dockerfile, and build.sh and install.sh, which build the same image without
    Docker: every pip step that fetches or installs dependencies checks the lock's hashes."""
    text = "\n".join((ROOT / name).read_text(encoding="utf-8") for name in (
        "Dockerfile", "deploy/image/build.sh", "deploy/image/install.sh"))
    logical = re.sub(r"\\\n", " ", "\n".join(
        line for line in text.splitlines() if not line.lstrip().startswith("#")))
    installs = re.findall(r"pip\"? (?:install|wheel|download)[^&\n]*", logical)
    assert len(installs) == 6, installs
    for command in installs:
        if "--no-deps" in command and "requirements.lock" not in command:
            continue  # the project's own wheel, its dependencies installed from the lock
        assert "--require-hashes" in command and "requirements.lock" in command, command
    ignored = (ROOT / ".dockerignore").read_text().split()
    for needed in ("requirements.lock", "LICENSE", "pyproject.toml"):
        assert needed not in ignored
