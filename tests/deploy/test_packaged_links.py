"""Every link the shipped runbook (``/runbook``, rendered from the package's runbook.md) and
the demo's banner print resolves inside the package: the runbook's links are to its own
sections (or absolute), the banner's to routes the exporter serves and to runbook
sections that exist. docs/ is not in the wheel, so nothing may point into it but the
project's home (docs/design.md#packaging), which every place that names it names alike."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from exporter import DOCS, HOME
from exporter.commands.demo import RUNBOOK_ANCHOR, _print_urls, drift_notes
from exporter.demo.node import start_demo_node
from exporter.web.runbook import SOURCE, render

ROOT = Path(__file__).resolve().parents[2]
URL = "http://127.0.0.1:1"


def _page() -> tuple[set[str], list[str]]:
    page = render(SOURCE.read_text(encoding="utf-8"))
    return set(re.findall(r'\sid="([^"]+)"', page)), re.findall(r'href="([^"]+)"', page)


def test_runbook_links_resolve_in_the_package() -> None:
    ids, hrefs = _page()
    assert hrefs, "the runbook links to nothing: the pattern no longer matches"
    for href in hrefs:
        if href.startswith("#"):
            assert href[1:] in ids, f"/runbook links to a missing section {href}"
        else:
            assert re.match(r"https?://", href), f"/runbook links to {href}, not in the package"


def test_packaged_runbook_is_the_docs_runbook() -> None:
    """The build step that makes the copy ran (deploy/build.py --check says the same)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("deploy_build", ROOT / "deploy" / "build.py")
    assert spec and spec.loader
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    want = build.RUNBOOK_HEADER + build.packaged_runbook(
        (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8"))
    assert SOURCE.read_text(encoding="utf-8") == want
    assert not re.search(r"\]\((?!#|https?:)[^)]*\.md", want)


async def test_demo_banner_links_resolve(short_tmp: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    demo, description = await start_demo_node(short_tmp, "2x8x2")
    try:
        _print_urls(description, drift_notes(demo))(URL)
    finally:
        await demo.stop()
    out = capsys.readouterr().out
    assert "docs/" not in out.replace(DOCS, ""), out
    assert f"documentation       {DOCS}" in out
    ids, _ = _page()
    assert RUNBOOK_ANCHOR in ids
    served = {"/", "/metrics", "/api/v1/ledger", "/api/v1/nodes", "/runbook"}
    for link in re.findall(re.escape(URL) + r"(/[^\s)]*)", out):
        path, _, fragment = link.partition("#")
        assert path in served, link
        if fragment:
            assert path == "/runbook" and fragment in ids, link
    assert f"{URL}/runbook#{RUNBOOK_ANCHOR}" in out


def test_project_urls() -> None:
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert urls == {"Homepage": HOME, "Documentation": DOCS, "Source": HOME,
                    "Issues": HOME + "/issues"}
    import json

    import yaml

    image = json.loads((ROOT / "deploy" / "image" / "config.json").read_text())
    assert image["Labels"]["org.opencontainers.image.source"] == HOME
    chart = yaml.safe_load((ROOT / "deploy" / "helm" / "podres-exporter" / "Chart.yaml")
                           .read_text())
    assert (chart["home"], chart["sources"]) == (HOME, [HOME])
    assert HOME in (ROOT / "README.md").read_text()
    assert f'href="{DOCS}"' in render(SOURCE.read_text(encoding="utf-8"))
    from exporter.cli import build_parser

    assert f"Documentation: {DOCS}" in " ".join(build_parser().format_help().split())


# Where the project names a home of its own: none may name another.
_NAMING = ("pyproject.toml", "README.md", "Dockerfile", "deploy/image/config.json",
           "deploy/helm/podres-exporter/Chart.yaml", "docs/runbook.md", "docs/design.md",
           "docs/deploy.md", "exporter/web/runbook.md", "exporter/__init__.py")


def test_one_home_everywhere() -> None:
    """Every github.com URL these files hold is the home or a page under it: a second
    spelling (another owner, http://, a trailing .git) would send a user elsewhere."""
    found = 0
    for name in _NAMING:
        for url in re.findall(r"https?://github\.com/[^\s)>\"'\]]*",
                              (ROOT / name).read_text(encoding="utf-8")):
            found += 1
            assert url == HOME or url.startswith(HOME + "/"), f"{name}: {url}"
    assert found >= 8
