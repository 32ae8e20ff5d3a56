"""``Forked``: an answer computed in a forked child, or here when the child gives none; either
way the same answer, or the same error."""

from __future__ import annotations

import os
import threading
import time

import pytest

from rebound_local.forked import Forked

PARENT = os.getpid()


def where() -> tuple[str, int]:
    return ("child" if os.getpid() != PARENT else "parent", 42)


def test_the_child_answers_while_this_process_goes_on() -> None:
    answer = Forked(where)
    assert answer.forked
    assert answer.result() == ("child", 42)


def test_an_error_in_the_child_is_raised_here_as_computing_it_here_raises_it() -> None:
    def fail() -> int:
        raise ValueError(f"broken in {'parent' if os.getpid() == PARENT else 'child'}")

    with pytest.raises(ValueError, match="broken in parent"):
        Forked(fail).result()


def test_an_answer_that_cannot_be_sent_back_is_computed_here() -> None:
    def lock_or_value() -> object:
        return threading.Lock() if os.getpid() != PARENT else "here"

    assert Forked(lock_or_value).result() == "here"


def test_a_child_that_does_not_answer_in_time_is_stopped_and_the_answer_computed_here() -> None:
    def slow_in_the_child() -> str:
        if os.getpid() != PARENT:
            time.sleep(60)
        return "here"

    started = time.monotonic()
    assert Forked(slow_in_the_child, timeout_s=0.5).result() == "here"
    assert time.monotonic() - started < 30


def test_a_large_answer_comes_back_whole() -> None:
    big = {f"chain-{n}": ["x" * 50] * 20 for n in range(5_000)}  # several pipe buffers' worth
    assert Forked(lambda: big).result() == big


def test_when_the_child_gives_no_answer_this_process_answers_its_own_way() -> None:
    def refuse() -> str:
        raise RuntimeError("the lock was held at the fork")

    assert Forked(refuse, here=lambda: "read here").result() == "read here"
    assert Forked(lambda: "read there", here=lambda: "read here").result() == "read there"


def test_a_child_whose_answer_nobody_asked_for_is_stopped_and_reaped() -> None:
    def slow() -> int:
        time.sleep(60 if os.getpid() != PARENT else 0)
        return 1

    with pytest.raises(RuntimeError, match="the report failed"), Forked(slow) as answer:
        pid = answer.pid
        assert pid is not None
        raise RuntimeError("the report failed")
    assert answer.pid is None and not answer.forked
    with pytest.raises(ChildProcessError):  # already reaped: not even a zombie is left
        os.waitpid(pid, os.WNOHANG)
    assert answer.result() == 1  # asked after all: computed here
