"""Load on a running `hearth serve`: N requests at concurrency C, of mixed prompts and
lengths, some streamed, some cancelled by the client midway. Every greedy answer that was
not cancelled must equal that prompt's answer run alone; afterwards no sequence may be left
running or queued, and /metrics (parsed with prometheus_client's OpenMetrics parser) must
count what the load did. Prints a JSON report: throughput, time to first token and per
output token (p50, p99, client side), the most KV blocks in use (sampled from /metrics).

    python serve_load.py URL KEY MODEL [--requests 1000] [--concurrency 64]
"""

import argparse
import asyncio
import json
import statistics
import time

import httpx2 as httpx  # what the openai package (pinned in setup) brings
from prometheus_client.openmetrics.parser import text_string_to_metric_families

PROMPTS = [
    "The capital of France is",
    "Once upon a time",
    "Water boils at",
    "The three primary colours are",
    "def fibonacci(n):",
    "A haiku about autumn:",
    "The largest planet in the solar system is",
    "List three fruits:",
]
LENGTHS = [8, 16, 32, 64]


def metrics(text):
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = s.name + "".join(f"{{{k}={v}}}" for k, v in sorted(s.labels.items()))
            out[key] = s.value
    return out


async def complete(client, model, prompt, max_tokens, stream, cancel_after, times):
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    t0 = time.perf_counter()
    if not stream:
        r = await client.post("/v1/completions", json=body)
        r.raise_for_status()
        times.append((time.perf_counter() - t0, None, r.json()["usage"]["completion_tokens"]))
        return r.json()["choices"][0]["text"], False
    body["stream"] = True
    text, first, n = "", None, 0
    async with client.stream("POST", "/v1/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            piece = json.loads(line[6:])["choices"][0]["text"]
            if piece:
                n += 1
                first = first or time.perf_counter()
                text += piece
            if cancel_after is not None and n >= cancel_after:
                return text, True  # closing the stream mid-answer
    end = time.perf_counter()
    times.append((first - t0 if first else end - t0, (end - first) / max(n - 1, 1) if first else None, n))
    return text, False


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("key")
    ap.add_argument("model")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=64)
    a = ap.parse_args()
    headers = {"Authorization": f"Bearer {a.key}"}
    limits = httpx.Limits(max_connections=a.concurrency + 4)
    async with httpx.AsyncClient(base_url=a.url, headers=headers, timeout=600, limits=limits) as client:
        cases = [(p, n) for p in PROMPTS for n in LENGTHS]
        solo = {}
        for p, n in cases:
            solo[(p, n)], _ = await complete(client, a.model, p, n, False, None, [])
        before = metrics((await client.get("/metrics")).text)

        peak = {"blocks": 0}
        done = asyncio.Event()

        async def watch():
            while not done.is_set():
                m = metrics((await client.get("/metrics")).text)
                peak["blocks"] = max(peak["blocks"], m.get("hearth_kv_blocks_used", 0))
                await asyncio.sleep(0.1)

        gate = asyncio.Semaphore(a.concurrency)
        times, wrong, cancelled = [], [], 0

        async def one(i):
            nonlocal cancelled
            p, n = cases[i % len(cases)]
            stream = i % 3 == 0
            cancel_after = 3 if i % 10 == 0 else None
            async with gate:
                text, was_cancelled = await complete(client, a.model, p, n, stream or cancel_after is not None, cancel_after, times)
            if was_cancelled:
                cancelled += 1
            elif text != solo[(p, n)]:
                wrong.append((i, p, n, text, solo[(p, n)]))

        watcher = asyncio.create_task(watch())
        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(a.requests)))
        wall = time.perf_counter() - t0
        done.set()
        await watcher
        await asyncio.sleep(0.5)
        after = metrics((await client.get("/metrics")).text)

    ttft = sorted(t[0] for t in times)
    tpot = sorted(t[1] for t in times if t[1] is not None)
    pct = lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None
    generated = sum(t[2] for t in times)
    key = "hearth_requests_total{route=/v1/completions}{status=200}"
    answered = after.get(key, 0) - before.get(key, 0)
    report = {
        "requests": a.requests,
        "concurrency": a.concurrency,
        "cancelled_by_client": cancelled,
        "wrong_answers": len(wrong),
        "wall_s": round(wall, 2),
        "requests_per_s": round(a.requests / wall, 2),
        "generated_tokens_per_s": round(generated / wall, 1),
        "ttft_p50_s": pct(ttft, 0.5), "ttft_p99_s": pct(ttft, 0.99),
        "tpot_p50_s": pct(tpot, 0.5), "tpot_p99_s": pct(tpot, 0.99),
        "kv_blocks_peak": peak["blocks"],
        "kv_blocks_total": after.get("hearth_kv_blocks_total"),
        "running_after": after.get("hearth_running_sequences"),
        "queued_after": after.get("hearth_queue_depth"),
        "metrics_requests_200": answered,
    }
    print(json.dumps(report, indent=2))
    ok = (not wrong and report["running_after"] == 0 and report["queued_after"] == 0
          and answered == a.requests)
    for w in wrong[:5]:
        print("WRONG", w)
    raise SystemExit(0 if ok else 1)


asyncio.run(main())
