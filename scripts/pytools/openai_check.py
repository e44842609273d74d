"""Drives `hearth serve` with the official openai package: models, chat, streamed chat,
completions, and the errors the package raises for 400, 401 and 404. Prints one line per
check; exits non-zero at the first that fails.

    python check.py BASE_URL API_KEY MODEL EXPECTED_COMPLETION
"""

import sys

import openai
from openai import OpenAI

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
raises("wrong type", openai.BadRequestError,
       lambda: client.chat.completions.create(model=model, messages="hi"))
