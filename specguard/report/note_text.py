"""A note's sentence (``specguard.notes``): measure/, engines/, the session and the plugin record
what they saw as data, and this is the one place that words it."""

from __future__ import annotations

from collections.abc import Callable

from specguard.engines import ArgCheck
from specguard.measure.accept_sources import REQUESTS
from specguard.notes import Note, NoteKind, RewriteCause
from specguard.sglang_rules import SGLANG_VERSION
from specguard.sglang_rules.speculative import (
    AUTO_PARAMS_DEFAULT,
    AUTO_PARAMS_WIDE,
    NGRAM_DEFAULT_BFS_BREADTH,
    NGRAM_DEFAULT_DRAFT_TOKENS,
)

# ACCEPT_SOURCES_DISAGREE: the figures that are not a source's reading
_CHECK_FIELDS = ("own", "accept_length", "suspect")


def _accept_sources(n: Note) -> str:
    sources = [name for name, _ in n.figures if name not in _CHECK_FIELDS and not name.endswith("_allowed")]
    parts = [f"{s} {float(n[s]):.3f} (allowed +-{float(n[s + '_allowed']):.3f})" for s in sources]
    suspect = str(n["suspect"])
    one = suspect != REQUESTS and " or " not in suspect and "," not in suspect
    named = "the requests' own verify counts" if suspect == REQUESTS else suspect
    return (f"accept length sources disagree: {n['own']} {float(n['accept_length']):.3f}; {'; '.join(parts)}: "
            f"{named} disagree{'s' if one else ''} with the others")


# ARG_REWRITTEN: what follows "server runs N" for each cause
_BECAUSE = {
    RewriteCause.UNSAID: "",
    RewriteCause.TOPK1: ": topk=1 forces num_steps+1",
    RewriteCause.ADAPTIVE: ": adaptive speculation sets num_steps + 1 (_init_adaptive_speculative_params)",
    RewriteCause.NGRAM_BREADTH: (f": NGRAM's topk is --speculative-ngram-max-bfs-breadth (default "
                                 f"{NGRAM_DEFAULT_BFS_BREADTH}), set that flag instead"),
}


def _rewritten(n: Note) -> str:
    asked = f"{n['asked']} draft tokens" if n["setting"] == "num_draft_tokens" else f"{n['setting']}={n['asked']}"
    cause = RewriteCause(n["cause"])
    if cause == RewriteCause.COUNTED_POSITIONS:
        return f"asked for {asked}, server's /metrics counts acceptance at {n['runs']} positions"
    server = "NGRAM server" if cause == RewriteCause.NGRAM_BREADTH else "server"
    return f"asked for {asked}, {server} runs {n['runs']}{_BECAUSE[cause]}"


def _default_steps(n: Note) -> str:
    arch = n["architecture"] or "an architecture /model_info did not report"
    table = f"; {SGLANG_VERSION}'s table gives {n['table']} for it" if n["table"] else ""
    return (f"num_steps not set: server chose steps {n['steps']}, topk {n['topk']}, {n['draft']} draft tokens for {arch} "
            f"(SGLang _auto_choose_speculative_params: {AUTO_PARAMS_WIDE} for Llama and Grok, {AUTO_PARAMS_DEFAULT} "
            f"otherwise){table}")


def _sweep_queues(n: Note) -> str:
    ranks = f" = {n['per_rank']} per rank x {n['ranks']} attention-DP ranks" if n["ranks"] else ""
    default = f" (SGLang's default cap of {n['default_cap']} under speculation)" if n["default_cap"] else ""
    return (f"the server runs at most {n['capacity']} requests at once{ranks}{default} but the sweep goes to "
            f"{n['max_concurrency']}: higher concurrency queues; set max_running_requests on every configuration "
            f"for a fair sweep")


def _vocab_unread(n: Note) -> str:
    why = f" ({n['why']})" if n["why"] else ""
    default = " (the default)" if n["default"] else ""
    return (f"vocabulary size not readable from the model or the server{why}: random ids stay below "
            f"workload.vocab_size = {n['vocab_size']}{default}; set it to the model's vocabulary if that is smaller "
            f"(an id beyond it crashes SGLang)")


def _attach_mismatch(n: Note) -> str:
    source = f" (from {n['source']})" if n["source"] else ""
    return f"server runs {n['runs']}{source}; config {n['config']} needs {n['needs']}"


