"""End-to-end tests: a real `xrt run` on loopback driven by the official openai client.

The artifact is compiled from a tiny fixture model (tests/fixtures/models/llama_gqa) by
`xcc compile`; XCC_BIN and XRT_BIN name the binaries (ctest sets them).
"""
import concurrent.futures
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time

import openai
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_DIR = os.path.join(ROOT, "tests", "fixtures", "models", "llama_gqa")
XCC = os.environ.get("XCC_BIN", os.path.join(ROOT, "build", "compiler", "xcc"))
XRT = os.environ.get("XRT_BIN", os.path.join(ROOT, "build", "runtime", "cli", "xrt"))
API_KEY = "test-key"
MODEL = "tiny"
PROMPT = "The quick brown fox jumps over the lazy dog. Numbers: 1 2 3."


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, artifact, *args):
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="xrt-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [XRT, "run", artifact, "--port", str(self.port), "--api-key", API_KEY,
             "--served-model-name", MODEL, "--threads", "2", *args],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 60
        while time.time() < deadline:
            assert self.proc.poll() is None, self.logs()
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.1)
        else:
            raise AssertionError("server did not start:\n" + self.logs())
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key=API_KEY, max_retries=0,
                                    timeout=120)

    def logs(self):
        with open(self.log.name) as f:
            return f.read()

    def metrics(self):
        text = requests.get(self.url + "/metrics", timeout=10).text
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                key = s.name + (json.dumps(s.labels, sort_keys=True) if s.labels else "")
                out[key] = s.value
        return out

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        rc = self.proc.wait(timeout=60)
        assert rc == 0, f"xrt run exited with {rc}:\n{self.logs()}"

    def post(self, path, body, **kw):
        return requests.post(self.url + path, json=body, headers={"Authorization": f"Bearer {API_KEY}"},
                             **kw)


def compile_artifact(tmp, name, *args):
    path = os.path.join(tmp, name)
    subprocess.run([XCC, "compile", MODEL_DIR, "-o", path, "-q", "--max-model-len", "512", *args],
                   check=True)
    return path


@pytest.fixture(scope="module")
def artifacts():
    with tempfile.TemporaryDirectory() as tmp:
        yield {
            "main": compile_artifact(tmp, "main.xpk", "--max-num-seqs", "32",
                                     "--max-num-batched-tokens", "128"),
            # Room for 32 streams and more at once.
            "wide": compile_artifact(tmp, "wide.xpk", "--max-num-seqs", "64",
                                     "--max-num-batched-tokens", "128"),
        }


@pytest.fixture(scope="module")
def server(artifacts):
    s = Server(artifacts["main"], "--server-dev-mode")
    yield s
    s.stop()


def greedy(server, prompt, max_tokens=24, **kw):
    r = server.client.completions.create(model=MODEL, prompt=prompt, max_tokens=max_tokens,
                                         temperature=0, **kw)
    return r


def test_models_and_health(server):
    models = server.client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert requests.get(server.url + "/health").status_code == 200


def test_completion_and_stream_agree(server):
    full = greedy(server, PROMPT)
    choice = full.choices[0]
    assert choice.finish_reason == "length"
    assert full.usage.completion_tokens == 24
    assert full.usage.prompt_tokens > 5
    streamed = server.client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24,
                                                temperature=0, stream=True,
                                                stream_options={"include_usage": True})
    text, reasons, usage = "", [], None
    for chunk in streamed:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.text
            if c.finish_reason:
                reasons.append(c.finish_reason)
    assert text == choice.text
    assert reasons == ["length"]
    assert usage.completion_tokens == 24


