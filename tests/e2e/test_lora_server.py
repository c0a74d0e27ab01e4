"""End-to-end multi-LoRA serving: a real `xrt run` of tests/fixtures/models/llama_gqa compiled
with --enable-lora --max-loras 2 --max-lora-rank 8, serving PEFT adapters from
tests/fixtures/lora/llama_gqa, driven by the official openai client.

The references are HF PEFT's (tests/fixtures/lora/llama_gqa/reference.json, made by
tests/gen_lora_fixtures.py): for each adapter and prompt, the greedy continuation's ids and
their text (decoded by HF without skipping special tokens). The C++ numerics tests compare
logits; here the server path must select adapters by model name, mix them in one batch, load
and unload them at run time, and refuse invalid ones with every problem named.
"""
import concurrent.futures
import json
import os
import subprocess
import tempfile

import openai
import pytest
import requests

from test_openai_server import (MODEL, ROOT, XRT, Server, compile_artifact, metric_when, paused,
                                run_until)

LORA_DIR = os.path.join(ROOT, "tests", "fixtures", "lora", "llama_gqa")
INVALID_DIR = os.path.join(ROOT, "tests", "fixtures", "lora", "invalid")
with open(os.path.join(LORA_DIR, "reference.json")) as f:
    REFERENCE = json.load(f)
with open(os.path.join(INVALID_DIR, "invalid.json")) as f:
    INVALID = json.load(f)
BOS_TEXT = "<|begin_of_text|>"
PROMPTS = {p["name"]: p for p in REFERENCE["prompts"]}
STARTUP = ["a_all_r8", "b_qv_r4_rslora"]  # --lora-modules; c_pattern is loaded through the API
# A substring of the server's message for each problem kind of invalid.json.
PROBLEM_TEXT = {
    "rank": "is greater than max_lora_rank 8",
    "dora": "DoRA is not supported",
    "modules_to_save": "modules_to_save is",
    "bias": "bias is not supported",
    "target_modules": "LoRA on lm_head",
    "shape": "the adapter was trained on a different base model",
}


def result(adapter, prompt):
    for a in REFERENCE["adapters"]:
        if a["name"] == adapter:
            return next(r for r in a["results"] if r["prompt"] == prompt)
    raise KeyError(adapter)


def prompt_text(name):
    text = PROMPTS[name]["text"]
    assert text.startswith(BOS_TEXT)
    return text[len(BOS_TEXT):]  # the server adds the bos


def completion_args(model, prompt, max_tokens=None):
    ref = result("base" if model == MODEL else model, prompt)
    return dict(model=model, prompt=prompt_text(prompt), temperature=0,
                max_tokens=max_tokens or len(ref["greedy_ids"]),
                extra_body={"ignore_eos": True, "skip_special_tokens": False})


def greedy(server, model, prompt):
    r = server.client.completions.create(**completion_args(model, prompt))
    assert r.model == model
    assert r.usage.prompt_tokens == len(PROMPTS[prompt]["ids"])
    return r.choices[0].text


def stream_text(server, model, prompt, max_tokens=None):
    text = ""
    for chunk in server.client.completions.create(stream=True,
                                                  **completion_args(model, prompt, max_tokens)):
        assert chunk.model == model
        for c in chunk.choices:
            text += c.text
    return text


def load(server, name, path):
    return server.post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})


def unload(server, name):
    return server.post("/v1/unload_lora_adapter", {"lora_name": name})


def lora_metrics(server):
    m = server.metrics()
    return {
        "loads": m["xrt_lora_slot_loads_total"],
        "swaps": m["xrt_lora_slot_swaps_total"],
        "loaded": m["xrt_lora_adapters_loaded"],
        **{mode: m[f'xrt_lora_mode_steps_total{{"mode": "{mode}"}}']
           for mode in ("none", "single", "mixed")},
        "steps": m["xrt_steps_total"],
    }


@pytest.fixture(scope="module")
def artifacts():
    with tempfile.TemporaryDirectory() as tmp:
        small = ["--max-num-seqs", "8", "--max-num-batched-tokens", "64"]
        yield {
            "lora": compile_artifact(tmp, "lora.xpk", *small, "--enable-lora", "--max-loras", "2",
                                     "--max-lora-rank", "8"),
            "plain": compile_artifact(tmp, "plain.xpk", *small),
        }


