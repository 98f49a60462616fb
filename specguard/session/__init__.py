"""A pytest session's gates, split where a concept ends (see gate_session.py for the wiring)."""

from specguard.session.gate_session import GateSession
from specguard.session.options import ConfigUnavailable, RunOptions, api_key_from, parse_server_args, parse_server_urls
from specguard.session.plan import Plan, PlannedTest

__all__ = ["ConfigUnavailable", "GateSession", "Plan", "PlannedTest", "RunOptions", "api_key_from",
           "parse_server_args", "parse_server_urls"]
