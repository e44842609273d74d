"""Drives `hearth serve` with the official openai package: models, chat, streamed chat,
completions, log probabilities (chat, streamed chat, completions), the presence and frequency
penalties, constrained output (JSON mode, a strict JSON schema, streamed too, and the
package's own `parse` with a Pydantic model), tool calls (forced, named, streamed, and a
tool's result sent back), and the errors the package raises for 400, 401
and 404. Prints one line per check; exits non-zero at the first that fails.

    python check.py BASE_URL API_KEY MODEL EXPECTED_COMPLETION
"""

import json
import sys
from typing import Literal

import openai
from openai import OpenAI
from pydantic import BaseModel

base_url, key, model, expected = sys.argv[1:5]
client = OpenAI(base_url=base_url, api_key=key, max_retries=0)


def check(name, ok, detail=""):
    print(f"{'ok' if ok else 'FAILED'}: {name} {detail}".rstrip())
    if not ok:
        sys.exit(1)


ids = [m.id for m in client.models.list()]
check("models", ids == [model], repr(ids))

done = client.completions.create(model=model, prompt="The capital of France is",
                                 max_tokens=12, temperature=0)
check("completion", done.choices[0].text == expected, repr(done.choices[0].text))
check("completion usage", done.usage.completion_tokens == 12, repr(done.usage))

messages = [{"role": "user", "content": "What is the capital of France?"}]
chat = client.chat.completions.create(model=model, messages=messages, max_tokens=12,
                                      temperature=0)
answer = chat.choices[0].message.content
check("chat", chat.choices[0].message.role == "assistant" and "Paris" in answer, repr(answer))

parts, usage, finish = [], None, None
for chunk in client.chat.completions.create(model=model, messages=messages, max_tokens=12,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True}):
    if chunk.usage is not None:
        usage = chunk.usage
    for c in chunk.choices:
        parts.append(c.delta.content or "")
        finish = c.finish_reason or finish
check("streamed chat", "".join(parts) == answer, repr("".join(parts)))
check("streamed usage", usage is not None and usage.completion_tokens == chat.usage.completion_tokens,
      repr(usage))
check("streamed finish", finish == chat.choices[0].finish_reason, repr(finish))


# Log probabilities: one entry per generated token, spelling the answer; greedy picks the
# most likely token, so each token is its own first alternative.
lp = client.chat.completions.create(model=model, messages=messages, max_tokens=12,
                                    temperature=0, logprobs=True, top_logprobs=3)
content = lp.choices[0].logprobs.content
check("chat logprobs text", "".join(e.token for e in content) == answer,
      repr([e.token for e in content]))
# The end-of-turn token counts as generated but is not part of the text.
eos = 1 if lp.choices[0].finish_reason == "stop" else 0
check("chat logprobs count", len(content) == lp.usage.completion_tokens - eos,
      repr(len(content)))
check("chat logprobs alternatives",
      all(len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token
          and e.top_logprobs[0].logprob == e.logprob and e.logprob <= 0
          and e.top_logprobs[1].logprob <= e.logprob for e in content),
      repr(content[0]))
check("chat logprobs bytes", all(bytes(e.bytes).decode() == e.token for e in content),
      repr([e.bytes for e in content]))

streamed = []
for chunk in client.chat.completions.create(model=model, messages=messages, max_tokens=12,
                                            temperature=0, logprobs=True, top_logprobs=1,
                                            stream=True):
    for c in chunk.choices:
        if c.logprobs is not None and c.logprobs.content:
            streamed.extend(c.logprobs.content)
check("streamed logprobs", [(e.token, e.logprob) for e in streamed]
      == [(e.token, e.logprob) for e in content], repr(streamed[:2]))

done = client.completions.create(model=model, prompt="The capital of France is",
                                 max_tokens=12, temperature=0, logprobs=2)