@pytest.fixture(scope="module")
def server(artifacts):
    s = Server(artifacts["lora"], "--allow-runtime-lora-updating", "--server-dev-mode", "--lora-modules",
               *[f"{name}={os.path.join(LORA_DIR, name)}" for name in STARTUP])
    yield s
    s.stop()


def test_prompt_texts_tokenize_to_the_reference_ids(artifacts):
    for name in ("p5", "p33"):
        out = subprocess.run([XRT, "generate", artifacts["lora"], "-p", prompt_text(name),
                              "--dry-run"], check=True, capture_output=True, text=True)
        assert json.loads(out.stdout)["prompt_ids"] == PROMPTS[name]["ids"]


def test_models_list_the_adapters_with_their_parent(server):
    data = server.client.models.list().data
    assert [m.id for m in data] == [MODEL, *STARTUP]
    assert data[0].parent is None
    for m in data[1:]:
        assert m.parent == MODEL
        assert m.root == os.path.join(LORA_DIR, m.id)


def test_greedy_completions_equal_peft(server):
    for model in [*STARTUP, MODEL]:
        for prompt in ("p5", "p33"):
            ref = result("base" if model == MODEL else model, prompt)
            assert greedy(server, model, prompt) == ref["greedy_text"], (model, prompt)


def test_chat_selects_the_adapter(server):
    messages = [{"role": "user", "content": "hi"}]
    texts = {}
    for model in [*STARTUP, MODEL]:
        r = server.client.chat.completions.create(model=model, messages=messages, max_tokens=6,
                                                  temperature=0, extra_body={"ignore_eos": True})
        assert r.model == model
        texts[model] = r.choices[0].message.content
    assert len(set(texts.values())) == 3, texts  # every adapter moves the greedy tokens


def queue_while_paused(server, pool, calls):
    """Submits each call (fn, *args) to the pool while the engine is paused, so that their
    requests meet in one batch when it resumes; returns the futures."""
    waiting = "xrt_num_requests_waiting"
    with paused(server):
        futures = [pool.submit(*c) for c in calls]
        assert metric_when(server, lambda m: m[waiting] == len(calls))[waiting] == len(calls)
    return futures


def test_concurrent_streams_on_different_adapters_and_base(server):
    before = lora_metrics(server)
    jobs = [(m, p) for p in ("p5", "p33") for m in [*STARTUP, MODEL]]
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        futures = queue_while_paused(server, pool, [(stream_text, server, *j) for j in jobs])
        texts = [f.result() for f in futures]
    for (model, prompt), text in zip(jobs, texts):
        ref = result("base" if model == MODEL else model, prompt)
        assert text == ref["greedy_text"], (model, prompt)
    after = lora_metrics(server)
    assert after["mixed"] > before["mixed"]  # adapters and base shared steps
    # Every step ran exactly one lm_step variant.
    assert sum(after[m] - before[m] for m in ("none", "single", "mixed")) == \
        after["steps"] - before["steps"]


def test_load_use_unload_while_streaming(server):
    before = lora_metrics(server)
    path = os.path.join(LORA_DIR, "c_pattern")
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        # Long streams of both startup adapters hold the two slots while c is loaded; they are
        # frozen (the engine paused) after their first tokens, so neither can end before.
        ttft = "xrt_time_to_first_token_seconds_count"
        first = server.metrics()[ttft]
        with paused(server):
            streams = [pool.submit(stream_text, server, m, "p33", 256) for m in STARTUP]
            assert run_until(server, lambda m: m[ttft] == first + 2)[ttft] == first + 2
            r = load(server, "c_pattern", path)
            assert r.status_code == 200, r.text
            assert r.text == "Success: LoRA adapter 'c_pattern' added successfully."
            assert not any(s.done() for s in streams)  # loading did not wait for them
        assert greedy(server, "c_pattern", "p5") == result("c_pattern", "p5")["greedy_text"]
        for m, s in zip(STARTUP, streams):
            # The reference is 32 tokens; a last partial UTF-8 character decodes as U+FFFD.
            assert s.result().startswith(result(m, "p33")["greedy_text"].rstrip("\ufffd")), m
    data = server.client.models.list().data
    assert [m.id for m in data] == [MODEL, *STARTUP, "c_pattern"]
    assert data[-1].root == path and data[-1].parent == MODEL
    after = lora_metrics(server)
    assert after["loaded"] == before["loaded"] + 1
    assert after["loads"] > before["loads"]
    assert after["swaps"] > before["swaps"]  # 2 slots, 3 adapters: one replaced another

    r = unload(server, "c_pattern")
    assert r.status_code == 200, r.text
    assert r.text == "Success: LoRA adapter 'c_pattern' removed successfully."
    with pytest.raises(openai.NotFoundError) as e:
        greedy(server, "c_pattern", "p5")
    assert e.value.body["code"] == "model_not_found"
    assert "'c_pattern' does not exist" in e.value.body["message"]
    r = unload(server, "c_pattern")
    assert r.status_code == 404
    assert r.json()["error"]["message"] == "The lora adapter 'c_pattern' cannot be found."
    assert lora_metrics(server)["loaded"] == before["loaded"]


