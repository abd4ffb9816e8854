"""``GET /runbook``: the alert runbook (docs/runbook.md, shipped in the package as
``runbook.md`` by deploy/build.py) as one self-contained HTML page, so that the alerts'
``runbook_url`` resolves on every install without a web site of the project
(docs/deploy.md#runbook-links).

The Markdown is the subset the runbook is written in: headings, paragraphs, ``-`` lists,
fenced code, pipe tables, and inline code, links, ``**strong**`` and ``*emphasis*``.
Headings get GitHub's anchor ids, which are the fragments the alerts' URLs carry. Only
in-page (``#…``) and ``http(s)`` links become links: relative links name other files of
``docs/``, which the exporter does not serve, so they stay as their text."""

from __future__ import annotations

import functools
import html
import re
from pathlib import Path

from aiohttp import web

SOURCE = Path(__file__).with_name("runbook.md")

_FENCE = re.compile(r"^```\s*([\w+-]*)\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_ITEM = re.compile(r"^[-*]\s+(.*)$")
_TABLE_RULE = re.compile(r"^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_STRONG = re.compile(r"\*\*(.+?)\*\*")
_EMPHASIS = re.compile(r"(?<![\w*])\*([^*\s](?:[^*]*[^*\s])?)\*(?![\w*])")
_COMMENT = re.compile(r"<!--.*?-->", re.S)

# Readable without it: a Content-Security-Policy that forbids inline style (web config
# headers) leaves the page plain, not broken.
_STYLE = """body{font:16px/1.5 system-ui,sans-serif;max-width:60rem;margin:0 auto;padding:1rem}
code,pre{font-family:ui-monospace,monospace;font-size:90%}
pre{background:#f4f4f4;padding:.6rem;overflow-x:auto}
table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:.25rem .5rem;
vertical-align:top}h2{border-top:1px solid #ddd;padding-top:1rem}"""


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading's text: what ``#<alert name in lower case>`` names."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def inline(text: str) -> str:
    """One line or paragraph of Markdown text as HTML, everything else escaped."""
    codes: list[str] = []

    def keep(match: re.Match[str]) -> str:
        codes.append(f"<code>{html.escape(match.group(2).strip())}</code>")
        return f"\x00{len(codes) - 1}\x00"

    out = html.escape(_CODE_SPAN.sub(keep, text))

    def link(match: re.Match[str]) -> str:
        label, target = match.group(1), html.unescape(match.group(2))
        if target.startswith("#") or re.match(r"https?://", target):
            return f'<a href="{html.escape(target)}">{label}</a>'
        return label

    out = _LINK.sub(link, out)
    out = _STRONG.sub(r"<strong>\1</strong>", out)
    out = _EMPHASIS.sub(r"<em>\1</em>", out)
    return re.sub("\x00(\\d+)\x00", lambda m: codes[int(m.group(1))], out)


def _cells(row: str) -> list[str]:
    """A table row's cells; a ``|`` inside inline code does not split."""
    row = row.strip().removeprefix("|").removesuffix("|")
    cells, current, ticks = [], "", False
    for char in row:
        if char == "`":
            ticks = not ticks
        if char == "|" and not ticks:
            cells.append(current.strip())
            current = ""
        else:
            current += char
    cells.append(current.strip())
    return cells


class _Blocks:
    """Markdown lines to HTML blocks, one pass."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.at = 0
        self.out: list[str] = []
        self.ids: dict[str, int] = {}

    def render(self) -> str:
        while self.at < len(self.lines):
            line = self.lines[self.at]
            if not line.strip():
                self.at += 1
            elif fence := _FENCE.match(line):
                self._code(fence.group(1))
            elif heading := _HEADING.match(line):
                self._heading(len(heading.group(1)), heading.group(2))
            elif line.startswith("|") and self._next_is_rule():
                self._table()
            elif _ITEM.match(line):
                self._list()
            else:
                self._paragraph()
        return "\n".join(self.out)

    def _next_is_rule(self) -> bool:
        return self.at + 1 < len(self.lines) and bool(_TABLE_RULE.match(self.lines[self.at + 1]))

    def _starts_block(self, line: str) -> bool:
        return bool(not line.strip() or _FENCE.match(line) or _HEADING.match(line)
                    or _ITEM.match(line) or line.startswith("|"))

    def _code(self, language: str) -> None:
        self.at += 1
        body: list[str] = []
        while self.at < len(self.lines) and not self.lines[self.at].startswith("```"):
            body.append(self.lines[self.at])
            self.at += 1
        self.at += 1  # the closing fence (or the end of the text)
        cls = f' class="language-{language}"' if language else ""
        self.out.append(f"<pre><code{cls}>{html.escape(chr(10).join(body))}</code></pre>")

    def _heading(self, level: int, text: str) -> None:
        self.at += 1
        ident = anchor(text)
        # GitHub's rule for repeated headings: -1, -2, … after the first.
        seen = self.ids.get(ident, 0)
        self.ids[ident] = seen + 1
        if seen:
            ident = f"{ident}-{seen}"
        self.out.append(f'<h{level} id="{html.escape(ident)}">{inline(text)}</h{level}>')

    def _table(self) -> None:
        head = _cells(self.lines[self.at])
        self.at += 2
        rows = [f"<tr>{''.join(f'<th>{inline(c)}</th>' for c in head)}</tr>"]
        while self.at < len(self.lines) and self.lines[self.at].startswith("|"):
            cells = _cells(self.lines[self.at])
            rows.append(f"<tr>{''.join(f'<td>{inline(c)}</td>' for c in cells)}</tr>")
            self.at += 1
        self.out.append("<table>\n" + "\n".join(rows) + "\n</table>")

    def _list(self) -> None:
        items: list[list[str]] = []
        while self.at < len(self.lines):
            line = self.lines[self.at]
            item = _ITEM.match(line)
            if item:
                items.append([item.group(1)])
            elif items and line.strip() and line[:1].isspace():
                items[-1].append(line.strip())  # a continuation line of the item
            else:
                break
            self.at += 1
        self.out.append("<ul>\n" + "\n".join(
            f"<li>{inline(' '.join(parts))}</li>" for parts in items) + "\n</ul>")

    def _paragraph(self) -> None:
        parts = [self.lines[self.at].strip()]
        self.at += 1
        while self.at < len(self.lines) and not self._starts_block(self.lines[self.at]):
            parts.append(self.lines[self.at].strip())
            self.at += 1
        self.out.append(f"<p>{inline(' '.join(parts))}</p>")


def render(markdown: str, *, title: str = "podres-exporter runbook") -> str:
    """A whole HTML page for ``markdown``: no script, nothing fetched from elsewhere."""
    body = _Blocks(_COMMENT.sub("", markdown).splitlines()).render()
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style></head>\n"
            f"<body>\n{body}\n"
            f"</body></html>\n")


@functools.cache
def page() -> bytes:
    """The rendered runbook, made once per process at the first request."""
    return render(SOURCE.read_text(encoding="utf-8")).encode("utf-8")


async def runbook(_: web.Request) -> web.Response:
    return web.Response(body=page(), content_type="text/html", charset="utf-8")


def add_route(app: web.Application) -> None:
    app.router.add_get("/runbook", runbook)
