"""End-to-end tests with images: a real `xrt run` of a tiny LLaVA model on loopback, driven by
the official openai client.

The artifact is compiled from tests/fixtures/llava/llava_clip_llama (CLIP tower, Llama 2
style SentencePiece tokenizer, llava-hf chat template). The C++ numerics tests prove the
engine equals HF transformers on these images; here the server's path (parts, data / http /
file URLs, fetch limits, the chat template with image parts, concurrency, metrics, strict
mode) must give what `xrt generate` gives for the same request, and bad images must be 400s
that leave the server serving.
"""
import base64
import concurrent.futures
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

import openai
import pytest

from test_openai_server import API_KEY, MODEL, ROOT, XCC, XRT, Server

LLAVA_DIR = os.path.join(ROOT, "tests", "fixtures", "llava", "llava_clip_llama")
IMAGES = os.path.join(ROOT, "tests", "fixtures", "llava", "images")
QUESTION = "What is shown here?"
MAX_TOKENS = 12


def data_url(name, media_type=None):
    with open(os.path.join(IMAGES, name), "rb") as f:
        payload = base64.b64encode(f.read()).decode()
    if media_type is None:
        media_type = "image/jpeg" if name.endswith(".jpg") else "image/png"
    return f"data:{media_type};base64,{payload}"


def image_part(url):
    return {"type": "image_url", "image_url": {"url": url}}


def chat(server, parts, max_tokens=MAX_TOKENS, history=()):
    r = server.client.chat.completions.create(
        model=MODEL, max_tokens=max_tokens, temperature=0,
        messages=[*history, {"role": "user", "content": parts}], extra_body={"ignore_eos": True})
    return r


@pytest.fixture(scope="module")
def artifact():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "llava.xpk")
        subprocess.run([XCC, "compile", LLAVA_DIR, "-o", path, "-q", "--max-model-len", "256",
                        "--max-num-seqs", "8", "--max-num-batched-tokens", "64"], check=True)
        yield path


@functools.lru_cache(maxsize=None)
def generate(artifact, *images):
    """What `xrt generate --chat` answers for QUESTION with `images` (in the user turn first)."""
    cmd = [XRT, "generate", artifact, "--chat", "--prompt", QUESTION, "--temperature", "0",
           "--max-tokens", str(MAX_TOKENS), "--ignore-eos", "--threads", "2"]
    for name in images:
        cmd += ["--image", os.path.join(IMAGES, name)]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    text = out.stdout.decode("utf-8")
    assert text.endswith("\n")  # xrt generate ends its output with a newline
    return text[:-1]


@pytest.fixture(scope="module")
def server(artifact):
    with tempfile.TemporaryDirectory() as media:
        shutil.copy(os.path.join(IMAGES, "chelsea_rgb.jpg"), media)
        # A symlink out of the allowed directory must not let a request read its target.
        os.symlink(os.path.join(IMAGES, "rocket_tiny.png"), os.path.join(media, "escape.png"))
        s = Server(artifact, "--allowed-local-media-path", media, "--limit-mm-per-prompt", "2")
        s.media = media
        yield s
        s.stop()


