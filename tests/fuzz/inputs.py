"""Strategies for hostile input, and the check that a command failed with one clear line."""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

# Tokens no JSON encoder of ours writes, spliced into documents as raw text: numbers past
# int's digit limit, values the kubelet could never send, non-standard literals, nesting
# deep enough to exhaust the recursion limit.
HOSTILE_TOKENS = (
    "1" * 5000, "-" + "9" * 4400, str(2**63 - 1), str(2**64), "-1", "1e309", "-0", "1.5",
    "NaN", "Infinity", "-Infinity", "null", "true", '""', '"abc"', '"\\u0000"',
    '"\\ud800"', "[]", "{}", "[" * 3000 + "]" * 3000, '{"a":' * 3000 + "1" + "}" * 3000,
)

json_leaves = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
               | st.floats(allow_nan=False, allow_infinity=False)
               | st.text(max_size=20) | st.sampled_from(["0-3", "0,2", "abc", "100m", "1Gi"]))
json_values = st.recursive(
    json_leaves,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12) | st.sampled_from(
        ["containers", "spec", "metadata", "name", "cpus", "resources", "kubeletconfig",
         "cpuManagerPolicy", "reservedSystemCPUs", "entries", "checksum", "policyName",
         "defaultCpuSet", "memory", "numa_node", "cpu_ids", "devices", "topology"]),
        children, max_size=4),
    max_leaves=12)


def _replace_subtree(doc: Any, path: Sequence[int], value: Any) -> Any:
    """``doc`` with the node reached by following ``path`` (indices into each level's
    children, taken modulo their number) replaced by ``value``."""
    if not path or not isinstance(doc, dict | list) or not doc:
        return value
    if isinstance(doc, list):
        i = path[0] % len(doc)
        return [*doc[:i], _replace_subtree(doc[i], path[1:], value), *doc[i + 1:]]
    key = sorted(doc)[path[0] % len(doc)]
    return {**doc, key: _replace_subtree(doc[key], path[1:], value)}


@st.composite
def mutated_json(draw: st.DrawFn, original: Any) -> bytes:
    """A document like ``original`` with one subtree replaced, or one number replaced by a
    hostile token, or the whole text cut short."""
    how = draw(st.sampled_from(["subtree", "token", "truncate", "fresh"]))
    if how == "fresh":
        return json.dumps(draw(json_values)).encode()
    if how == "subtree":
        path = draw(st.lists(st.integers(0, 50), min_size=0, max_size=6))
        return json.dumps(_replace_subtree(original, path, draw(json_values))).encode()
    text = json.dumps(original)
    if how == "truncate":
        return text[:draw(st.integers(0, max(0, len(text) - 1)))].encode()
    spots = [m.span() for m in re.finditer(r"-?\d+(?:\.\d+)?|\"[^\"]*\"|\[\]|\{\}", text)]
    if not spots:
        return text.encode()
    start, end = draw(st.sampled_from(spots))
    return (text[:start] + draw(st.sampled_from(HOSTILE_TOKENS)) + text[end:]).encode()


@st.composite
def mutated_bytes(draw: st.DrawFn, original: bytes) -> bytes:
    """``original`` with bytes flipped, inserted, deleted or cut off, or random bytes."""
    how = draw(st.sampled_from(["random", "flip", "insert", "delete", "truncate"]))
    if how == "random" or not original:
        return draw(st.binary(max_size=512))
    data = bytearray(original)
    at = draw(st.integers(0, len(data) - 1))
    if how == "flip":
        data[at] ^= draw(st.integers(1, 255))
    elif how == "insert":
        data[at:at] = draw(st.binary(min_size=1, max_size=16))
    elif how == "delete":
        del data[at:at + draw(st.integers(1, 16))]
    else:
        del data[at:]
    return bytes(data)


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def run_main(argv: Sequence[str]) -> Outcome:
    """``exporter.cli.main`` in this process, its stdout and stderr captured; argparse's
    exit is an outcome like any other (any other exception propagates)."""
    from exporter.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return Outcome(code, out.getvalue(), err.getvalue())


def assert_clean(outcome: Outcome) -> None:
    """Success, or a failure told in exactly one line and never as a traceback."""
    assert "Traceback" not in outcome.err, outcome.err
    if outcome.code != 0:
        assert len(outcome.err_lines) == 1, outcome.err