def test_every_invalid_adapter_is_a_400_naming_each_problem(server):
    for adapter in INVALID["adapters"]:
        r = load(server, adapter["name"], os.path.join(INVALID_DIR, adapter["dir"]))
        assert r.status_code == 400, (adapter["name"], r.text)
        message = r.json()["error"]["message"]
        for problem in adapter["problems"]:
            assert PROBLEM_TEXT[problem] in message, (adapter["name"], problem, message)
        if len(adapter["problems"]) > 1:
            assert "problems: (1) " in message
    r = load(server, STARTUP[0], os.path.join(LORA_DIR, "d_mlp_f16"))
    assert r.status_code == 400
    assert r.json()["error"]["message"] == f"The lora adapter '{STARTUP[0]}' has already been loaded."
    assert [m.id for m in server.client.models.list().data] == [MODEL, *STARTUP]
    assert greedy(server, STARTUP[0], "p5") == result(STARTUP[0], "p5")["greedy_text"]


def test_requests_per_adapter_are_counted(server):
    m = server.metrics()
    for name in STARTUP:
        assert m[f'xrt_lora_requests_total{{"adapter": "{name}"}}'] >= 4
    assert not any(k.startswith("xrt_lora_requests_total") and '""' in k for k in m)


def test_generate_with_lora_equals_peft(artifacts):
    ref = result("b_qv_r4_rslora", "p5")
    out = subprocess.run(
        [XRT, "generate", artifacts["lora"], "-p", prompt_text("p5"), "--temperature", "0",
         "-n", str(len(ref["greedy_ids"])), "--ignore-eos", "--show-ids", "--threads", "2",
         "--lora", f"b={os.path.join(LORA_DIR, 'b_qv_r4_rslora')}"],
        check=True, capture_output=True, text=True)
    ids = json.loads(out.stderr.strip().splitlines()[-1])
    assert ids["output_ids"] == ref["greedy_ids"]
    bad = subprocess.run([XRT, "generate", artifacts["lora"], "-p", "x", "--lora",
                          f"r={os.path.join(INVALID_DIR, 'rank16')}"],
                         capture_output=True, text=True)
    assert bad.returncode != 0
    assert "is greater than max_lora_rank 8" in bad.stderr


def test_run_refuses_bad_lora_modules_before_serving(artifacts):
    def run(artifact, *modules):
        return subprocess.run([XRT, "run", artifact, "--port", "0", "--lora-modules", *modules],
                              capture_output=True, text=True, timeout=60)
    plain = run(artifacts["plain"], f"a={os.path.join(LORA_DIR, 'a_all_r8')}")
    assert plain.returncode != 0
    assert "xcc compile --enable-lora" in plain.stderr
    bad = run(artifacts["lora"], f"a={os.path.join(LORA_DIR, 'a_all_r8')}",
              f"r={os.path.join(INVALID_DIR, 'rank16')}",
              f"d={os.path.join(INVALID_DIR, 'dora')}")
    assert bad.returncode != 0
    assert "2 of 3 adapters failed to load" in bad.stderr
    assert "is greater than max_lora_rank 8" in bad.stderr and "DoRA" in bad.stderr
    assert "serving" not in bad.stderr


def test_adapter_name_on_an_artifact_without_lora_is_model_not_found(artifacts):
    s = Server(artifacts["plain"])
    try:
        with pytest.raises(openai.NotFoundError) as e:
            s.client.completions.create(model=STARTUP[0], prompt="x", max_tokens=2)
        assert e.value.body["code"] == "model_not_found"
        assert requests.post(s.url + "/v1/load_lora_adapter", json={}).status_code in (401, 404)
        assert s.client.completions.create(model=MODEL, prompt="x", max_tokens=2).choices
    finally:
        s.stop()
