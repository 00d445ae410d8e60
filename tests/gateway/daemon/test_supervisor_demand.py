"""An on-demand child of `system start` (the housekeeping cluster's policy), with a real process:
started when there is work, stopped after its linger without, an idle stop never taken for a
death, and a question that cannot be answered changing nothing."""

from __future__ import annotations

import logging
import sys

import pytest

from gateway.daemon.supervisor import Child, Demand

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


class Answers:
    def __init__(self) -> None:
        self.work = True
        self.fail = False
        self.asked: list[bool] = []

    def __call__(self, running: bool) -> bool:
        self.asked.append(running)
        if self.fail:
            raise OSError("database is locked")
        return self.work


@pytest.fixture
def child():
    answers = Answers()
    made = Child("housekeeping", SLEEPER, {}, reloads=False, demand=Demand(answers, every=5.0, linger=30.0))
    yield made, answers
    if made.process is not None and made.process.poll() is None:
        made.process.kill()
        made.process.wait()


def test_an_on_demand_child_waits_for_work_then_parks_after_its_linger_without_counting_a_death(child):
    made, answers = child
    assert not made.needed  # nothing started before the first answer
    made.ask(0.0)
    assert made.needed and answers.asked == [False]
    made.start()
    answers.work = False
    made.ask(5.0)  # idle from here
    made.ask(30.0)
    assert made.process is not None and made.process.poll() is None, "parked before its linger was up"
    made.ask(35.0)  # 30 s idle: SIGTERM
    code = made.process.wait(timeout=10)
    made.exited(code, 36.0)
    assert made.process is None and made.failures == 0 and not made.needed
    made.ask(40.0)
    assert not made.needed  # still no work: stays down
    answers.work = True
    made.ask(45.0)
    assert made.needed and made.restart_at <= 45.0  # started again at once, no back-off


def test_work_arriving_during_the_linger_keeps_the_child_up(child):
    made, answers = child
    made.ask(0.0)
    made.start()
    answers.work = False
    made.ask(5.0)
    answers.work = True
    made.ask(20.0)
    answers.work = False
    made.ask(40.0)
    made.ask(65.0)  # 25 s since the last work: not yet
    assert made.process is not None and made.process.poll() is None
    assert not made.parked


def test_a_question_that_fails_leaves_the_child_as_it_is_and_is_logged_once(child, monkeypatch, caplog):
    monkeypatch.setattr(logging.getLogger("ductile"), "propagate", True)  # to caplog
    made, answers = child
    made.ask(0.0)
    made.start()
    answers.work = False
    answers.fail = True
    for now in (5.0, 40.0, 80.0, 120.0):
        made.ask(now)
    assert made.process is not None and made.process.poll() is None and made.needed
    assert caplog.text.count("could not tell whether housekeeping has work; leaving it running") == 1, caplog.text
    answers.fail = False
    made.ask(125.0)
    assert "asking for work succeeds again" in caplog.text
    assert answers.asked == [False, True, True, True, True, True]


def test_a_child_that_dies_while_wanted_is_a_death_with_its_back_off(child):
    made, _ = child
    made.ask(0.0)
    made.start()
    assert made.process is not None
    made.process.kill()
    code = made.process.wait(timeout=10)
    made.exited(code, 1.0)
    assert made.failures == 1 and made.restart_at == 2.0  # 1 s back-off, as for any child
