"""heap.release_free_memory: freed C-heap pages go back to the OS where glibc is the libc."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import pytest

from pytest_modal_eval.runs import heap


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS line")


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="malloc_trim is glibc's",
)
def test_free_heap_pages_are_returned() -> None:
    # 4 kB blocks come from glibc's heap (below its mmap threshold); keeping every 64th pins
    # the heap's extent, so freeing the rest leaves ~120 MB of free, resident pages inside it.
    blocks = [bytes(4096) for _ in range(30_000)]
    kept = blocks[::64]
    del blocks
    before = _rss_mb()
    assert heap.release_free_memory()
    after = _rss_mb()
    assert before - after > 50, f"RSS {before:.0f} -> {after:.0f} MB"
    assert len(kept) == 469


def test_does_nothing_without_malloc_trim(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "_TRIM", None)
    assert heap.release_free_memory() is False