@pytest.fixture(scope="module")
def image_http():
    """A loopback http server serving the fixture images."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=IMAGES)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_data_url_image_equals_generate(server, artifact):
    r = chat(server, [image_part(data_url("chelsea_rgb.jpg")), {"type": "text", "text": QUESTION}])
    assert r.choices[0].message.content == generate(artifact, "chelsea_rgb.jpg")
    # The 16 placeholder tokens of the image are part of the prompt.
    text_only = chat(server, [{"type": "text", "text": QUESTION}])
    assert r.usage.prompt_tokens >= text_only.usage.prompt_tokens + 16
    assert text_only.choices[0].message.content == generate(artifact)
    assert r.choices[0].message.content != text_only.choices[0].message.content


def test_two_images_in_one_request(server, artifact):
    r = chat(server, [image_part(data_url("camera_gray.png")),
                      image_part(data_url("astronaut_rgba.png")),
                      {"type": "text", "text": QUESTION}])
    assert r.choices[0].message.content == generate(artifact, "camera_gray.png",
                                                    "astronaut_rgba.png")


def test_http_and_file_urls(server, artifact, image_http):
    want = generate(artifact, "chelsea_rgb.jpg")
    r = chat(server, [image_part(image_http + "/chelsea_rgb.jpg"), {"type": "text", "text": QUESTION}])
    assert r.choices[0].message.content == want
    local = "file://" + os.path.join(server.media, "chelsea_rgb.jpg")
    r = chat(server, [image_part(local), {"type": "text", "text": QUESTION}])
    assert r.choices[0].message.content == want


def test_mixed_concurrent_requests_equal_each_alone(server, artifact):
    cases = [(), ("chelsea_rgb.jpg",), ("rocket_tiny.png",), ("coffee_tall.png", "camera_gray.png"),
             (), ("astronaut_rgba.png",)] * 2
    want = {c: generate(artifact, *c) for c in set(cases)}

    def run(c):
        parts = [image_part(data_url(n)) for n in c] + [{"type": "text", "text": QUESTION}]
        return chat(server, parts).choices[0].message.content

    with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
        got = list(pool.map(run, cases))
    for c, text in zip(cases, got):
        assert text == want[c], c


def test_bad_images_are_400s_and_the_server_keeps_serving(server, artifact, image_http):
    good = lambda: chat(server, [image_part(data_url("rocket_tiny.png")),
                                 {"type": "text", "text": QUESTION}]).choices[0].message.content
    want = generate(artifact, "rocket_tiny.png")
    garbage = "data:image/png;base64," + base64.b64encode(b"not an image at all").decode()
    truncated = data_url("chelsea_rgb.jpg")[:400]
    cases = [
        ([image_part(garbage)], "messages[0].content[0]"),
        ([image_part(truncated)], "messages[0].content[0]"),
        ([image_part(data_url("rocket_tiny.png", "text/plain"))], "messages[0].content[0]"),
        ([image_part(image_http + "/missing.png")], "messages[0].content[0]"),
        ([image_part("file:///etc/passwd")], "messages[0].content[0]"),
        ([image_part("file://" + os.path.join(server.media, "escape.png"))], "messages[0].content[0]"),
        ([{"type": "text", "text": "x"}] + [image_part(data_url("rocket_tiny.png"))] * 3, None),
    ]
    for parts, param in cases:
        with pytest.raises(openai.BadRequestError) as e:
            chat(server, parts + [{"type": "text", "text": QUESTION}])
        if param is not None:
            assert e.value.body["param"] == param, e.value.body
            assert e.value.body["message"].startswith(param), e.value.body
        assert good() == want


def test_metrics_count_images_and_encoder_cache_hits(server):
    before = server.metrics()
    parts = [image_part(data_url("chelsea_gray.jpg")), {"type": "text", "text": QUESTION}]
    # The same image twice after different conversations: no KV prefix covers the second,
    # the encoder cache does.
    chat(server, parts, history=[{"role": "user", "content": "Hello."},
                                 {"role": "assistant", "content": "Hi."}])
    chat(server, parts, history=[{"role": "user", "content": "Good evening, how are you?"},
                                 {"role": "assistant", "content": "Fine."}])
    after = server.metrics()
    delta = lambda k: after.get(k, 0) - before.get(k, 0)
    assert delta("xrt_images_encoded_total") == 1
    assert delta("xrt_encoder_cache_misses_total") == 1
    assert delta("xrt_encoder_cache_hits_total") == 1
    hits = [k for k in after if k.startswith("xrt_bucket_hits_total") and "vision_encode" in k]
    assert hits, "vision_encode bucket hits are reported"


def test_strict_mode_serves_images_with_compiled_executables_only(artifact):
    s = Server(artifact, "--check-recompilation")
    try:
        for images in [("chelsea_rgb.jpg",), ("camera_gray.png", "coffee_tall.png"), ()]:
            parts = [image_part(data_url(n)) for n in images] + [{"type": "text", "text": QUESTION}]
            assert chat(s, parts).choices[0].message.content == generate(artifact, *images)
        assert s.metrics().get("xrt_steps_without_bucket_total", 0) == 0
    finally:
        s.stop()


def test_serving_bench_with_images(server, tmp_path):
    """bench/serving_bench.py --images-per-request: its random PNGs are decoded and encoded by
    the server (every request's prompt holds their placeholder tokens), and every generated
    token is timed, also those whose text is empty (the tiny model's bytes are not UTF-8)."""
    result = tmp_path / "bench.json"
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "serving_bench.py"), "--base-url", server.url,
         "--model", MODEL, "--api-key", API_KEY, "--images-per-request", "2", "--image-size",
         "100x60", "--num-prompts", "6", "--max-concurrency", "3", "--random-input-len", "8",
         "--random-output-len", "5", "--ignore-eos", "--disable-progress", "--result-json",
         str(result)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    assert out.returncode == 0, out.stderr.decode()
    r = json.loads(result.read_text())
    assert r["completed"] == 6 and r["failed"] == 0
    assert r["endpoint"] == "/v1/chat/completions" and r["images_per_request"] == 2
    # 16 placeholder tokens per image of the fixture's tower, besides the text.
    assert all(n > 2 * 16 for n in r["input_lens"]), r["input_lens"]
    assert r["output_lens"] == [5] * 6
    for ttft, latency, itl in zip(r["ttfts"], r["latencies"], r["itls"]):
        assert 0 < ttft <= latency
        assert len(itl) == 4  # one gap per token after the first
