"""The data a cluster triage hands out: frozen dataclasses, rendered by the CLI (table, JSON) and
the HTML timeline alike."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeEvent:
    """One known issue on one node, at the time it was first seen there."""

    node: str
    issue: str  # the triage rule or code id
    title: str
    severity: str
    # "cause" (this node failed by itself) | "likely" (an error triage says is "likely one of"
    # several causes: EJ0001 alone, a crash after an error) | "wait" (it waited on a peer) |
    # "consequence" (a symptom, e.g. the engine's death) | "context"
    role: str
    local: str | None  # the time stamp as the node's log printed it (normalised), None when none
    at: float | None  # seconds since the epoch on the collecting node's clock (offset applied), None when unknown
    count: int
    example: str
    likely: tuple[str, ...] = ()  # triage's "likely one of" candidates (a rule id, else the cause in words)
    code: str | None = None  # a device fault: its code (0x80E18402), what `triage --explain` takes

    def explain(self) -> str:
        """What `ascendctl triage --explain` takes for it."""
        return self.code or self.issue


@dataclass(frozen=True)
class Peer:
    """A peer a node's timeouts named: a rank, an address (and port), resolved to a node when an
    input is that rank or address."""

    rank: int | None
    ip: str | None
    port: int | None
    via: str  # the pattern that named it (engine/incident/roles.yaml)
    count: int
    node: str | None  # the node that holds it; None when no input does

    def label(self) -> str:
        parts = [f"rank {self.rank}" if self.rank is not None else "", self.ip or ""]
        text = " at ".join(p for p in parts if p) or "a peer"
        return f"{text} port {self.port}" if self.port is not None else text


@dataclass(frozen=True)
class NodeSummary:
    name: str
    origin: str  # where it came from (archive member, folder, --node)
    status: str  # "ok" | "no logs" | "no answer" | ... as the collector recorded it
    clock: str  # "offset" (recorded by the collector) | "own" (the log's stamps as printed)
    offset_s: float | None
    ranks: tuple[int, ...]
    addresses: tuple[str, ...]
    inputs: int  # log files read
    lines: int
    cause: NodeEvent | None  # its first own failure (not a wait on a peer)
    first_wait: NodeEvent | None  # its first timeout on a peer
    waits_on: tuple[Peer, ...]
    root_cause: str | None  # what single-node triage names for it
    unreadable: tuple[str, ...] = ()


@dataclass(frozen=True)
class Link:
    """cause -> effect: what one node's failure caused on another node (or on itself)."""

    cause_node: str
    cause: str  # issue id, or "" for a node that logged nothing
    effect_node: str
    effect: str
    via: str  # "rank 5 (ei0002-remote-rank)", "explains", "no peer named"


@dataclass(frozen=True)
class Root:
    node: str  # a node name, or "rank 8 at 192.168.2.199" when no input holds the peer
    event: NodeEvent | None  # the event that started it; None when the node logged nothing
    why: str
    blamed_by: tuple[str, ...]  # nodes whose timeouts named it
    affected: tuple[str, ...]  # nodes in its propagation chain (it included)
    in_inputs: bool = True
    ranks: tuple[int, ...] = ()  # the rank(s) that failed: those the timeouts named, else the node's only rank


@dataclass(frozen=True)
class IncidentReport:
    nodes: list[NodeSummary]
    timeline: list[NodeEvent]  # every node's events, in aligned time order (unknown times last)
    roots: list[Root]  # the first to fail first; further roots are independent failures
    chain: list[Link]
    clock: str  # how the clocks were aligned, in words
    problems: list[str] = field(default_factory=list)  # bad input, each one line
    notes: list[str] = field(default_factory=list)