_WORDING: dict[NoteKind, Callable[[Note], str]] = {
    NoteKind.STEP_TIME_UNMEASURED: lambda n: (
        "step time unmeasured: every request's tokens arrived in one read, so no decode time was seen "
        "(a longer output_len gives the stream time to show its steps)"),
    NoteKind.ACCEPT_SOURCES_DISAGREE: _accept_sources,
    NoteKind.CLIENT_BUSY: lambda n: (
        f"the load generator was busy {float(n['fraction']):.0%} of the run: it may be part of what was measured "
        f"(more client processes: {n['workers_env']}, or fewer concurrent streams per machine)"),
    NoteKind.SERVER_BUSY: lambda n: (
        f"the server already has {n['running']} running and {n['waiting']} waiting requests that specguard did not "
        f"send (/metrics); each run waits for idle before it starts"),
    NoteKind.COUNTERS_IDLE: lambda n: (
        f"{n['engine']}'s speculative counters did not move over this run ({n['counter']} unchanged): its step time "
        f"and accept length are unmeasured (a longer run gives the counters time to publish)"),
    NoteKind.TOKEN_COUNTS_DISAGREE: lambda n: (
        f"token counts disagree: responses reported {n['client_tokens']} completion tokens, server counter "
        f"{n['counter']} rose by {float(n['server_tokens']):g}"),
    NoteKind.OUTLIER_RUN: lambda n: f"run {n['run']} tok/s {float(n['tok_s']):.1f} is > 5 MADs from the median (kept)",
    NoteKind.ATTACH_DIFFERENCE: lambda n: f"{n['field']}: suite file says {n['suite']!r}, server runs {n['server']!r}",
    NoteKind.NO_RELAUNCH: lambda n: (
        f"attach mode: {n['configs']} cannot be relaunched (no restart_command): stage-1 verdicts at the "
        f"whole cell alpha stand"),
    NoteKind.ONE_LAUNCH: lambda n: (
        f"attach mode: advanced.launches = {n['launches']} not possible for {n['configs']}, one launch measured"),
    NoteKind.XDIST_GROUPED: lambda n: (
        f"xdist: --dist {n['dist']}: specguard places each configuration with its reference on one worker, so every "
        f"server is launched once and every cell measured once"),
    NoteKind.XDIST_SERIALISED: lambda n: (
        f"xdist: {n['groups']} configuration groups on {n['workers']} workers and no `gpus` set: launches are "
        f"serialised (one launched server at a time on this machine), since servers sharing CPU/GPU would lower "
        f"and blur each other's tok/s"),
    NoteKind.TEST_RENAMED: lambda n: (
        f"{n['files']}: {n['old']} is now named {n['new']} (the same test); import {n['new']} from "
        f"specguard.plugin.gate_tests, the old name will go in a later release"),
    NoteKind.ARG_REWRITTEN: _rewritten,
    NoteKind.DEADLINE_REACHED: lambda n: (
        f"session deadline of {float(n['deadline_s']):g}s reached ({float(n['elapsed_s']):.0f}s elapsed); "
        f"{n['config']} {n['level']} not measured"),
    NoteKind.NOT_MEASURED: lambda n: f"{n['config']} {n['level']} not measured",
    NoteKind.NO_SERVER: lambda n: f"{n['config']}: no server was started, so its environment is unknown",
    NoteKind.NOT_ATTACHED: lambda n: (
        f"{n['config']}: not attached: --server-url names a server for {n['attached'] or 'other configurations'} only; "
        f"add --server-url {n['config']}=URL to measure it"),
    NoteKind.NOT_AS_CONFIGURED: lambda n: f"configuration {n['config']!r} does not run as configured: {n['checks']}",
    NoteKind.ATTACH_REFUSED: lambda n: (f"--server-url {n['named']}=...: {n['mismatch']}" if n["named"]
                                        else str(n["mismatch"])),
    NoteKind.START_FAILED: lambda n: str(n["error"]),
    NoteKind.UNKNOWN_ENGINE: lambda n: str(n["error"]),
    NoteKind.VOCAB_UNFIT: lambda n: f"{n['config']}: {n['error']} (vocabulary from {n['source']})",
    NoteKind.NO_RESTART_COMMAND: lambda n: (
        f"{n['config']}: an attached server cannot be relaunched without servers.{n['config']}.restart_command"),
    NoteKind.RESTART_TIMEOUT: lambda n: (
        f"{n['config']}: restart_command did not finish in {float(n['timeout_s']):g}s "
        f"(servers.{n['config']}.startup_timeout_s)"),
    NoteKind.RESTART_EXITED: lambda n: f"{n['config']}: restart_command exited {n['code']}: {n['output']}",
    NoteKind.RESTART_NOT_READY: lambda n: f"{n['config']}: after restart_command: {n['error']}",
    NoteKind.SERVER_UNRESPONSIVE: lambda n: f"server {n['config']!r} stopped answering {n['path']} during the sweep",
    NoteKind.SERVER_EXITED: lambda n: (
        f"server {n['config']!r} exited (code {n['code'] if n['code'] != '' else None}) during the sweep"),
    NoteKind.SOAK_WINDOW_FAILED: lambda n: f"soak {n['config']} window {n['window']}: {n['error'] or 'no run'}",
    NoteKind.SOAK_NO_METRICS: lambda n: f"passive soak {n['config']}: {n['error']}",
    NoteKind.SOAK_TOO_QUIET: lambda n: (
        f"passive soak {n['config']}: {n['windows']} of {n['planned']} windows saw traffic ({n['idle']} idle); a passive "
        f"soak watches a serving server's own requests (--server-url) and needs {n['needed']}"),
    NoteKind.CLAIMED: lambda n: (
        f"configuration {n['config']!r} is already measured by pytest-xdist worker {n['worker']}: each configuration "
        f"(with its reference) must stay on one worker; run with -n N and specguard's own scheduling (no --dist option)"),
    NoteKind.NGRAM_DEFAULTS: lambda n: (
        f"NGRAM defaults: server runs {n['steps']} steps, topk {n['topk']}, {n['draft']} draft tokens (SGLang "
        f"{SGLANG_VERSION} _handle_ngram: draft tokens default {NGRAM_DEFAULT_DRAFT_TOKENS}, steps = draft // topk; "
        f"expected {n['expected']})"),
    NoteKind.DEFAULT_STEPS: _default_steps,
    NoteKind.UNMODELLED_ALGORITHM: lambda n: (
        f"server runs {n['algorithm']}, an algorithm specguard does not model: its steps/topk/draft tokens are not "
        f"checked (measured as {n['config']})"),
    NoteKind.RANK_CAPS_DIFFER: lambda n: (
        f"ranks run different request caps {n['caps']} (internal_states effective_max_running_requests_per_dp)"),
    NoteKind.RANK_CAP_LOW: lambda n: (
        f"per-rank request cap is {n['cap']}, below max_running_requests // attn_dp_size = {n['expected']}: KV "
        f"capacity limits it (token_capacity // 2)"),
    NoteKind.SWEEP_QUEUES: _sweep_queues,
    NoteKind.ADAPTIVE_ON: lambda n: (
        f"adaptive speculation on ({n['table']}): steps follow the batch size; each run reports the steps in use "
        f"(spec_num_steps, from sglang:spec_num_steps)"),
    NoteKind.ADAPTIVE_OFF: lambda n: (
        f"asked for --speculative-adaptive, server runs static steps {n['steps']}: SGLang {SGLANG_VERSION} switched "
        f"it off ({n['reason'] or 'see the server log: speculative_adaptive disabled'})"),
    NoteKind.VOCAB_UNREAD: _vocab_unread,
    NoteKind.ATTACH_MISMATCH: _attach_mismatch,
    NoteKind.TEXT: lambda n: str(n["text"]),
}


def note_line(n: Note) -> str:
    """One line for the note, as the test report, the summary and `specguard bench` print it."""
    return _WORDING[n.kind](n)


def check_line(note: Note, strict: bool) -> str:
    """A server check (engines.ArgCheck, or one stored): its note, and the flag that made it block."""
    return note_line(note) + (" (--strict-server-args)" if strict else "")


def unrunnable(name: str, blocking: list[ArgCheck]) -> Note:
    """Why a configuration's server is not what the suite describes: its blocking checks."""
    return Note.of(NoteKind.NOT_AS_CONFIGURED, config=name,
                   checks="; ".join(check_line(c.note, c.strict) for c in blocking))


def attach_refused(mismatch: Note, named: str | None) -> Note:
    """Why an attached server cannot stand for a configuration: skipped when one --server-url
    serves every configuration, an error when the user named this one (`named`)."""
    return Note.of(NoteKind.ATTACH_REFUSED, named=named or "", mismatch=note_line(mismatch))


__all__ = ["attach_refused", "check_line", "note_line", "unrunnable"]