lps = done.choices[0].logprobs
check("completion logprobs", "".join(lps.tokens) == expected and len(lps.token_logprobs) == 12
      and all(len(t) <= 2 for t in lps.top_logprobs), repr(lps.tokens))
offsets = [sum(len(t) for t in lps.tokens[:i]) for i in range(len(lps.tokens))]
check("completion text offsets", lps.text_offset == offsets, repr(lps.text_offset))

# Penalties: accepted in OpenAI's range, and they change what greedy picks once a token
# repeats; outside the range, a 400.
plain = client.completions.create(model=model, prompt="one one one one one", max_tokens=16,
                                  temperature=0)
penalised = client.completions.create(model=model, prompt="one one one one one",
                                      max_tokens=16, temperature=0, frequency_penalty=2.0,
                                      presence_penalty=2.0)
check("penalties change the answer", plain.choices[0].text != penalised.choices[0].text,
      repr((plain.choices[0].text, penalised.choices[0].text)))

# Constrained output: sampled answers held to JSON, to a strict schema, and to the schema the
# package derives from a Pydantic model; each ends by itself.
ask = [{"role": "user", "content": "Describe a cat in a short JSON object: name, legs, color."}]
sampled = {"model": model, "messages": ask, "max_tokens": 240, "temperature": 0.7, "seed": 1}
mode = client.chat.completions.create(**sampled, response_format={"type": "json_object"})
cat = json.loads(mode.choices[0].message.content)
check("JSON mode", isinstance(cat, dict) and mode.choices[0].finish_reason == "stop", repr(cat))

schema = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "legs": {"type": "integer", "minimum": 0, "maximum": 8},
        "color": {"enum": ["black", "white", "gray"]},
    },
    "required": ["name", "legs", "color"],
    "additionalProperties": False,
}
strict = {"type": "json_schema", "json_schema": {"name": "cat", "schema": schema, "strict": True}}


def valid_cat(cat):
    return (list(cat) == ["name", "legs", "color"] and len(cat["name"]) <= 10
            and 0 <= cat["legs"] <= 8 and cat["color"] in schema["properties"]["color"]["enum"])


held = client.chat.completions.create(**sampled, response_format=strict)
cat = json.loads(held.choices[0].message.content)
check("strict JSON schema", valid_cat(cat) and held.choices[0].finish_reason == "stop", repr(cat))

parts = []
for chunk in client.chat.completions.create(**{**sampled, "seed": 2}, response_format=strict,
                                            stream=True):
    for c in chunk.choices:
        parts.append(c.delta.content or "")
cat = json.loads("".join(parts))
check("streamed strict JSON schema", valid_cat(cat), repr(cat))


class Cat(BaseModel):
    name: str
    legs: int
    color: Literal["black", "white", "gray"]


# `parse` left the beta namespace in later versions of the package.
parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
parsed = parse(**sampled, response_format=Cat).choices[0].message.parsed
check("parse with a Pydantic model", isinstance(parsed, Cat), repr(parsed))

# Tool calls, round trip: a forced call comes back as `tool_calls` whose arguments parse and
# fit the function's schema; its result goes back as a `tool` message, and the model answers
# in text. A named function is called once; a streamed call arrives in deltas that join to
# the same shape.
weather = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20},
        "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city"], "additionalProperties": False}}}
clock = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {}, "additionalProperties": False}}}
ask = [{"role": "user", "content": "What is the weather in Paris?"}]
tooled = {"model": model, "max_tokens": 200, "temperature": 0.7, "seed": 3,
          "tools": [weather, clock]}


def valid_call(call, names=("get_weather", "get_time")):
    args = json.loads(call.function.arguments)
    if call.function.name == "get_weather":
        ok = (isinstance(args.get("city"), str) and len(args["city"]) <= 20
              and set(args) <= {"city", "unit"} and args.get("unit", "celsius") in
              ("celsius", "fahrenheit"))
    else:
        ok = args == {}
    return ok and call.function.name in names and call.type == "function" and call.id


