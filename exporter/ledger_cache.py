"""A node's ledger, computed again only when its raw inputs changed
(docs/design.md#data-path).

The raw inputs are hashed, and when the hash equals the previous poll's the previous
ledger (and the problems found in its inputs) is reused. Nothing is ever computed by
deltas; a changed input means a full recompute: decode, assemble, reconcile.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping

from exporter.assemble import SourceKey, snapshot_from_raw
from exporter.errors import SourceError
from exporter.rawnode import Body, PackedBody, RawNode, body_digest
from reconciler.allocator.live import NodeState, node_state
from reconciler.ledger import Ledger
from reconciler.reconcile import reconcile
from reconciler.snapshot import NodeSnapshot

# The size of the answers to decode (List, and /pods when read) up to which a changed node
# is reconciled on the event loop rather than in a worker thread: a List of some 3,000 pods
# (1,000 pods take 5 ms on the benchmark's machine, so a scrape waits at most ~15 ms, once
# per change), or with the kubelet's /pods a node of a couple of hundred pods.
INLINE_BYTES = 256 * 1024


def digest(*parts: bytes | None) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        if part is None:
            h.update(b"\x00none")
        else:
            h.update(len(part).to_bytes(8, "little"))
            h.update(part)
    return h.digest()


class LedgerByContent:
    """The last ledger, the problems found in its inputs and its placement state, keyed by
    the digest of the raw inputs (not the snapshot: the ledger is all that is served, and
    a node's snapshot is megabytes)."""

    def __init__(self, node_name: str, *, checkpoints: bool) -> None:
        self.node_name = node_name
        self.checkpoints = checkpoints  # whether the checkpoint source is configured
        self._key = b""
        self._last: tuple[Ledger, Mapping[SourceKey, SourceError]] | None = None
        # The last ledger's placement state, made on first request from the few parts of
        # its snapshot it reads (the history asks for it; a node without history never
        # pays for it, nor does a poll before a scrape can see its ledger).
        self._placement: NodeState | None = None
        self._placement_of: tuple[NodeSnapshot, Ledger] | None = None
        self._pods_digest: tuple[Body | None, bytes | None] = (None, None)

    def key(self, raw: RawNode, topology_generation: int, metrics_key: bytes) -> bytes:
        """What identifies the ledger of ``raw``: its bytes, the topology's generation
        (the source re-reads files only when they change) and the feature gates of the
        kubelet's ``/metrics`` (``metrics_key``; its counters change on every read)."""
        checkpoints = [part for name, data in raw.checkpoints for part in (name.encode(), data)]
        generation = topology_generation if raw.topology else 0
        return digest(raw.list_response, raw.allocatable, self._digest_of_pods(raw.pods),
                      raw.configz, metrics_key, generation.to_bytes(8, "little"),
                      ",".join(sorted(raw.unimplemented)).encode(),
                      self.node_name.encode(), *checkpoints)

    def _digest_of_pods(self, pods: Body | None) -> bytes | None:
        """The digest of a /pods body, computed once per body held: it is ~1.5 KB a pod and
        the same object from one read to the next (about 1 ms a poll on a 1000-pod node).
        A body held deflated carries its digest."""
        if pods is None:
            return None
        if isinstance(pods, PackedBody):
            return pods.digest
        if pods is not self._pods_digest[0]:
            self._pods_digest = (pods, body_digest(pods))
        return self._pods_digest[1]

    async def ledger(self, raw: RawNode, key: bytes, errors: dict[SourceKey, SourceError]
                     ) -> tuple[Ledger, bool]:
        """The ledger of ``raw`` and whether it was computed afresh; the problems found in
        its optional parts are added to ``errors``, on every poll that reads the same bad
        bytes again."""
        changed = key != self._key or self._last is None
        if changed:
            # A changed node is decoded and reconciled in a worker thread: 65k pods took
            # 1.4 s, and scrapes are answered on the loop meanwhile. A small one is done
            # on the loop: a few milliseconds, less than the hand-off to a thread and back
            # costs. An unchanged node (the common case) costs one hash, on the loop.
            if len(raw.list_response or b"") + len(raw.pods or b"") <= INLINE_BYTES:
                self._last = self.compute(raw)
            else:
                self._last = await asyncio.to_thread(self.compute, raw)
            self._key = key
        assert self._last is not None
        ledger, problems = self._last
        for source_key, exc in problems.items():
            errors.setdefault(source_key, exc)
        return ledger, changed

    def compute(self, raw: RawNode) -> tuple[Ledger, Mapping[SourceKey, SourceError]]:
        assembled = snapshot_from_raw(raw, self.node_name, checkpoints=self.checkpoints)
        snapshot = assembled.snapshot
        ledger = reconcile(snapshot)
        self._placement = None
        self._placement_of = (NodeSnapshot(pods=snapshot.pods, allocatable=snapshot.allocatable,
                                           topology=snapshot.topology,
                                           kubelet_config=snapshot.kubelet_config), ledger)
        return ledger, assembled.errors

    def placement(self) -> NodeState | None:
        """What plan --fleet models the last ledger's node from (None: its CPU topology is
        unknown); reconciler.allocator.live.node_state, made once per ledger."""
        if self._placement_of is not None:
            self._placement = node_state(*self._placement_of)
            self._placement_of = None
        return self._placement
