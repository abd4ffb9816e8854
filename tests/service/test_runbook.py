"""``GET /runbook``: the runbook that every alert's ``runbook_url`` points at, served by
``serve`` itself (docs/deploy.md#runbook-links). Every alert link of every rules file we ship
(the rule source, the plain PrometheusRule, the chart's default rendering) must land on a
heading of the page a real ``serve`` answers."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from exporter.web.runbook import render
from tests.service.conftest import REPO, RunServe


class _Page(HTMLParser):
    """Ids, and anything that would fetch from elsewhere or run code."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.fetches: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.append(str(found["id"]))
        if tag in ("script", "link", "img", "iframe", "object") or "src" in found:
            self.fetches.append(tag)
        if tag == "a":
            self.links.append(str(found.get("href")))


def parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    parser.close()
    return parser


def _alerts(groups: list[dict[str, object]]) -> list[tuple[str, str]]:
    return [(str(r["alert"]), str(r["annotations"]["runbook_url"]))  # type: ignore[index]
            for g in groups for r in g["rules"] if "alert" in r]  # type: ignore[attr-defined]


def shipped_alert_links() -> dict[str, list[tuple[str, str]]]:
    from tests.deploy.test_deploy_manifests import one, plain_objects, rendered_objects

    source = yaml.safe_load((REPO / "dashboards/prometheus/alerts.rules.yml").read_text())
    return {
        "source": _alerts(source["groups"]),
        "plain": _alerts(one(plain_objects(), "PrometheusRule")["spec"]["groups"]),
        "chart": _alerts(one(rendered_objects(), "PrometheusRule")["spec"]["groups"]),
    }


async def test_every_alert_link_lands_on_a_section_of_the_served_page(
        run_serve: RunServe, short_tmp: Path) -> None:
    # No kubelet at all: the runbook does not depend on a poll.
    served = await run_serve(None, "--podresources.socket", str(short_tmp / "none.sock"))
    async with served.session.get(served.url + "/runbook") as response:
        assert response.status == 200
        assert response.content_type == "text/html"
        assert response.charset == "utf-8"
        page = parse(await response.text())
    assert page.fetches == []  # self-contained: nothing fetched, no script
    ids = set(page.ids)
    assert len(ids) == len(page.ids), "duplicate ids"
    links = shipped_alert_links()
    for where, alerts in links.items():
        assert len(alerts) >= 10, where
        for alert, url in alerts:
            parts = urlsplit(url)
            assert parts.path == "/runbook", (where, url)
            assert parts.fragment in ids, f"{where}: {alert} -> {url}: no such section"
    # The page's own table of alerts links to the same sections.
    assert {h.removeprefix("#") for h in page.links if h.startswith("#")} <= ids
    # The index links to the runbook.
    status, body = await served.get("/")
    assert status == 200 and b'href="runbook"' in body


def test_markdown_is_escaped_and_only_safe_links_are_links() -> None:
    page = render(
        "# Alerts & Friends\n\n"
        "Text with <script>alert(1)</script>, **bold**, *em*, `a <b> | c`.\n"
        "[evil](javascript:alert(1)) [doc](deploy.md#x) [web](https://example.com/a?b=1&c=2)"
        " [here](#alerts--friends)\n\n"
        "## Twice\n\n## Twice\n\n"
        "| kind | what |\n|---|---|\n| `a|b` | <i>x</i> |\n\n"
        "- one\n  continued\n- two\n\n"
        "```sh\necho '<b>' && true\n```\n"
        "<!-- a comment -->\n")
    parsed = parse(page)
    assert parsed.ids == ["alerts--friends", "twice", "twice-1"]  # GitHub's anchors
    assert parsed.fetches == []
    assert parsed.links == ["https://example.com/a?b=1&c=2", "#alerts--friends"]
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<i>" not in page and "javascript" not in page
    assert "<strong>bold</strong>" in page and "<em>em</em>" in page
    assert "<code>a &lt;b&gt; | c</code>" in page
    assert "<td><code>a|b</code></td>" in page  # a pipe in code does not split the cell
    assert "<li>one continued</li>" in page
    assert "echo &#x27;&lt;b&gt;&#x27; &amp;&amp; true" in page
    assert "a comment" not in page


@pytest.mark.parametrize("text", ["", "```\nunclosed fence\n", "|only a pipe\n", "#\n", "- \n"])
def test_odd_markdown_still_renders(text: str) -> None:
    assert parse(render(text)).fetches == []
