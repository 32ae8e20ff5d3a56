"""A day's audit key is derived once per process: threads that need a new day's key at the same
moment share one derivation (one ``GenerateMac`` on KMS), and every thread signs with that key."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time

import pytest

from rebound.adapters.audit_keys import DerivedKeys

pytestmark = pytest.mark.unit

LABEL = "rebound-audit/v1/2026-03-07"


def test_threads_needing_a_new_days_key_at_once_derive_it_once() -> None:
    derived: list[str] = []

    def derive(key_id: str, label: str) -> bytes:
        derived.append(label)
        time.sleep(0.05)  # a KMS round trip, long enough for every thread to ask meanwhile
        return hmac.new(b"secret", label.encode(), hashlib.sha256).digest()

    keys = DerivedKeys("local:test", derive)
    start = threading.Barrier(8)
    macs: list[str] = []

    def sign() -> None:
        start.wait()
        macs.append(keys.sign(LABEL, b"a record"))

    threads = [threading.Thread(target=sign) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert derived == [LABEL]
    assert len(macs) == 8 and len(set(macs)) == 1
    assert keys.check("local:test", LABEL, b"a record", macs[0])


def test_each_day_is_derived_once_and_kept() -> None:
    derived: list[str] = []

    def derive(key_id: str, label: str) -> bytes:
        derived.append(label)
        return hashlib.sha256(label.encode()).digest()

    keys = DerivedKeys("local:test", derive)
    for label in (LABEL, LABEL, "rebound-audit/v1/2026-03-08", LABEL):
        keys.sign(label, b"x")
    assert derived == [LABEL, "rebound-audit/v1/2026-03-08"]


def test_deriving_one_days_key_does_not_hold_up_another_days() -> None:
    slow_started = threading.Event()
    release = threading.Event()

    def derive(key_id: str, label: str) -> bytes:
        if label == LABEL:
            slow_started.set()
            assert release.wait(5)
        return hashlib.sha256(label.encode()).digest()

    keys = DerivedKeys("local:test", derive)
    slow = threading.Thread(target=keys.sign, args=(LABEL, b"x"))
    slow.start()
    assert slow_started.wait(5)
    # While the first day's derivation is still under way, another day's key comes at once.
    other = "rebound-audit/v1/2026-03-08"
    assert keys.day_key(other) == hashlib.sha256(other.encode()).digest()
    release.set()
    slow.join()


def test_a_thread_that_waits_for_another_threads_derivation_waits_on_the_clock() -> None:
    """The local runtime's virtual clock moves only when no thread it counts is working: a waiter
    blocked on the lock would count as working while the deriving thread's KMS call waits for the
    clock to move, and neither would go on. A waiter pauses on the clock instead."""
    paused = threading.Event()
    seen: list[bool] = []

    def derive(key_id: str, label: str) -> bytes:
        seen.append(paused.wait(5))  # the call goes on once a waiter has paused on the clock
        return hashlib.sha256(label.encode()).digest()

    def pause(seconds: float) -> None:
        paused.set()
        time.sleep(seconds)

    keys = DerivedKeys("local:test", derive, pause=pause)
    threads = [threading.Thread(target=keys.sign, args=(LABEL, b"x")) for _ in range(2)]
    threads[0].start()
    while not keys._deriving:  # the first thread holds the label's lock
        time.sleep(0.001)
    threads[1].start()
    for thread in threads:
        thread.join(10)
    assert seen == [True]  # derived once, and not before the waiter paused
    assert not any(thread.is_alive() for thread in threads)
