#!/usr/bin/env python3
"""Serving benchmark for any OpenAI-compatible server (xrt run, vLLM, ...).

Sends N streaming requests to /v1/completions, measures TTFT / TPOT / ITL /
E2E latency per request and prints a report laid out like vLLM's
benchmarks/benchmark_serving.py. Optionally samples the server's RSS.

--images-per-request N (vision-language models) sends each request to
/v1/chat/completions as one user message: N images (PNG data URIs of
--image-size, new random ones per request, as vLLM's random-mm dataset makes,
so no request hits the server's encoder cache) before the text prompt.

Dependencies: Python >= 3.10, aiohttp (pip install aiohttp); numpy is not
needed. See bench/README.md for usage.

Exit codes: 0 all requests succeeded (or --allow-failures), 1 some request
failed, 2 setup error (server unreachable, warm-up request failed, bad args).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import os
import random
import resource
import statistics
import struct
import sys
import time
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional

try:
    import aiohttp
except ImportError:  # pragma: no cover
    sys.stderr.write("serving_bench.py needs aiohttp: pip install aiohttp\n")
    sys.exit(2)

# Plain, common English words: most tokenizers encode each as 1-2 tokens, so
# prompts of N words are roughly N-2N tokens. Calibrate with --tokens-per-word.
_WORDS = """
time year people way day man thing woman life child world school state family
student group country problem hand part place case week company system program
question work government number night point home water room mother area money
story fact month lot right study book eye job word business issue side kind
head house service friend father power hour game line end member law car city
community name president team minute idea kid body information back parent face
others level office door health person art war history party result change
morning reason research girl guy moment air teacher force education foot boy
age policy everything process music market sense nation plan college interest
death experience effect use class control care field development role effort
rate heart drug show leader light voice wife police mind price report decision
son view relationship town road arm difference value building action model
season society tax director position player record paper space ground form
event official matter center couple site project activity star table need court
oil situation cost industry figure street image phone data picture practice
piece land product doctor wall patient worker news test movie north love
support technology step baby computer type attention film tree source organ
window river bird garden stone green small large early young important public
bad same able good new first last long great little own other old big high
different local social national true whole free military full special easy
clear recent late hard major better economic strong possible political real
black white red blue simple open quick slow warm cold bright dark happy
""".split()

try:  # optional: a faster JSON parser keeps the client off the critical path
    import orjson

    _loads = orjson.loads
except ImportError:
    _loads = json.loads


# --------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------


@dataclass
class Request:
    prompt: str
    prompt_len: int  # intended (approximate) prompt tokens
    output_len: int  # max_tokens
    model: Optional[str] = None  # a LoRA adapter name (--lora-modules); None: --model
    images: list[str] = field(default_factory=list)  # data URIs (--images-per-request)


@dataclass
class Calibration:
    tokens_per_word: float = 1.0
    overhead: float = 0.0  # tokens added regardless of words (e.g. BOS)
    source: str = "default"

    def words_for(self, tokens: int) -> int:
        return max(1, int(round((tokens - self.overhead) / self.tokens_per_word)))


def png_data_uri(width: int, height: int, rng: random.Random) -> str:
    """A random RGB PNG as a data URI: a grid of random colours in 16 x 16 pixel cells
    (an image with structure, cheap to make and to compress, unlike pixel noise)."""
    cells_x = (width + 15) // 16
    rows = []
    for _ in range((height + 15) // 16):
        cells = [bytes(rng.getrandbits(8) for _ in range(3)) * 16 for _ in range(cells_x)]
        row = b"\x00" + b"".join(cells)[:3 * width]  # filter type 0 (None)
        rows.extend([row] * 16)
    raw = b"".join(rows[:height])

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) +
           chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def add_images(args, reqs: list[Request], seed_offset: int = 2) -> None:
    """--images-per-request new random images on every request (own seeded stream)."""
    if args.images_per_request <= 0:
        return
    w, h = args.image_size
    rng = random.Random(args.seed + seed_offset)
    for r in reqs:
        r.images = [png_data_uri(w, h, rng) for _ in range(args.images_per_request)]


def random_words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def sample_random(args, rng: random.Random, cal: Calibration) -> list[Request]:
    r = args.random_range_ratio
    if not 0 <= r < 1:
        raise SystemExit("--random-range-ratio must be in [0, 1)")

    def draw(n: int) -> int:
        lo = max(1, int(math.floor(n * (1 - r))))
        hi = max(lo, int(math.ceil(n * (1 + r))))
        return rng.randint(lo, hi)

    reqs = []
    for _ in range(args.num_prompts):
        in_len, out_len = draw(args.random_input_len), draw(args.random_output_len)
        reqs.append(Request(random_words(rng, cal.words_for(in_len)), in_len, out_len))
    return reqs


# Synthetic "ShareGPT-like" mix: (weight, median input, median output, sigma)
# of log-normal lengths. Roughly the shape of ShareGPT conversations: many
# short chats, some medium, a tail of long-context prompts and short Q&A.
_SHAREGPT_MIX = [
    (0.35, 40, 150, 0.8),   # short chat turn, medium answer
    (0.30, 200, 250, 0.6),  # medium prompt, long answer
    (0.20, 600, 100, 0.5),  # long context (summarize / extract), short answer
    (0.15, 15, 30, 0.6),    # short question, short answer
]


def sample_sharegpt_like(args, rng: random.Random, cal: Calibration, max_model_len: Optional[int]) -> list[Request]:
    weights = [m[0] for m in _SHAREGPT_MIX]
    max_in, max_out = args.sharegpt_max_input_len, args.sharegpt_max_output_len
    budget = None
    if max_model_len:
        # Prompt lengths are approximate (words -> tokens): keep a 20% margin.
        budget = int(max_model_len * 0.8)
    reqs = []
    for _ in range(args.num_prompts):
        _, med_in, med_out, sigma = rng.choices(_SHAREGPT_MIX, weights)[0]
        in_len = int(round(rng.lognormvariate(math.log(med_in), sigma)))
        out_len = int(round(rng.lognormvariate(math.log(med_out), sigma)))
        in_len = min(max(4, in_len), max_in)
        out_len = min(max(1, out_len), max_out)
        if budget is not None:
            in_len = max(1, min(in_len, budget * 3 // 4))
            out_len = max(1, min(out_len, budget - in_len))
        reqs.append(Request(random_words(rng, cal.words_for(in_len)), in_len, out_len))
    return reqs


# --------------------------------------------------------------------------
# HTTP client
# --------------------------------------------------------------------------


@dataclass
class Output:
    success: bool = False
    error: str = ""
    prompt_len: int = 0  # server-reported prompt tokens (else the intended length)
    output_tokens: int = 0
    output_tokens_from_usage: bool = False
    generated_text: str = ""
    ttft: float = 0.0  # s
    latency: float = 0.0  # s
    itl: list[float] = field(default_factory=list)  # s
    start: float = 0.0  # s since benchmark start


def api_url(base_url: str, endpoint: str) -> str:
    base = base_url.rstrip("/")
    if base.endswith("/v1") and endpoint.startswith("/v1/"):
        base = base[:-3]
    return base + endpoint


def headers_for(args) -> dict[str, str]:
    h = {"Content-Type": "application/json"}
    if args.api_key:
        h["Authorization"] = f"Bearer {args.api_key}"
    return h


def request_body(args, req: Request) -> dict[str, Any]:
    body: dict[str, Any] = {"model": req.model or args.model}
    if req.images:
        parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": u}} for u in req.images]
        body["messages"] = [{"role": "user", "content": parts + [{"type": "text", "text": req.prompt}]}]
    else:
        body["prompt"] = req.prompt
    body.update({
        "max_tokens": req.output_len,
        "temperature": args.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    })
    if args.top_p is not None:
        body["top_p"] = args.top_p
    if args.ignore_eos:
        body["ignore_eos"] = True
    if args.seed_requests:
        body["seed"] = args.seed
    return body


def _error_message(obj: Any) -> str:
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    return str(obj)


async def send_request(session: aiohttp.ClientSession, url: str, headers: dict, body: dict,
                       req: Request, t0: float) -> Output:
    out = Output(prompt_len=req.prompt_len)
    st = time.perf_counter()
    out.start = st - t0
    last = st
    chunks = 0
    text_parts: list[str] = []
    done = False
    try:
        async with session.post(url, json=body, headers=headers) as resp:
            if resp.status != 200:
                raw = await resp.text()
                try:
                    msg = _error_message(json.loads(raw))
                except ValueError:
                    msg = raw[:300]
                out.error = f"HTTP {resp.status}: {msg}"
                out.latency = time.perf_counter() - st
                return out
            buf = b""
            async for piece in resp.content.iter_any():
                # Everything in one read arrived at the same time.
                now = time.perf_counter()
                lines = (buf + piece).split(b"\n")
                buf = lines.pop()  # incomplete last line (b"" if none)
                for line in lines:
                    if not line.startswith(b"data:"):
                        continue  # blank separator, ":" comment, event:/id: fields
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        done = True
                        continue
                    obj = _loads(data)
                    if "error" in obj and not obj.get("choices"):
                        raise RuntimeError(f"error event: {_error_message(obj)}")
                    choices = obj.get("choices") or []
                    text, token = "", False
                    for c in choices:
                        # Every choice chunk but the chat role announcement (which a server
                        # may send before any token) carries the step's token(s), also when
                        # their text is empty (part of a UTF-8 character, a skipped special
                        # token, the last token of a chat stream as a bare finish_reason).
                        if "text" in c:
                            text += c["text"] or ""
                        else:
                            delta = c.get("delta") or {}
                            if "role" in delta:
                                continue
                            text += delta.get("content") or ""
                        token = True
                    if token:
                        if chunks == 0:
                            out.ttft = now - st
                        else:
                            out.itl.append(now - last)
                        last = now
                        chunks += 1
                        text_parts.append(text)
                    usage = obj.get("usage")
                    if usage:
                        if usage.get("completion_tokens") is not None:
                            out.output_tokens = int(usage["completion_tokens"])
                            out.output_tokens_from_usage = True
                        if usage.get("prompt_tokens") is not None:
                            out.prompt_len = int(usage["prompt_tokens"])
            if buf.strip() == b"data: [DONE]":  # no trailing newline
                done = True
        out.latency = time.perf_counter() - st
        out.generated_text = "".join(text_parts)
        if not out.output_tokens_from_usage:
            out.output_tokens = chunks
        if not done:
            out.error = "stream ended without [DONE]"
        elif chunks == 0 and out.output_tokens == 0:
            out.error = "no output generated"
        elif chunks == 0:
            # Tokens were generated but decoded to "" (e.g. the first token was
            # end-of-sequence): a valid, complete response; its TTFT is its latency.
            out.ttft = out.latency
            out.success = True
        else:
            out.success = True
    except asyncio.TimeoutError:
        out.error = "timeout"
        out.latency = time.perf_counter() - st
    except Exception as e:  # noqa: BLE001 - any failure counts as a failed request
        out.error = f"{type(e).__name__}: {e}"
        out.latency = time.perf_counter() - st
    return out


async def get_json(session: aiohttp.ClientSession, url: str, headers: dict) -> Any:
    async with session.get(url, headers=headers) as resp:
        resp.raise_for_status()
        return await resp.json(content_type=None)


async def probe_prompt_tokens(session, args, url, headers, n_words: int, rng: random.Random) -> int:
    body = {"model": args.model, "prompt": random_words(rng, n_words), "max_tokens": 1, "temperature": 0}
    async with session.post(url, json=body, headers=headers) as resp:
        js = await resp.json(content_type=None)
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {_error_message(js)}")
        return int(js["usage"]["prompt_tokens"])


async def calibrate(session, args, url, headers, max_model_len: Optional[int]) -> Calibration:
    if args.tokens_per_word != "auto":
        return Calibration(float(args.tokens_per_word), 0.0, "--tokens-per-word")
    rng = random.Random(args.seed + 7919)
    small = 8
    large = 64  # words; halved while the server rejects the probe as too long
    if max_model_len:
        large = max(small + 8, min(large, max_model_len // 8))
    try:
        a = await probe_prompt_tokens(session, args, url, headers, small, rng)
        while True:
            try:
                b = await probe_prompt_tokens(session, args, url, headers, large, rng)
                break
            except RuntimeError:
                if large // 2 < small + 8:
                    raise
                large //= 2
        tpw = (b - a) / (large - small)
        if tpw <= 0:
            raise RuntimeError(f"nonsensical probe ({small} words: {a} tokens, {large} words: {b} tokens)")
        return Calibration(tpw, max(0.0, a - tpw * small), "probed")
    except Exception as e:  # noqa: BLE001
        print(f"warning: tokens-per-word calibration failed ({e}); assuming 1.3", file=sys.stderr)
        return Calibration(1.3, 0.0, "fallback")


# --------------------------------------------------------------------------
# Server RSS sampling
# --------------------------------------------------------------------------


def read_rss_mb(pid: int) -> Optional[float]:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


class RssSampler:
    def __init__(self, pid: int, interval: float = 0.5):
        self.pid, self.interval = pid, interval
        self.samples: list[tuple[float, float]] = []  # (s since start, MB)
        self._t0 = time.perf_counter()
        self._task: Optional[asyncio.Task] = None

    def sample(self) -> None:
        v = read_rss_mb(self.pid)
        if v is not None:
            self.samples.append((time.perf_counter() - self._t0, v))

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.sample()

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self.sample()
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self.sample()

    def summary(self) -> dict[str, Any]:
        if not self.samples:
            return {"pid": self.pid, "error": "could not read /proc/PID/status"}
        vals = [v for _, v in self.samples]
        return {"pid": self.pid, "start_mb": vals[0], "peak_mb": max(vals), "end_mb": vals[-1],
                "num_samples": len(vals), "interval_s": self.interval,
                "samples": [[round(t, 3), round(v, 2)] for t, v in self.samples]}


# --------------------------------------------------------------------------
# Benchmark
# --------------------------------------------------------------------------


async def arrivals(reqs: list[Request], rate: float, rng: random.Random):
    """Yields requests with Poisson (exponential inter-arrival) timing."""
    for i, r in enumerate(reqs):
        yield r
        if rate != float("inf") and i + 1 < len(reqs):
            await asyncio.sleep(rng.expovariate(rate))


class Progress:
    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled, self.done, self.failed = total, enabled, 0, 0
        self.next_pct = 10
        self.t0 = time.perf_counter()

    def update(self, ok: bool) -> None:
        self.done += 1
        self.failed += 0 if ok else 1
        if not self.enabled:
            return
        pct = 100 * self.done // max(1, self.total)
        if pct >= self.next_pct or self.done == self.total:
            el = time.perf_counter() - self.t0
            print(f"  {self.done}/{self.total} done ({pct}%), {self.failed} failed, {el:.1f}s",
                  file=sys.stderr, flush=True)
            while self.next_pct <= pct:
                self.next_pct += 10


async def benchmark(args) -> int:
    url = api_url(args.base_url, args.endpoint)
    headers = headers_for(args)
    timeout = aiohttp.ClientTimeout(total=args.timeout if args.timeout > 0 else None)
    # keep-alive (default): connections are pooled and reused, like the
    # openai client; --no-keep-alive opens one connection per request.
    connector = aiohttp.TCPConnector(limit=0, force_close=args.no_keep_alive)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        # Server metadata: max_model_len bounds the sharegpt-like lengths.
        max_model_len = args.max_model_len
        if max_model_len is None:
            try:
                models = await get_json(session, api_url(args.base_url, "/v1/models"), headers)
                for m in models.get("data", []):
                    if m.get("id") == args.model and m.get("max_model_len"):
                        max_model_len = int(m["max_model_len"])
            except Exception as e:  # noqa: BLE001
                print(f"warning: GET /v1/models failed: {e}", file=sys.stderr)

        # Words per token from text-only completions (the same tokenizer; image
        # requests go to the chat endpoint).
        cal = await calibrate(session, args, api_url(args.base_url, "/v1/completions")
                              if args.images_per_request > 0 else url, headers, max_model_len)
        rng = random.Random(args.seed)
        if args.dataset == "random":
            reqs = sample_random(args, rng, cal)
        else:
            reqs = sample_sharegpt_like(args, rng, cal, max_model_len)
        add_images(args, reqs)
        if args.lora_modules:
            # As vLLM's benchmark: every request picks one of the adapters at
            # random (own seeded stream: the prompts stay those of a run without).
            lora_rng = random.Random(args.seed + 1)
            for r in reqs:
                r.model = lora_rng.choice(args.lora_modules)
        if max_model_len:
            over = sum(1 for r in reqs if r.prompt_len + r.output_len > max_model_len)
            if over:
                print(f"warning: {over} requests ask for prompt+output > max_model_len {max_model_len}",
                      file=sys.stderr)

        print(f"Model: {args.model}  URL: {url}", file=sys.stderr)
        print(f"Tokens per word: {cal.tokens_per_word:.3f} (+{cal.overhead:.1f}), {cal.source}; "
              f"max_model_len: {max_model_len}", file=sys.stderr)

        if not args.skip_warmup:
            print("Starting initial single prompt test run...", file=sys.stderr)
            warm = Request(reqs[0].prompt, reqs[0].prompt_len, min(reqs[0].output_len, 8))
            add_images(args, [warm], seed_offset=3)  # images of its own: no cache hit later
            w = await send_request(session, url, headers, request_body(args, warm), warm, time.perf_counter())
            if not w.success:
                print(f"error: initial test run failed: {w.error}", file=sys.stderr)
                return 2
            print("Initial test run completed. Starting main benchmark run...", file=sys.stderr)

        print(f"Traffic request rate: {args.request_rate}", file=sys.stderr)
        print(f"Maximum request concurrency: {args.max_concurrency}", file=sys.stderr)

        sampler = RssSampler(args.server_pid, args.rss_interval) if args.server_pid else None
        sem = asyncio.Semaphore(args.max_concurrency) if args.max_concurrency else None
        progress = Progress(len(reqs), not args.disable_progress)

        t0 = time.perf_counter()

        async def run_one(r: Request) -> Output:
            if sem is None:
                o = await send_request(session, url, headers, request_body(args, r), r, t0)
            else:
                async with sem:
                    o = await send_request(session, url, headers, request_body(args, r), r, t0)
            progress.update(o.success)
            return o

        if sampler:
            sampler.start()
        tasks = []
        arrival_rng = random.Random(args.seed + 1)
        async for r in arrivals(reqs, args.request_rate, arrival_rng):
            tasks.append(asyncio.create_task(run_one(r)))
        outputs: list[Output] = await asyncio.gather(*tasks)
        duration = time.perf_counter() - t0
        if sampler:
            await sampler.stop()

    result = compute_metrics(args, reqs, outputs, duration)
    if sampler:
        result["server_rss"] = sampler.summary()
    print_report(args, result)

    errors = [o.error for o in outputs if not o.success]
    if errors:
        counts: dict[str, int] = {}
        for e in errors:
            counts[e] = counts.get(e, 0) + 1
        print("Failures by error:", file=sys.stderr)
        for e, c in sorted(counts.items(), key=lambda x: -x[1])[:10]:
            print(f"  {c:6d}  {e}", file=sys.stderr)
    if args.ignore_eos and result["output_len_mismatches"]:
        print(f"note: {result['output_len_mismatches']} successful requests generated a different number of "
              f"tokens than max_tokens despite --ignore-eos", file=sys.stderr)

    if args.result_json:
        result.update(config_dict(args, cal))
        result["input_lens"] = [o.prompt_len for o in outputs]
        result["requested_output_lens"] = [r.output_len for r in reqs]
        result["output_lens"] = [o.output_tokens for o in outputs]
        result["ttfts"] = [o.ttft for o in outputs]
        result["latencies"] = [o.latency for o in outputs]
        result["itls"] = [o.itl for o in outputs]
        result["start_times"] = [o.start for o in outputs]
        result["successes"] = [o.success for o in outputs]
        result["errors"] = [o.error for o in outputs]
        if not args.no_save_texts:
            result["generated_texts"] = [o.generated_text for o in outputs]
        with open(args.result_json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"Wrote {args.result_json}", file=sys.stderr)

    if errors and not args.allow_failures:
        return 1
    return 0


def percentile(xs: list[float], p: float) -> float:
    """Linear-interpolated percentile (same definition as numpy's default)."""
    if not xs:
        return 0.0
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo = int(math.floor(k))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def stats_ms(name: str, xs_s: list[float], pcts: list[float]) -> dict[str, float]:
    xs = [x * 1000.0 for x in xs_s]
    d = {
        f"mean_{name}_ms": statistics.fmean(xs) if xs else 0.0,
        f"median_{name}_ms": statistics.median(xs) if xs else 0.0,
        f"std_{name}_ms": statistics.pstdev(xs) if xs else 0.0,
    }
    for p in pcts:
        d[f"p{p:g}_{name}_ms"] = percentile(xs, p)
    return d


def compute_metrics(args, reqs: list[Request], outputs: list[Output], duration: float) -> dict[str, Any]:
    ok = [o for o in outputs if o.success]
    pcts = [float(p) for p in args.metric_percentiles.split(",") if p.strip()]
    total_in = sum(o.prompt_len for o in ok)
    total_out = sum(o.output_tokens for o in ok)
    tpots = [(o.latency - o.ttft) / (o.output_tokens - 1) for o in ok if o.output_tokens > 1]
    itls = [x for o in ok for x in o.itl]
    mismatches = sum(1 for o, r in zip(outputs, reqs) if o.success and o.output_tokens != r.output_len)
    m: dict[str, Any] = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(outputs) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration if duration > 0 else 0.0,
        "output_throughput": total_out / duration if duration > 0 else 0.0,
        "total_token_throughput": (total_in + total_out) / duration if duration > 0 else 0.0,
        "output_len_mismatches": mismatches,
        "output_tokens_from_usage": all(o.output_tokens_from_usage for o in ok),
    }
    m.update(stats_ms("ttft", [o.ttft for o in ok], pcts))
    m.update(stats_ms("tpot", tpots, pcts))
    m.update(stats_ms("itl", itls, pcts))
    m.update(stats_ms("e2el", [o.latency for o in ok], pcts))
    return m