forced = client.chat.completions.create(**tooled, messages=ask, tool_choice="required")
message = forced.choices[0].message
check("required tool call", forced.choices[0].finish_reason == "tool_calls"
      and message.tool_calls and all(valid_call(c) for c in message.tool_calls),
      repr(message))
named = client.chat.completions.create(
    **tooled, messages=ask, tool_choice={"type": "function", "function": {"name": "get_time"}})
calls = named.choices[0].message.tool_calls
check("named tool call", calls and len(calls) == 1 and valid_call(calls[0], ("get_time",)),
      repr(named.choices[0].message))
single = client.chat.completions.create(**tooled, messages=ask, tool_choice="required",
                                        parallel_tool_calls=False)
check("one call without parallel calls", len(single.choices[0].message.tool_calls) == 1,
      repr(single.choices[0].message))

pieces, finish = {}, None
for chunk in client.chat.completions.create(**tooled, messages=ask, tool_choice="required",
                                            stream=True):
    for c in chunk.choices:
        finish = c.finish_reason or finish
        for d in c.delta.tool_calls or []:
            entry = pieces.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
            entry["id"] = d.id or entry["id"]
            if d.function is not None:
                entry["name"] += d.function.name or ""
                entry["arguments"] += d.function.arguments or ""
check("streamed required tool call", finish == "tool_calls" and pieces and all(
    p["id"] and p["name"] in ("get_weather", "get_time")
    and isinstance(json.loads(p["arguments"]), dict) for p in pieces.values()), repr(pieces))

call = message.tool_calls[0]
history = ask + [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": call.id, "type": "function",
         "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
    {"role": "tool", "tool_call_id": call.id, "content": json.dumps(
        {"temperature": 21, "unit": "celsius", "sky": "clear"})},
]
after = client.chat.completions.create(**tooled, messages=history, tool_choice="none")
check("answer after a tool result", after.choices[0].finish_reason in ("stop", "length")
      and after.choices[0].message.tool_calls is None and after.choices[0].message.content,
      repr(after.choices[0].message))



def raises(name, error, call):
    try:
        call()
    except error as e:
        check(name, True, f"{type(e).__name__} {e.status_code}")
        return
    except Exception as e:  # noqa: BLE001 - any other error is a failure to report
        check(name, False, f"{type(e).__name__}: {e}")
    check(name, False, "no error")


raises("wrong key", openai.AuthenticationError,
       lambda: OpenAI(base_url=base_url, api_key="wrong", max_retries=0).models.list())
raises("unknown model", openai.NotFoundError,
       lambda: client.completions.create(model="gpt-4", prompt="hi", max_tokens=1))
raises("past the context", openai.BadRequestError,
       lambda: client.completions.create(model=model, prompt="hi", max_tokens=100000))
raises("penalty out of range", openai.BadRequestError,
       lambda: client.completions.create(model=model, prompt="hi", max_tokens=1,
                                         presence_penalty=3))
raises("too many alternatives", openai.BadRequestError,
       lambda: client.chat.completions.create(model=model, messages=messages, max_tokens=1,
                                              logprobs=True, top_logprobs=21))
raises("wrong type", openai.BadRequestError,
       lambda: client.chat.completions.create(model=model, messages="hi"))
raises("unsupported schema keyword", openai.BadRequestError,
       lambda: client.chat.completions.create(
           model=model, messages=messages, max_tokens=1,
           response_format={"type": "json_schema", "json_schema": {
               "name": "x", "schema": {"not": {"type": "string"}}, "strict": True}}))
raises("tool choice naming no tool", openai.BadRequestError,
       lambda: client.chat.completions.create(
           **tooled, messages=ask, tool_choice={"type": "function", "function": {"name": "x"}}))
raises("unknown response format", openai.BadRequestError,
       lambda: client.chat.completions.create(model=model, messages=messages, max_tokens=1,
                                              response_format={"type": "xml"}))
