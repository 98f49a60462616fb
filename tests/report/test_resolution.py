"""The notes on what the cells can catch (report/resolution.py): cells compared with one or two
stored sessions say that the prior stands (nearly) unchecked and how many sessions to record."""

from __future__ import annotations

from specguard.decide.prior import SpreadSource
from specguard.report.resolution import FULL_HISTORY, few_sessions_lines
from specguard.report.results import detectable_drop, spread_source_doc

EST = {"ratio": 1.0, "low": 0.96, "high": 1.04, "threshold": 0.97, "p_value": 0.5, "dof": 16.0, "confidence": 0.9995,
       "between_sd": 0.012, "between_source": spread_source_doc(SpreadSource())}


def _decision(config: str, level: str, sessions: int, gate: str = "throughput", against: str = "baseline") -> dict:
    return {"gate": gate, "config": config, "level": level, "verdict": "pass", "estimate": EST,
            "versus": {"against": against, "name": "", "sessions": sessions}}


def _doc(*decisions) -> dict:
    return {"tolerances": {"fail_rule": "significant", "prior_between_sd": 0.012}, "decisions": list(decisions)}


def test_one_stored_session_says_the_prior_is_unchecked_and_how_many_more_to_record():
    doc = _doc(_decision("baseline", "c1", 1), _decision("eagle3", "c4", 1), _decision("mtp", "c1", 2),
               _decision("eagle3", "c16", 5), _decision("eagle3", "c1", 1, gate="step_time"),
               _decision("eagle3", "c1", 0, gate="speculation", against="reference"))
    one, two = few_sessions_lines(doc)
    drop = round(detectable_drop(EST) * 100)
    assert one == (f"1 stored session behind 2 throughput cell(s) (baseline c1, eagle3 c4): the prior spread (1.2%) "
                   f"is unchecked, so it counts double; they catch tok/s drops from {drop}% on, 9 times in 10; record "
                   f"2 more session(s) on unchanged code (pytest perf_tests --update-baselines) to gate at the prior "
                   f"as declared, {FULL_HISTORY - 1} for the guarantees docs/guarantees.md gives at K = 5")
    assert two.startswith("2 stored sessions behind 1 throughput cell(s) (mtp c1): the prior spread (1.2%) is checked "
                          "on one degree of freedom, so it counts double") and "record 1 more session(s)" in two
    assert ", 3 for the guarantees" in two
    assert few_sessions_lines(_doc(_decision("eagle3", "c16", 5))) == []


def test_a_suite_that_keeps_fewer_sessions_than_the_guarantees_need_is_told_to_keep_more():
    doc = _doc(_decision("baseline", "c1", 1))
    doc["tolerances"]["history_sessions"] = 3  # recording alone would never reach K = 5: the store keeps 3
    (line,) = few_sessions_lines(doc)
    assert line.endswith("4 for the guarantees docs/guarantees.md gives at K = 5 (raise [tolerances] history_sessions (3) "
                         "to 5 first)")
    doc["tolerances"]["history_sessions"] = 8
    assert "raise" not in few_sessions_lines(doc)[0]
