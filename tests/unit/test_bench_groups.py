"""``make bench`` runs its groups in one process: one group's local cloud must not weigh on the next."""

from __future__ import annotations

from moto.sqs.models import sqs_backends

from rebound_local.bench import forget_group
from rebound_local.cloud import region_backend


def test_a_group_leaves_nothing_in_moto_for_the_next_to_carry() -> None:
    region_backend(sqs_backends).create_queue("left-by-a-group")
    assert "left-by-a-group" in region_backend(sqs_backends).queues
    forget_group()
    assert "left-by-a-group" not in region_backend(sqs_backends).queues
