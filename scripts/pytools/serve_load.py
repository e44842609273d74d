"""Load on a running `hearth serve`: N requests at concurrency C, of mixed prompts and
lengths, some streamed, some cancelled by the client midway. Every greedy answer that was
not cancelled must equal that prompt's answer run alone; afterwards no sequence may be left
running or queued and no KV block held, and /metrics (parsed with prometheus_client's
OpenMetrics parser) must count what the load did: every request answered, every prompt
token, and every generated token (exactly for answers read to the end, at least what the
client read for cancelled ones). Prints a JSON report: throughput, time to first token and per
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
    """Returns the text, whether the client cancelled it, and the usage (None if cancelled)."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    t0 = time.perf_counter()
    if not stream:
        r = await client.post("/v1/completions", json=body)
        r.raise_for_status()
        usage = r.json()["usage"]
        times.append((time.perf_counter() - t0, None, usage["completion_tokens"]))
        return r.json()["choices"][0]["text"], False, usage
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    text, first, n, usage = "", None, 0, None
    async with client.stream("POST", "/v1/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            if not chunk["choices"]:
                continue
            piece = chunk["choices"][0]["text"]
            if piece:
                n += 1
                first = first or time.perf_counter()
                text += piece
            if cancel_after is not None and n >= cancel_after:
                return text, True, None  # closing the stream mid-answer
    end = time.perf_counter()
    times.append((first - t0 if first else end - t0, (end - first) / max(n - 1, 1) if first else None,
                  usage["completion_tokens"]))
    return text, False, usage


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
        solo, prompt_tokens = {}, {}
        for p, n in cases:
            solo[(p, n)], _, usage = await complete(client, a.model, p, n, False, None, [])
            prompt_tokens[p] = usage["prompt_tokens"]
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
        sent = {"prompt": 0, "read": 0, "cancelled_read": 0}

        async def one(i):
            nonlocal cancelled
            p, n = cases[i % len(cases)]
            stream = i % 3 == 0
            cancel_after = 3 if i % 10 == 0 else None
            async with gate:
                text, was_cancelled, usage = await complete(
                    client, a.model, p, n, stream or cancel_after is not None, cancel_after, times)
            sent["prompt"] += prompt_tokens[p]
            if was_cancelled:
                cancelled += 1
                sent["cancelled_read"] += cancel_after
            else:
                sent["read"] += usage["completion_tokens"]
            if not was_cancelled and text != solo[(p, n)]:
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
    delta = lambda name: after.get(name, 0) - before.get(name, 0)
    counted_prompt = delta("hearth_prompt_tokens_total")
    counted_generated = delta("hearth_generation_tokens_total")
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
        "kv_blocks_used_after": after.get("hearth_kv_blocks_used"),
        "kv_blocks_cached_after": after.get("hearth_kv_blocks_cached"),
        "running_after": after.get("hearth_running_sequences"),
        "queued_after": after.get("hearth_queue_depth"),
        "preemptions": delta("hearth_preemptions_total"),
        "metrics_requests_200": answered,
        "metrics_prompt_tokens": counted_prompt,
        "client_prompt_tokens": sent["prompt"],
        "metrics_generation_tokens": counted_generated,
        "client_generation_tokens_read": sent["read"],
        "client_generation_tokens_read_before_cancel": sent["cancelled_read"],
    }
    print(json.dumps(report, indent=2))
    # Cancelled answers generated at least what was read, and at most their max_tokens.
    cancelled_most = sum(n for i in range(a.requests) if i % 10 == 0
                         for (_, n) in [cases[i % len(cases)]])
    generated_ok = (sent["read"] + sent["cancelled_read"] <= counted_generated
                    <= sent["read"] + cancelled_most)
    ok = (not wrong and report["running_after"] == 0 and report["queued_after"] == 0
          and report["kv_blocks_used_after"] == 0 and answered == a.requests
          and counted_prompt == sent["prompt"] and generated_ok)
    for w in wrong[:5]:
        print("WRONG", w)
    raise SystemExit(0 if ok else 1)


asyncio.run(main())
