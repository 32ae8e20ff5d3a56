"""The verify benchmark's two processes: the local cloud in a child, the client in the bench's."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_the_verify_bench_checks_every_seeded_chain_against_a_local_cloud_in_its_own_process() -> None:
    from rebound_local.bench.verify import bench_verify

    figures = bench_verify(4)

    assert (figures["chains"], figures["records"], figures["intact"]) == (4, 12, 4)
    assert figures["local_cloud_cpu_seconds"] > 0  # reported by the child, over the verification
    assert figures["moto_scan"]["items"] == 12 + 4  # every record and every run, scanned again
