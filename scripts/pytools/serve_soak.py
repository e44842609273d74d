"""A soak run on a running `hearth serve`: mixed requests with no idle gap for a bounded time
(whole and streamed answers, several completions per prompt, log probabilities, chats,
clients that cancel mid-stream, and the largest stop strings a request may give), while the
server's resident memory and open file descriptors are sampled from /proc every few
seconds. After warm-up, neither may grow past its bound:

- RSS: at most --rss-growth (a fraction, 0.10) above the warm-up's highest sample, plus 16 MiB;
- file descriptors: at most the warm-up's highest plus --concurrency plus 16 (each client
  holds a connection, which the server may see open a moment longer).

Prints a JSON report (the samples' summary, the bounds, requests by kind, the scheduler seen
busy at each sample) and exits 1 when a bound was passed or a request failed unexpectedly.

    python serve_soak.py URL KEY MODEL PID [--minutes 30] [--concurrency 16] [--interval 5]
"""

import argparse
import asyncio
import json
import os
import random
import time

import httpx2 as httpx  # what the openai package (pinned in setup) brings

PROMPTS = [
    "The capital of France is",
    "Once upon a time",
    "def fibonacci(n):",
    "List three fruits:",
    "Water boils at",
]
# The largest stop strings a request may give: four of 1,024 bytes (serving.md).
BIG_STOPS = [c * 1024 for c in "qxzj"]


def proc_sample(pid):
    """(RSS in bytes, open file descriptors) of process `pid`."""
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, fds


async def one_request(client, model, rng, counts):
    """Sends one request of a kind drawn at random; returns its kind."""
    kind = rng.choice(["plain", "stream", "cancel", "chat", "many", "logprobs", "stops"])
    counts[kind] = counts.get(kind, 0) + 1
    body = {"model": model, "prompt": rng.choice(PROMPTS), "max_tokens": rng.choice([8, 16, 32]),
            "temperature": 0.7}
    path = "/v1/completions"
    if kind == "chat":
        path = "/v1/chat/completions"
        body.pop("prompt")
        body["messages"] = [{"role": "user", "content": rng.choice(PROMPTS)}]
    elif kind == "many":
        body["n"] = 4
    elif kind == "logprobs":
        body["logprobs"] = 5
    elif kind == "stops":
        body["stop"] = BIG_STOPS
    if kind in ("stream", "cancel"):
        body["stream"] = True
        read = 0
        async with client.stream("POST", path, json=body) as r:
            r.raise_for_status()
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    read += 1
                if kind == "cancel" and read >= 3:
                    return kind  # closing the stream mid-answer cancels the request
        return kind
    r = await client.post(path, json=body)
    r.raise_for_status()
    return kind


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("key")
    ap.add_argument("model")
    ap.add_argument("pid", type=int)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--interval", type=float, default=5)
    ap.add_argument("--warmup", type=float, default=0.2, help="fraction of the run")
    ap.add_argument("--rss-growth", type=float, default=0.10)
    a = ap.parse_args()
    headers = {"Authorization": f"Bearer {a.key}"}
    limits = httpx.Limits(max_connections=a.concurrency + 4)
    end = time.monotonic() + a.minutes * 60
    counts, failures, samples = {}, [], []
    async with httpx.AsyncClient(base_url=a.url, headers=headers, timeout=600, limits=limits) as client:

        async def worker(seed):
            rng = random.Random(seed)
            # A run whose requests fail says nothing about growth: it stops early.
            while time.monotonic() < end and len(failures) < 100:
                try:
                    await one_request(client, a.model, rng, counts)
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    failures.append(repr(e))

        async def sampler():
            start = time.monotonic()
            while time.monotonic() < end and len(failures) < 100:
                rss, fds = proc_sample(a.pid)
                text = (await client.get("/metrics")).text
                running = sum(float(l.split()[-1]) for l in text.splitlines()
                              if l.startswith("hearth_running_sequences"))
                samples.append({"t": round(time.monotonic() - start, 1), "rss": rss, "fds": fds,
                                "running": running})
                await asyncio.sleep(a.interval)

        await asyncio.gather(sampler(), *(worker(i) for i in range(a.concurrency)))

    warm = max(1, int(len(samples) * a.warmup))
    base_rss = max(s["rss"] for s in samples[:warm])
    base_fds = max(s["fds"] for s in samples[:warm])
    rss_bound = base_rss * (1 + a.rss_growth) + 16 * 2**20
    fd_bound = base_fds + a.concurrency + 16
    after = samples[warm:]
    worst_rss = max((s["rss"] for s in after), default=base_rss)
    worst_fds = max((s["fds"] for s in after), default=base_fds)
    idle = sum(1 for s in samples if s["running"] == 0)
    ok = worst_rss <= rss_bound and worst_fds <= fd_bound and not failures
    print(json.dumps({
        "minutes": a.minutes,
        "concurrency": a.concurrency,
        "requests": counts,
        "failures": failures[:10],
        "samples": len(samples),
        "samples_with_nothing_running": idle,
        "rss_mib": {"after_warmup_base": round(base_rss / 2**20, 1),
                    "bound": round(rss_bound / 2**20, 1),
                    "highest_after": round(worst_rss / 2**20, 1),
                    "last": round(samples[-1]["rss"] / 2**20, 1)},
        "fds": {"after_warmup_base": base_fds, "bound": fd_bound, "highest_after": worst_fds,
                "last": samples[-1]["fds"]},
        "ok": ok,
    }, indent=2))
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    asyncio.run(main())
