"""A process and its descendants: which pids they are, and the host memory they hold together.
An engine is a tree (vLLM's API server, its EngineCore, one worker per device), so its figures
are the tree's."""

from __future__ import annotations


def tree_pids(pid: int) -> set[int]:
    """`pid` and every live descendant. Only `pid` when the tree cannot be walked (gone, or
    another user's)."""
    pids = {pid}
    try:
        import psutil

        pids |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except Exception:  # noqa: BLE001 - a process gone, or not ours to look at: its own pid still counts
        pass
    return pids


def tree_rss_mib(pid: int | None) -> float | None:
    """Resident memory of the tree in MiB; None when `pid` is None or the process is gone or not
    ours to read. A child that exits while being read is left out."""
    if pid is None:
        return None
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
        total = root.memory_info().rss
    except psutil.Error:
        return None
    for proc in procs[1:]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total / (1024 * 1024)


__all__ = ["tree_pids", "tree_rss_mib"]
