"""Workloads are deterministic and need no download."""

import pytest

from specguard.workload import WorkloadError, WorkloadSpec, build_workload


def test_random_ids_are_deterministic_for_a_seed():
    a = build_workload(WorkloadSpec(kind="random-ids", input_len=16, seed=3), num_prompts=4)
    b = build_workload(WorkloadSpec(kind="random-ids", input_len=16, seed=3), num_prompts=4)
    c = build_workload(WorkloadSpec(kind="random-ids", input_len=16, seed=4), num_prompts=4)
    assert a.prompts == b.prompts and a.digest() == b.digest() and a.digest() != c.digest()
    assert all(len(p.input_ids) == 16 for p in a.prompts)


def test_repeated_id_matches_the_seed_a_run():
    w = build_workload(WorkloadSpec(kind="repeated-id", input_len=1000))
    assert w.prompt(7).input_ids == (23066,) * 1000


def test_shipped_text_prompts_cover_three_categories():
    w = build_workload(WorkloadSpec(kind="text"))
    assert {p.category for p in w.prompts} == {"coding", "reasoning", "chat"}
    assert w.prompt(0) == w.prompt(len(w.prompts))


def test_jsonl_errors_name_the_line(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"text": "hi"}\n{"input_ids": [1, 2]}\n')
    w = build_workload(WorkloadSpec(kind="jsonl", path=str(f)))
    assert w.prompts[1].input_ids == (1, 2)
    f.write_text('{"text": "hi"}\n{"prompt": 3}\n')
    with pytest.raises(WorkloadError, match=r"p.jsonl:2"):
        build_workload(WorkloadSpec(kind="jsonl", path=str(f)))
    with pytest.raises(WorkloadError, match="cannot read"):
        build_workload(WorkloadSpec(kind="jsonl", path=str(tmp_path / "missing.jsonl")))


# ---------------------------------------------------------------------- vocabulary bound
import json  # noqa: E402

from specguard.report.note_text import note_line  # noqa: E402
from specguard.workload import (  # noqa: E402
    DEFAULT_VOCAB_SIZE,
    fit_to_vocab,
    resolve_vocab_bound,
    vocab_size_from_model_dir,
    vocab_size_from_server,
)


def _model_dir(tmp_path, vocab=512, nested=False):
    d = tmp_path / "tiny"
    d.mkdir()
    cfg = {"text_config": {"vocab_size": vocab}} if nested else {"vocab_size": vocab, "architectures": ["LlamaForCausalLM"]}
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def _max_id(workload):
    return max(max(p.input_ids) for p in workload.prompts)


def test_default_random_ids_would_send_out_of_vocab_ids_and_now_send_only_valid_ones(tmp_path):
    """The SGLang crash: default random ids (100..31999) against a 512-token model. Bounded by
    the model's config.json, every id of every prompt is a token the model has."""
    spec = WorkloadSpec(kind="random-ids", input_len=32, seed=0)  # vocab_size left at the default
    unbounded = build_workload(spec, num_prompts=64)
    assert spec.vocab_size == DEFAULT_VOCAB_SIZE and _max_id(unbounded) >= 512  # would crash the server
    bound = resolve_vocab_bound(spec, model_path=str(_model_dir(tmp_path)))
    assert bound.vocab_size == 512 and "config.json" in bound.source and not bound.note
    safe = fit_to_vocab(unbounded, bound.vocab_size)
    ids = [x for p in safe.prompts for x in p.input_ids]
    assert len(safe.prompts) == 64 and all(len(p.input_ids) == 32 for p in safe.prompts)
    assert min(ids) >= 0 and max(ids) < 512
    assert safe.digest() != unbounded.digest()  # different ids: baselines do not mix them


def test_a_larger_vocabulary_leaves_the_workload_and_its_digest_unchanged(tmp_path):
    w = build_workload(WorkloadSpec(kind="random-ids", input_len=16), num_prompts=8)
    bound = resolve_vocab_bound(w.spec, model_path=str(_model_dir(tmp_path, vocab=128256)))
    assert bound.vocab_size == DEFAULT_VOCAB_SIZE and "128256" in bound.source
    assert fit_to_vocab(w, bound.vocab_size) is w  # stored baselines keep matching


def test_vocab_size_from_model_dir(tmp_path):
    assert vocab_size_from_model_dir(_model_dir(tmp_path, nested=True)) == 512
    assert vocab_size_from_model_dir("meta-llama/Llama-3.1-8B-Instruct") is None  # a hub id: never downloaded
    assert vocab_size_from_model_dir(None) is None
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    assert vocab_size_from_model_dir(tmp_path / "bad") is None