def config_dict(args, cal: Calibration) -> dict[str, Any]:
    return {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "backend": "openai",
        "base_url": args.base_url,
        "endpoint": args.endpoint,
        "model_id": args.model,
        "lora_modules": args.lora_modules,
        "dataset": args.dataset,
        "num_prompts": args.num_prompts,
        "request_rate": args.request_rate if args.request_rate != float("inf") else "inf",
        "max_concurrency": args.max_concurrency,
        "random_input_len": args.random_input_len,
        "random_output_len": args.random_output_len,
        "random_range_ratio": args.random_range_ratio,
        "ignore_eos": args.ignore_eos,
        "temperature": args.temperature,
        "seed": args.seed,
        "keep_alive": not args.no_keep_alive,
        "tokens_per_word": cal.tokens_per_word,
        "tokens_per_word_overhead": cal.overhead,
        "tokens_per_word_source": cal.source,
        "images_per_request": args.images_per_request,
        "image_size": "x".join(map(str, args.image_size)) if args.images_per_request else None,
    }


def print_report(args, m: dict[str, Any]) -> None:
    def row(label: str, value: Any, fmt: str = "") -> None:
        print("{:<40} {:<10}".format(label, format(value, fmt)))

    def section(title: str, char: str) -> None:
        print(f"{title:{char}^50}")

    pcts = [float(p) for p in args.metric_percentiles.split(",") if p.strip()]
    section(" Serving Benchmark Result ", "=")
    row("Successful requests:", m["completed"])
    row("Failed requests:", m["failed"])
    if args.max_concurrency:
        row("Maximum request concurrency:", args.max_concurrency)
    row("Benchmark duration (s):", m["duration"], ".2f")
    row("Total input tokens:", m["total_input_tokens"])
    row("Total generated tokens:", m["total_output_tokens"])
    row("Request throughput (req/s):", m["request_throughput"], ".2f")
    row("Output token throughput (tok/s):", m["output_throughput"], ".2f")
    row("Total Token throughput (tok/s):", m["total_token_throughput"], ".2f")
    titles = {"ttft": ("Time to First Token", "TTFT"),
              "tpot": ("Time per Output Token (excl. 1st token)", "TPOT"),
              "itl": ("Inter-token Latency", "ITL"),
              "e2el": ("End-to-end Latency", "E2EL")}
    for key in [k.strip() for k in args.percentile_metrics.split(",") if k.strip()]:
        title, abbr = titles[key]
        section(title, "-")
        row(f"Mean {abbr} (ms):", m[f"mean_{key}_ms"], ".2f")
        row(f"Median {abbr} (ms):", m[f"median_{key}_ms"], ".2f")
        for p in pcts:
            row(f"P{p:g} {abbr} (ms):", m[f"p{p:g}_{key}_ms"], ".2f")
    rss = m.get("server_rss")
    if rss:
        section("Server RSS", "-")
        if "error" in rss:
            print(f"PID {rss['pid']}: {rss['error']}")
        else:
            row("Start RSS (MB):", rss["start_mb"], ".2f")
            row("Peak RSS (MB):", rss["peak_mb"], ".2f")
            row("End RSS (MB):", rss["end_mb"], ".2f")
    print("=" * 50)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = p.add_argument_group("server")
    g.add_argument("--base-url", default="http://127.0.0.1:8000", help="server root (with or without /v1)")
    g.add_argument("--endpoint", default="/v1/completions")
    g.add_argument("--model", required=True, help="model name as the server serves it")
    g.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"),
                   help="sent as 'Authorization: Bearer KEY' (default: $OPENAI_API_KEY)")
    g = p.add_argument_group("workload")
    g.add_argument("--dataset", choices=["random", "sharegpt-like"], default="random")
    g.add_argument("--num-prompts", type=int, default=1000)
    g.add_argument("--random-input-len", type=int, default=1024)
    g.add_argument("--random-output-len", type=int, default=128)
    g.add_argument("--random-range-ratio", type=float, default=0.0,
                   help="lengths uniform in [len*(1-r), len*(1+r)]")
    g.add_argument("--sharegpt-max-input-len", type=int, default=1024)
    g.add_argument("--sharegpt-max-output-len", type=int, default=1024)
    g.add_argument("--max-model-len", type=int, default=None,
                   help="clip sharegpt-like lengths to this (default: from GET /v1/models if reported)")
    g.add_argument("--tokens-per-word", default="auto",
                   help="prompt tokens per random word; 'auto' probes the server's usage.prompt_tokens")
    g.add_argument("--ignore-eos", action="store_true", help="send ignore_eos: true (vLLM extension)")
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--lora-modules", nargs="+", default=None, metavar="NAME",
                   help="LoRA adapter names the server serves: each request uses one, "
                        "chosen uniformly at random (seeded)")
    g.add_argument("--images-per-request", type=int, default=0,
                   help="new random PNG images per request, sent to /v1/chat/completions")
    g.add_argument("--image-size", default="640x480", help="WIDTHxHEIGHT of those images")
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--seed-requests", action="store_true", help="also send 'seed' in each request")
    g = p.add_argument_group("load")
    g.add_argument("--request-rate", type=float, default=float("inf"),
                   help="requests/s with Poisson arrivals; inf sends all at once")
    g.add_argument("--max-concurrency", type=int, default=None, help="most requests in flight")
    g.add_argument("--timeout", type=float, default=600.0, help="per-request timeout in s (0: none)")
    g.add_argument("--no-keep-alive", action="store_true",
                   help="one TCP connection per request (Connection: close) instead of a reused pool")
    g.add_argument("--skip-warmup", action="store_true", help="skip the initial single-request test run")
    g = p.add_argument_group("output")
    g.add_argument("--percentile-metrics", default="ttft,tpot,itl",
                   help="comma list of ttft,tpot,itl,e2el to report")
    g.add_argument("--metric-percentiles", default="99", help="comma list of percentiles, e.g. 50,90,99")
    g.add_argument("--result-json", default=None, help="write metrics, config and per-request arrays here")
    g.add_argument("--no-save-texts", action="store_true", help="leave generated texts out of --result-json")
    g.add_argument("--server-pid", type=int, default=None, help="sample this process's VmRSS during the run")
    g.add_argument("--rss-interval", type=float, default=0.5)
    g.add_argument("--allow-failures", action="store_true", help="exit 0 even if requests failed")
    g.add_argument("--disable-progress", action="store_true")
    args = p.parse_args(argv)
    if args.num_prompts < 1:
        p.error("--num-prompts must be >= 1")
    if args.images_per_request < 0:
        p.error("--images-per-request must be >= 0")
    try:
        args.image_size = tuple(int(x) for x in args.image_size.lower().split("x"))
        if len(args.image_size) != 2 or min(args.image_size) < 1:
            raise ValueError
    except ValueError:
        p.error("--image-size must be WIDTHxHEIGHT, e.g. 640x480")
    if args.images_per_request > 0 and args.endpoint == "/v1/completions":
        args.endpoint = "/v1/chat/completions"
    if args.max_concurrency is not None and args.max_concurrency < 1:
        p.error("--max-concurrency must be >= 1")
    if args.request_rate <= 0:
        p.error("--request-rate must be > 0 (inf: all at once)")
    if args.tokens_per_word != "auto":
        try:
            if float(args.tokens_per_word) <= 0:
                raise ValueError
        except ValueError:
            p.error("--tokens-per-word must be 'auto' or a positive number")
    for k in args.percentile_metrics.split(","):
        if k.strip() and k.strip() not in ("ttft", "tpot", "itl", "e2el"):
            p.error(f"unknown metric in --percentile-metrics: {k}")
    if args.server_pid is not None and read_rss_mb(args.server_pid) is None:
        p.error(f"cannot read /proc/{args.server_pid}/status")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    # Many concurrent connections need file descriptors.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
    try:
        return asyncio.run(benchmark(args))
    except aiohttp.ClientConnectorError as e:
        print(f"error: cannot connect: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
