"""Cluster triage: every node's logs in one timeline, the first node to fail and the propagation.

    report = triage_cluster(["cluster.tar.gz"])                 # a `bundle --cluster` archive
    report = triage_cluster(named=[("node0", "logs/n0"), ...])  # folders of logs
    report.roots[0]   # the first node to fail, the event that started it, and why
    report.chain      # cause -> effect links, across nodes and within one

Headless (no typer, rich or textual); `engine.incident.html` renders the timeline page.
"""

from engine.incident.analyse import triage_cluster
from engine.incident.inputs import is_cluster
from engine.incident.model import IncidentReport, Link, NodeEvent, NodeSummary, Peer, Root

__all__ = ["IncidentReport", "Link", "NodeEvent", "NodeSummary", "Peer", "Root", "is_cluster", "triage_cluster"]
