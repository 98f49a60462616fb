"""The emulator's API contract against a real SGLang 0.5.23 server's, over real HTTP on 127.0.0.1.

What docs/research/evidence/contract-diffs.md listed (real vs emulator, same flags): the /metrics families,
`startup_time` / `disaggregation_mode` placement in /server_info, and the out-of-vocabulary 400s
that specguard's attach mode reads the vocabulary from (specguard/workload.py
vocab_size_from_server). Compared with tools/contract_shapes.py's own shape functions against the
committed captures (tests/fixtures/captures/sglang-0.5.23/), which were taken with other flags than
the live job's (--max-running-requests 16 ...): the compared key and label-name sets do not depend
on those values.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest
from test_emulator_server import CAPTURES, EmulatorProcess

from specguard.emulator import metrics_catalog
from specguard.workload import WorkloadSpec, resolve_vocab_bound, vocab_size_from_server

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import contract_shapes  # noqa: E402

pytestmark = pytest.mark.e2e

# The flags of the live contract job (tests/real/test_real_sglang.py SERVER_FLAGS).
REAL_FLAGS = ("--device", "cpu", "--attention-backend", "torch_native", "--disable-cuda-graph", "--enable-metrics",
              "--max-running-requests", "8", "--mem-fraction-static", "0.05", "--max-total-tokens", "65536",
              "--random-seed", "7", "--emulator-jitter-pct", "0", "--emulator-drift-pct", "0")
PROBE_ID = 2**31 - 1
# Created lazily on a real server (metrics_collector.py observe_one_aborted_request): absent from the
# capture, present in the live job's diff (its server had aborted requests by then).
LAZY_REAL = {"sglang:num_aborted_requests_total": [["engine_type", "model_name"]]}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    started: list[EmulatorProcess] = []

    def launch(*args: str) -> EmulatorProcess:
        server = EmulatorProcess(list(args), tmp_path_factory.mktemp("emulator") / "server.log")
        started.append(server)
        return server

    yield launch
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def emu(servers):
    """The fast profile (vocab 32000), --model-path not a directory here."""
    return servers("--model-path", "/models/no-such-dir", *REAL_FLAGS)


@pytest.fixture(scope="module")
def emu_with_config(servers, tmp_path_factory):
    """A model directory whose config.json nests vocab_size in text_config (512, like the job's tiny Llama)."""
    model = tmp_path_factory.mktemp("model")
    (model / "config.json").write_text(json.dumps({"architectures": ["X"], "text_config": {"vocab_size": 512}}))
    return servers("--model-path", str(model), *REAL_FLAGS)


def _captured_metrics() -> dict[str, list[list[str]]]:
    return contract_shapes.metric_label_sets((CAPTURES / "metrics.txt").read_text())


def _types(text: str) -> dict[str, str]:
    return {line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE ")}


def _generate(url: str, body: dict) -> httpx.Response:
    return httpx.post(url + "/generate", json=body, timeout=30.0)


def test_metrics_names_labels_and_kinds_match_the_real_capture(emu):
    # one request of each kind first, so every live family has its series
    httpx.post(emu.url + "/generate", json={"input_ids": [10, 11, 12], "sampling_params": {"max_new_tokens": 4}},
               timeout=30.0).raise_for_status()
    text = httpx.get(emu.url + "/metrics", timeout=10.0).text
    got = contract_shapes.metric_label_sets(text)
    real = dict(_captured_metrics(), **LAZY_REAL)
    diffs = contract_shapes.diff_metrics(real, got, ("real", "emulator"))
    assert diffs == [], "\n".join(diffs)
    captured_types = _types((CAPTURES / "metrics.txt").read_text())
    emulated_types = _types(text)
    assert {k: v for k, v in emulated_types.items() if k in captured_types} == captured_types
    # plausible constants, not only zeros (page_size 1 and 65536 one-token pages)
    assert "sglang:page_size{" in text and "sglang:num_pages{" in text
    assert any(line.startswith("sglang:num_pages{") and line.endswith(" 65536.0") for line in text.splitlines())


def test_catalog_is_the_single_list_of_families():
    """Every captured family is in the table, with the captured kind; no name twice."""
    captured = _types((CAPTURES / "metrics.txt").read_text())
    table = {metrics_catalog.PREFIX + f.name: f.kind for f in metrics_catalog.CATALOG}
    assert len(table) == len(metrics_catalog.CATALOG)
    assert {k: table.get(k) for k in captured} == captured
    assert set(table) - set(captured) == set(LAZY_REAL)


def test_server_info_shape_matches_the_capture(emu):
    """The view tools/contract_shapes.py probe() compares: startup_time and disaggregation_mode are
    top-level on a real server (http_server.py server_info; a server argument), so they drop out of
    the internal-state view there; they must on the emulator too."""
    def view(info: dict) -> dict:
        out = {k: info[k] for k in contract_shapes.SERVER_INFO_KEYS if k in info and k != "internal_states"}
        state = info["internal_states"][0]
        out["state"] = {k: v for k, v in state.items() if k not in info or k in contract_shapes.SERVER_INFO_KEYS}
        return out

    captured = json.loads((CAPTURES / "server_info.json").read_text())
    info = httpx.get(emu.url + "/server_info", timeout=10.0).json()
    diffs = contract_shapes.diff_shapes(contract_shapes.shape(view(captured)), contract_shapes.shape(view(info)),
                                        "", ("real", "emulator"))
    # not in the capture's resolved args only because it ran without speculation
    assert diffs == [], "\n".join(diffs)
    assert contract_shapes.shape(info["startup_time"]) == contract_shapes.shape(captured["startup_time"])
    assert info["disaggregation_mode"] == captured["disaggregation_mode"] == "null"


def test_out_of_vocabulary_token_ids_logprob_and_logit_bias_answer_400(emu):
    # tokenizer_manager.py TokenizerManager._validate_token_ids_logprob
    r = _generate(emu.url, {"input_ids": [0], "sampling_params": {"max_new_tokens": 1}, "return_logprob": True,
                            "token_ids_logprob": [PROBE_ID]})
    assert r.status_code == 400
    assert r.json() == {"error": {"message": f"token_ids_logprob contains out-of-vocabulary token id {PROBE_ID}; "
                                             "valid range is [0, 32000)."}}
    r = _generate(emu.url, {"input_ids": [0], "sampling_params": {"max_new_tokens": 1}, "token_ids_logprob": [31999]})
    assert r.status_code == 200  # the last id is in range
    # sampling/sampling_params.py SamplingParams.verify
    r = _generate(emu.url, {"input_ids": [0], "sampling_params": {"max_new_tokens": 1,
                                                                    "logit_bias": {str(PROBE_ID): 0.0}}})
    assert (r.status_code, r.json()) == (400, {"error": {"message": f"logit_bias must has keys in [0, 31999], got "
                                                                    f"{PROBE_ID}."}})
    # streamed: an in-band error event, like the captured context-length error
    r = _generate(emu.url, {"input_ids": [0], "stream": True, "sampling_params": {"max_new_tokens": 1},
                            "token_ids_logprob": [-1]})
    assert r.status_code == 200
    events = [line[5:].strip() for line in r.text.splitlines() if line.startswith("data:")]
    assert events[-1] == "[DONE]" and "out-of-vocabulary token id -1" in json.loads(events[0])["error"]["message"]


def test_out_of_vocabulary_input_id_is_refused_not_served(emu):
    """Differs from SGLang on purpose: 0.5.23 crashes (IndexError in embed_tokens), the emulator says why."""
    r = _generate(emu.url, {"input_ids": [5, 32000], "sampling_params": {"max_new_tokens": 1}})
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert "out-of-vocabulary token id 32000" in message and "[0, 32000)" in message
    assert _generate(emu.url, {"input_ids": [5, 31999], "sampling_params": {"max_new_tokens": 1}}).status_code == 200


def test_vocab_size_comes_from_the_model_dirs_config_json(emu_with_config):
    r = _generate(emu_with_config.url, {"input_ids": [0], "sampling_params": {"max_new_tokens": 1},
                                        "token_ids_logprob": [512]})
    assert (r.status_code, r.json()["error"]["message"]) == (
        400, "token_ids_logprob contains out-of-vocabulary token id 512; valid range is [0, 512).")


def test_attach_mode_reads_the_emulators_vocabulary(emu):
    """specguard's own reader (workload.vocab_size_from_server) gets 32000 from the emulator's 400."""
    with httpx.Client(base_url=emu.url) as client:
        size, how = vocab_size_from_server(client)
    assert size == 32000, how
    assert "out-of-vocabulary probe" in how
    # what a configuration's notes carry (session/servers.py notes_for): no "vocabulary size not readable" note
    with httpx.Client(base_url=emu.url) as client:
        bound = resolve_vocab_bound(WorkloadSpec(), model_path="/models/no-such-dir", client=client)
    assert (bound.vocab_size, bound.note) == (32000, None), bound


def _capture_events(name: str) -> list:
    out: list = []
    for line in (CAPTURES / name).read_text().splitlines():
        if line.startswith("data:"):
            data = line[5:].strip()
            out.append("[DONE]" if data == "[DONE]" else json.loads(data))
    return out


def _captured_probe() -> dict:
    """What contract_shapes.probe() would have read from the captured real server, where a capture exists."""
    info = json.loads((CAPTURES / "server_info.json").read_text())
    section = {k: info[k] for k in contract_shapes.SERVER_INFO_KEYS if k in info}
    section["internal_states"] = f"list of {len(info['internal_states'])}"
    state = {k: v for k, v in info["internal_states"][0].items()
             if k not in info or k in contract_shapes.SERVER_INFO_KEYS}
    return {
        "/server_info": section,
        "/server_info internal_states[0]": state,
        "/model_info": json.loads((CAPTURES / "model_info.json").read_text()),
        "/generate stream": {"status": 200, **contract_shapes._pick(_capture_events("generate_stream.sse"))},
        "/v1/completions stream": {"status": 200,
                                   **contract_shapes._openai_pick(_capture_events("v1_completions_stream.sse"))},
        "/v1/chat/completions stream": {"status": 200,
                                        **contract_shapes._openai_pick(_capture_events("v1_chat_stream.sse"))},
        "/metrics": (CAPTURES / "metrics.txt").read_text(),
    }


def test_contract_probe_against_the_captures(emu):
    """tools/contract_shapes.py's probe and compare, the real side rebuilt from the captures."""
    real = _captured_probe()
    got = contract_shapes.probe(emu.url, list(range(10, 18)))
    assert (got["/flush_cache idle"]["status"], got["/flush_cache busy"]["status"]) == (200, 400)
    got = {k: v for k, v in got.items() if k in real}
    diffs = [d for d in contract_shapes.compare(real, got, ("real", "emulator"))
             if not d.startswith("/metrics sglang:num_aborted_requests_total:")]  # lazy on the real side (LAZY_REAL)
    assert diffs == [], "\n".join(diffs)