def test_chat_and_stream_agree(server):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    full = server.client.chat.completions.create(model=MODEL, messages=messages, max_tokens=16,
                                                 temperature=0)
    assert full.choices[0].message.role == "assistant"
    stream = server.client.chat.completions.create(model=MODEL, messages=messages, max_tokens=16,
                                                   temperature=0, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == full.choices[0].message.content


def test_stop_string(server):
    text = greedy(server, PROMPT, max_tokens=32).choices[0].text
    # A stop string from the middle of the greedy continuation cuts it there.
    stop = text[len(text) // 2:len(text) // 2 + 3]
    assert stop.strip(), text
    r = greedy(server, PROMPT, max_tokens=32, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == text[:text.index(stop)]


def test_max_tokens(server):
    for n in (1, 5):
        r = greedy(server, PROMPT, max_tokens=n)
        assert r.usage.completion_tokens == n
        assert r.choices[0].finish_reason == "length"


def test_n_and_seed(server):
    kw = dict(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=1.0, seed=1234, n=2)
    a = server.client.completions.create(**kw)
    b = server.client.completions.create(**kw)
    assert len(a.choices) == 2
    assert [c.text for c in a.choices] == [c.text for c in b.choices]
    c = server.client.completions.create(**{**kw, "seed": 99})
    assert [x.text for x in c.choices] != [x.text for x in a.choices]


def test_logprobs(server):
    r = greedy(server, PROMPT, max_tokens=8, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 8 and len(lp.token_logprobs) == 8
    for top, chosen in zip(lp.top_logprobs, lp.token_logprobs):
        # Keyed by token text (OpenAI's format), so tokens that decode alike
        # (partial UTF-8) share a key: up to 3 alternatives plus the chosen one.
        assert 1 <= len(top) <= 4
        # Greedy picks the most likely token.
        assert chosen >= max(top.values()) - 1e-5
        assert chosen <= 0
    chat = server.client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0,
        logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == 4 and all(len(t.top_logprobs) == 2 for t in content)


def test_prefix_caching_reports_cached_tokens(server):
    prefix = " ".join(f"word{i}" for i in range(60))
    before = server.metrics()
    first = greedy(server, prefix + " first", max_tokens=2)
    second = greedy(server, prefix + " second", max_tokens=2)
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= 32, second.usage
    after = server.metrics()
    assert after["xrt_prefix_cache_hits_total"] - before["xrt_prefix_cache_hits_total"] >= cached
    assert first.usage.prompt_tokens_details.cached_tokens <= cached


def test_errors_leave_server_serving(server):
    ok = lambda: greedy(server, "ok", max_tokens=2).choices[0].finish_reason == "length"
    bad_key = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad_key.models.list()
    assert ok()
    with pytest.raises(openai.NotFoundError):
        server.client.completions.create(model="nope", prompt="x", max_tokens=2)
    assert ok()
    with pytest.raises(openai.BadRequestError) as e:
        server.client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=100000)
    assert "512" in str(e.value)
    assert ok()
    with pytest.raises(openai.BadRequestError):
        server.client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4,
                                         temperature=-1)
    assert ok()
    r = requests.post(server.url + "/v1/completions", data="{not json",
                      headers={"Authorization": f"Bearer {API_KEY}",
                               "Content-Type": "application/json"})
    assert r.status_code == 400 and "error" in r.json()
    assert ok()
    r = requests.post(server.url + "/v1/completions", json={"model": MODEL, "prompt": 3},
                      headers={"Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    assert ok()


def test_image_parts_are_refused_by_a_text_model(server):
    # The parts are parsed (a bad one is named) and the model, which has no vision
    # encoder, refuses them; the server keeps serving.
    ok = lambda: greedy(server, "ok", max_tokens=2).choices[0].finish_reason == "length"
    png = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAIAAAABCAIAAAB7QOjdAAAADUlEQVR4nGP4"
           "zwAE/wEHAAH/4iOeWQAAAABJRU5ErkJggg==")
    with pytest.raises(openai.BadRequestError) as e:
        server.client.chat.completions.create(model=MODEL, max_tokens=2, messages=[
            {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                         {"type": "image_url", "image_url": {"url": png}}]}])
    assert e.value.body["message"] == ("messages[0].content[1]: this model does not accept "
                                       "images (it has no vision encoder)")
    assert e.value.body["param"] == "messages[0].content[1]"
    assert ok()
    r = server.post("/v1/chat/completions", {"model": MODEL, "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"detail": "low"}}]}]})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "messages[0].content[0]: 'image_url' has no 'url'"
    assert ok()


def test_bad_media_flags_fail_at_start(artifacts):
    for flags, message in [
            (["--allowed-local-media-path", "/nonexistent/dir"],
             "--allowed-local-media-path '/nonexistent/dir': No such file or directory"),
            (["--limit-mm-per-prompt", "video=1"],
             "--limit-mm-per-prompt: modality 'video' is not supported (only image)")]:
        r = subprocess.run([XRT, "run", artifacts["main"], "--port", "0", *flags],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, r.stderr
        assert f"xrt: error: {message}" in r.stderr


def test_metrics_parse(server):
    m = server.metrics()
    assert m["xrt_steps_total"] > 0
    assert any(k.startswith("xrt_bucket_hits_total") for k in m)
    assert "xrt_time_to_first_token_seconds_count" in m


def test_batch_invariance_64_concurrent_streams(server):
    prompts = [f"Request {i}: " + " ".join(["alpha", "beta", "gamma"][: 1 + i % 3]) * (1 + i % 5)
               for i in range(64)]
    alone = [greedy(server, p, max_tokens=12).choices[0].text for p in prompts]

    def stream(p):
        s = server.client.completions.create(model=MODEL, prompt=p, max_tokens=12, temperature=0,
                                             stream=True)
        return "".join(c.choices[0].text for c in s if c.choices)

    with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
        together = list(pool.map(stream, prompts))
    assert together == alone


def test_preemption_and_chunked_prefill(artifacts, server):
    long_prompt = " ".join(f"token{i}" for i in range(60))
    prompts = [long_prompt] + [f"{i} {PROMPT}" for i in range(12)]
    expected = [greedy(server, p, max_tokens=60).choices[0].text for p in prompts]
    # Few KV blocks (preemption by recompute) and a 16-token budget (chunked prefill).
    small = Server(artifacts["main"], "--num-kv-blocks", "16", "--max-num-batched-tokens", "16",
                   "--no-enable-prefix-caching")
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(prompts)) as pool:
            got = list(pool.map(lambda p: greedy(small, p, max_tokens=60).choices[0].text,
                                prompts))
        assert got == expected
        assert small.metrics()["xrt_preemptions_total"] > 0
        # A request that can never fit the KV cache is a 400, and the server keeps serving.
        with pytest.raises(openai.BadRequestError) as e:
            small.client.completions.create(model=MODEL, prompt=long_prompt * 2, max_tokens=20)
        assert "KV cache blocks" in str(e.value)
        assert greedy(small, prompts[1], max_tokens=60).choices[0].text == expected[1]
    finally:
        small.stop()


def test_f16_kv_cache_holds_twice_the_blocks_and_serves_batch_invariantly(artifacts):
    # The same byte budget holds twice the blocks of halves; concurrent streams give
    # each request's text alone (the kernel's half path is batch invariant too).
    r = subprocess.run([XRT, "run", artifacts["main"], "--port", "0", "--kv-cache-dtype", "bogus"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--kv-cache-dtype" in r.stderr, r.stderr
    blocks = {}
    for dtype in ("f32", "f16"):
        s = Server(artifacts["main"], "--kv-cache-memory", "4MiB", "--kv-cache-dtype", dtype)
        try:
            blocks[dtype] = s.metrics()["xrt_kv_cache_blocks_total"]
            if dtype == "f16":
                prompts = [f"{i}: {PROMPT}" * (1 + i % 3) for i in range(12)]
                alone = [greedy(s, p, max_tokens=16).choices[0].text for p in prompts]
                with concurrent.futures.ThreadPoolExecutor(max_workers=len(prompts)) as pool:
                    together = list(pool.map(
                        lambda p: greedy(s, p, max_tokens=16).choices[0].text, prompts))
                assert together == alone
                assert all(greedy(s, p, max_tokens=16).usage.completion_tokens == 16
                           for p in prompts[:2])
        finally:
            s.stop()
    assert blocks["f16"] == 2 * blocks["f32"], blocks


def test_auto_kv_cache_is_f16_for_int8_compute_and_f32_otherwise(artifacts):
    # `auto` (the default) follows the artifact's compute precision: f32 compute keeps
    # an f32 cache (its agreement with HF); int8 (or bf16) compute gets the f16 one.
    def blocks_and_dtype(artifact, *args):
        s = Server(artifact, "--kv-cache-memory", "4MiB", *args)
        try:
            line = re.search(r"KV blocks of \d+ tokens, (\w+) KV cache, ([\w+]+) kernels\)",
                             s.logs())
            assert line, s.logs()
            # The kernels' instruction-set tier this CPU runs, and the features outside
            # the tiers its int8 kernels use (cpu_isa.h: BestKernelsName).
            tier, *features = line.group(2).split("+")
            assert tier in ("scalar", "avx2", "avx512", "avx512_vnni", "avx512_bf16",
                            "amx"), line.group(2)
            assert set(features) <= {"avx_vnni", "gfni"}, line.group(2)
            text = greedy(s, PROMPT, max_tokens=8).choices[0].text
            return s.metrics()["xrt_kv_cache_blocks_total"], line.group(1), text
        finally:
            s.stop()

    f32_blocks, f32_dtype, _ = blocks_and_dtype(artifacts["main"])
    assert f32_dtype == "f32"
    with tempfile.TemporaryDirectory() as tmp:
        int8 = compile_artifact(tmp, "int8.xpk", "--max-num-seqs", "8", "--max-num-batched-tokens",
                                "64", "--weight-dtype", "q8_0", "--compute", "int8")
        auto_blocks, auto_dtype, auto_text = blocks_and_dtype(int8)
        forced_blocks, forced_dtype, _ = blocks_and_dtype(int8, "--kv-cache-dtype", "f32")
        asked_blocks, asked_dtype, asked_text = blocks_and_dtype(int8, "--kv-cache-dtype", "f16")
    assert (auto_dtype, forced_dtype, asked_dtype) == ("f16", "f32", "f16")
    assert auto_blocks == asked_blocks == 2 * forced_blocks == 2 * f32_blocks
    assert auto_text == asked_text


def test_fp8_kv_cache_holds_twice_the_f16_tokens_and_serves(artifacts):
    # `--kv-cache-dtype fp8` (vLLM's spelling; fp8_e4m3 too): one byte per value.
    def run(*args):
        s = Server(artifacts["main"], "--kv-cache-memory", "4MiB", *args)
        try:
            line = re.search(r"KV blocks of \d+ tokens, (\w+) KV cache", s.logs())
            assert line, s.logs()
            out = greedy(s, PROMPT, max_tokens=8, extra_body={"ignore_eos": True})
            return s.metrics()["xrt_kv_cache_blocks_total"], line.group(1), out
        finally:
            s.stop()

    f16_blocks, f16_dtype, _ = run("--kv-cache-dtype", "f16")
    fp8_blocks, fp8_dtype, out = run("--kv-cache-dtype", "fp8_e4m3")
    assert (f16_dtype, fp8_dtype) == ("f16", "fp8")
    assert fp8_blocks == 2 * f16_blocks
    assert out.usage.completion_tokens == 8 and out.choices[0].text
    r = subprocess.run([XRT, "run", artifacts["main"], "--kv-cache-dtype", "fp4"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "'fp4'" in r.stderr and "fp8" in r.stderr, r.stderr


def test_raising_a_compiled_limit_is_an_error(artifacts):
    r = subprocess.run([XRT, "run", artifacts["main"], "--max-num-seqs", "1000"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "max_num_seqs 1000" in r.stderr and "32" in r.stderr


def test_client_disconnect_aborts_and_frees_blocks(server):
    before = server.metrics()
    ttft = "xrt_time_to_first_token_seconds_count"
    key = 'xrt_requests_finished_total{"finished_reason": "abort"}'
    with paused(server):
        with requests.post(server.url + "/v1/completions", stream=True, timeout=60,
                           headers={"Authorization": f"Bearer {API_KEY}"},
                           json={"model": MODEL, "prompt": PROMPT, "max_tokens": 400,
                                 "temperature": 0, "ignore_eos": True, "stream": True}) as r:
            assert r.status_code == 200
            # Stepped until its first token, then frozen in flight, holding its blocks.
            frozen = run_until(server, lambda m: m[ttft] > before[ttft])
            assert frozen["xrt_num_requests_running"] == 1
            assert frozen["xrt_kv_cache_blocks_used"] > 0
            generated = (frozen["xrt_generation_tokens_total"]
                         - before["xrt_generation_tokens_total"])
            assert 0 < generated < 400
        # Hung up: the server notices while the engine is still paused, and aborts.
        after = metric_when(server, lambda m: m[key] > before[key]
                            and m["xrt_kv_cache_blocks_used"] == 0, timeout=30)
    assert after[key] == before[key] + 1
    assert after["xrt_kv_cache_blocks_used"] == 0
    assert after["xrt_generation_tokens_total"] - before["xrt_generation_tokens_total"] == generated
    assert greedy(server, "ok", max_tokens=2).choices[0].finish_reason == "length"


def test_strict_mode_fails_unbucketed_steps_and_keeps_serving(artifacts):
    with tempfile.TemporaryDirectory() as tmp:
        # Buckets 16 and 32 under a 100-token budget: a long prompt needs a step no
        # executable holds.
        gappy = compile_artifact(tmp, "gappy.xpk", "--token-buckets", "16,32",
                                 "--max-num-batched-tokens", "100", "--max-num-seqs", "4")
        long_prompt = " ".join(f"token{i}" for i in range(30))
        short = "Hi"
        default = Server(gappy)
        try:
            # The default mode splits the step: the long prompt is served.
            ok = greedy(default, long_prompt, max_tokens=4)
            assert ok.choices[0].finish_reason == "length"
            assert default.metrics()["xrt_steps_without_bucket_total"] == 0
        finally:
            default.stop()
        strict = Server(gappy, "--check-recompilation")
        try:
            with pytest.raises(openai.InternalServerError) as e:
                greedy(strict, long_prompt, max_tokens=4)
            assert "no compiled lm_step bucket" in str(e.value)
            assert "--check-recompilation" in str(e.value)
            assert strict.metrics()["xrt_steps_without_bucket_total"] >= 1
            assert greedy(strict, short, max_tokens=4).choices[0].finish_reason == "length"
            assert "strict mode" in strict.logs()
        finally:
            strict.stop()


def pause(server, mode="keep"):
    """POST /pause (xrt run --server-dev-mode). The fixture model decodes a token in well under
    a millisecond, faster than a client can observe a request in flight; tests freeze the
    engine to make requests meet in one step, or to hold them in flight, deterministically."""
    r = server.post(f"/pause?mode={mode}", None)
    assert r.status_code == 200 and r.json() == {"status": "paused"}, r.text


def resume(server):
    r = server.post("/resume", None)
    assert r.status_code == 200 and r.json() == {"status": "resumed"}, r.text


@contextlib.contextmanager
def paused(server):
    """The engine paused for the block, resumed after it whatever happened (a failed assertion
    must not leave the later tests' requests waiting)."""
    pause(server)
    try:
        yield
    finally:
        resume(server)


def run_until(server, pred, timeout=30):
    """With the engine paused: runs it one step at a time (POST /resume?steps=1) until
    pred(metrics) holds or the timeout; returns the metrics, the engine paused. Requests that
    take hundreds of steps are caught in flight, however fast the machine."""
    deadline = time.time() + timeout
    while True:
        m = server.metrics()
        if pred(m) or time.time() > deadline:
            return m
        r = server.post("/resume?steps=1", None)
        assert r.status_code == 200 and r.json()["status"] == "paused", r.text
        if r.json()["steps"] == 0:  # nothing to run yet: requests still arriving
            time.sleep(0.01)


def metric_when(server, pred, timeout=10):
    """Polls /metrics until pred(metrics) holds (or the timeout); returns the last metrics."""
    deadline = time.time() + timeout
    while True:
        m = server.metrics()
        if pred(m) or time.time() > deadline:
            return m
        time.sleep(0.01)


def raw_post(server, body):
    """Sends a completion request on a bare socket (to hang up before the response)."""
    payload = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Authorization: Bearer " + API_KEY.encode() + b"\r\n"
                 b"Content-Type: application/json\r\n"
                 b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    return sock


def test_non_streaming_client_hang_up_aborts_and_frees_blocks(server):
    abort = 'xrt_requests_finished_total{"finished_reason": "abort"}'
    before = server.metrics()
    max_tokens = 440
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}
    with paused(server):  # the four meet in the first step
        socks = [raw_post(server, body) for _ in range(4)]
        assert metric_when(server, lambda m: m["xrt_num_requests_waiting"] == 4)[
            "xrt_num_requests_waiting"] == 4
        # Stepped until all four run, then frozen while running, holding their blocks.
        running = run_until(server, lambda m: m["xrt_num_requests_running"] == 4)
        assert running["xrt_num_requests_running"] == 4
        assert running["xrt_kv_cache_blocks_used"] > 0
        for s in socks:
            s.close()  # hang up without reading the response
        # Today's code let them run to max_tokens ("length"); they must be aborted instead.
        after = metric_when(server, lambda m: m["xrt_num_requests_running"] == 0
                            and m["xrt_num_requests_waiting"] == 0
                            and m[abort] == before[abort] + 4
                            and m["xrt_kv_cache_blocks_used"] == 0, timeout=5)
    assert after["xrt_num_requests_running"] == 0
    assert after["xrt_num_requests_waiting"] == 0
    assert after[abort] == before[abort] + 4
    assert after["xrt_kv_cache_blocks_used"] == 0
    generated = after["xrt_generation_tokens_total"] - before["xrt_generation_tokens_total"]
    assert generated < 4 * max_tokens
    assert greedy(server, "ok", max_tokens=2).choices[0].finish_reason == "length"


def sse_stream(server, body, started):
    """Streams a completion; returns (HTTP status, the data payloads) and sets `started` once
    the response headers arrived. Every event is kept, so a cut stream shows."""
    try:
        with server.post("/v1/completions", {**body, "stream": True}, stream=True, timeout=120) as r:
            started.set()
            if r.status_code != 200:
                return r.status_code, []
            events = []
            for line in r.iter_lines():
                if line.startswith(b"data: "):
                    events.append(line[len(b"data: "):].decode())
            return 200, events
    except requests.RequestException as e:  # refused or cut
        started.set()
        return repr(e), []


def check_ended(status, events):
    """An accepted stream ended with a finish_reason and then [DONE]; returns the reason."""
    assert status == 200, status
    assert events and events[-1] == "[DONE]", events[-3:]
    reasons = [c["finish_reason"] for e in events[:-1] for c in json.loads(e)["choices"]
               if c["finish_reason"]]
    assert len(reasons) == 1, events[-3:]
    return reasons[0]


def sigterm_under_load(artifact, shutdown_timeout, max_tokens, freeze):
    """32 streams and one non-streaming request in flight, then SIGTERM. Returns the streams'
    finish reasons, the non-streaming response, how long the server took to exit and its log.
    The 33 requests meet in one batch (queued while the engine is paused, the non-streaming one
    first); with `freeze`, the engine is paused again once each has its first token, so none can
    finish before the signal."""
    server = Server(artifact, "--shutdown-timeout", str(shutdown_timeout), "--server-dev-mode")
    n = 32
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=n + 1)
    waiting = "xrt_num_requests_waiting"
    try:
        pause(server)
        plain = pool.submit(server.client.completions.create, model=MODEL, prompt=PROMPT,
                            max_tokens=max_tokens, temperature=0, extra_body={"ignore_eos": True})
        assert metric_when(server, lambda m: m[waiting] == 1)[waiting] == 1
        body = {"model": MODEL, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
        started = [threading.Event() for _ in range(n)]
        streams = [pool.submit(sse_stream, server, {**body, "prompt": f"{i} {PROMPT}"}, started[i])
                   for i in range(n)]
        for e in started:
            assert e.wait(60), "a stream did not start"
        assert metric_when(server, lambda m: m[waiting] == n + 1)[waiting] == n + 1
        if freeze:
            ttft = "xrt_time_to_first_token_seconds_count"
            assert run_until(server, lambda m: m[ttft] == n + 1)[ttft] == n + 1
        else:
            resume(server)
        in_flight = "xrt_http_generation_requests_in_flight"
        assert metric_when(server, lambda m: m[in_flight] == n + 1)[in_flight] == n + 1
        server.proc.send_signal(signal.SIGTERM)
        t0 = time.time()
        # New requests are refused (connection refused, or a 503 on an open connection).
        time.sleep(0.3)
        with pytest.raises(openai.APIError):
            server.client.completions.create(model=MODEL, prompt="late", max_tokens=2)
        rc = server.proc.wait(timeout=shutdown_timeout + 60)
        exit_seconds = time.time() - t0
        assert rc == 0, f"xrt run exited with {rc}:\n{server.logs()}"
        reasons = [check_ended(*f.result(timeout=60)) for f in streams]
        response = plain.result(timeout=60)
        return reasons, response, exit_seconds, server.logs()
    finally:
        if server.proc.poll() is None:  # a failed assertion: do not leave the clients waiting
            server.proc.kill()
            server.proc.wait()
        pool.shutdown(wait=True)


def test_sigterm_lets_requests_finish_within_the_shutdown_timeout(artifacts):
    reasons, response, exit_seconds, logs = sigterm_under_load(artifacts["wide"], 120, max_tokens=440,
                                                               freeze=False)
    # They were in flight at SIGTERM, and ran to their end.
    waited = re.search(r"waiting up to 120 s for (\d+) in flight", logs)
    assert waited and int(waited.group(1)) > 0, logs
    assert "aborting" not in logs
    assert reasons == ["length"] * 32
    assert response.choices[0].finish_reason == "length"
    assert response.usage.completion_tokens == 440
    assert exit_seconds < 60


def test_sigterm_after_a_short_shutdown_timeout_aborts_with_a_final_chunk(artifacts):
    reasons, response, exit_seconds, logs = sigterm_under_load(artifacts["wide"], 0.25, max_tokens=440,
                                                               freeze=True)
    assert "aborting 33 requests still in flight" in logs
    assert reasons == ["abort"] * 32
    # The non-streaming request gets a whole JSON response with what it generated.
    assert response.choices[0].finish_reason == "abort"
    assert 0 < response.usage.completion_tokens < 440
    assert response.choices[0].text
    assert exit_seconds < 30