def test_small_vocabularies_and_user_ids_are_checked():
    w = build_workload(WorkloadSpec(kind="random-ids", input_len=8, vocab_size=50), num_prompts=16)
    assert all(0 <= x < 50 for p in w.prompts for x in p.input_ids)
    with pytest.raises(WorkloadError, match="vocab_size"):
        WorkloadSpec(vocab_size=1)
    with pytest.raises(WorkloadError, match="repeated_id 23066.*512"):
        fit_to_vocab(build_workload(WorkloadSpec(kind="repeated-id", input_len=4)), 512)


class _FakeResponse:
    def __init__(self, status, body):
        self.status_code, self._body = status, body
        self.text = body if isinstance(body, str) else json.dumps(body)

    def json(self):
        return self._body


class _FakeSGLang:
    """Answers like SGLang 0.5.23 (captured from the real server of the CI job)."""

    def __init__(self, version="0.5.23", vocab=512, model_path="/nowhere/tiny"):
        self.version, self.vocab, self.model_path, self.posts = version, vocab, model_path, []

    def get(self, path, timeout=None):
        if path == "/model_info":
            return _FakeResponse(200, {"model_path": self.model_path, "tokenizer_path": self.model_path})
        return _FakeResponse(200, {"version": self.version, "model_path": self.model_path})

    def post(self, path, json=None, timeout=None):
        self.posts.append(json)
        if json.get("token_ids_logprob"):
            message = (f"token_ids_logprob contains out-of-vocabulary token id {json['token_ids_logprob'][0]}; "
                       f"valid range is [0, {self.vocab}).")
            return _FakeResponse(400, {"error": {"message": message}})
        return _FakeResponse(200, {"text": "x"})


def test_attach_mode_reads_the_vocabulary_from_the_server(tmp_path):
    # The served model directory is readable here: its config.json, no request sent.
    local = _FakeSGLang(model_path=str(_model_dir(tmp_path, vocab=300)))
    assert vocab_size_from_server(local)[0] == 300 and not local.posts
    # Not readable: SGLang 0.5.23 refuses an out-of-vocabulary id with its vocabulary size.
    remote = _FakeSGLang()
    size, how = vocab_size_from_server(remote)
    assert size == 512 and "valid range is [0, 512)" in how and remote.posts[0]["token_ids_logprob"] == [2**31 - 1]
    # Older servers are never probed (no validation there: the probe could crash them).
    old = _FakeSGLang(version="0.5.6")
    assert vocab_size_from_server(old)[0] is None and not old.posts
    # Nothing tells: the suite's value stands, and the note says so once.
    bound = resolve_vocab_bound(WorkloadSpec(), client=old)
    assert bound.vocab_size == DEFAULT_VOCAB_SIZE and bound.note is not None
    assert "workload.vocab_size = 32000 (the default)" in note_line(bound.note)


class _LogitBiasOnly(_FakeSGLang):
    """A 0.5.23 server whose token_ids_logprob answer names no range, and whose first probe fails."""

    def post(self, path, json=None, timeout=None):
        self.posts.append(json)
        if json.get("token_ids_logprob"):
            raise OSError("connection reset")
        bias = json["sampling_params"].get("logit_bias") or {}
        return _FakeResponse(400, {"error": {"message": f"logit_bias must have keys in [0, {self.vocab - 1}], got {list(bias)}"}})


def test_the_logit_bias_probe_tells_when_the_first_probe_does_not():
    server = _LogitBiasOnly(vocab=512)
    size, how = vocab_size_from_server(server)
    assert size == 512 and "keys in [0, 511]" in how
    first, second = (sorted(p) for p in server.posts)
    assert first == ["input_ids", "return_logprob", "sampling_params", "stream", "token_ids_logprob"]
    assert second == ["input_ids", "sampling_params", "stream"]
    assert server.posts[1]["sampling_params"] == {"max_new_tokens": 1, "temperature": 0, "logit_bias": {str(2**31 - 1): 0.0}}


def test_server_info_already_read_is_not_asked_again():
    server = _FakeSGLang(version="0.5.6")
    asked = []
    get = server.get
    server.get = lambda path, timeout=None: (asked.append(path), get(path, timeout))[1]
    assert vocab_size_from_server(server, server_info={"version": "0.5.23", "model_path": "/nowhere"})[0] == 512
    assert asked == ["/model_info"]
