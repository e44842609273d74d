"""Drives `hearth serve`'s /v1/embeddings with the official openai package: embeddings of
texts (the package asks for base64 and decodes it) and as floats, the same either way; unit
length; similar sentences nearer than dissimilar ones; token-id input; `dimensions`; usage;
and the errors the package raises for an unknown model (404) and an empty input (400). With
`alone`, the server serves only the embedding model and refuses a chat request (400).
Prints one line per check; exits non-zero at the first that fails.

    python openai_embeddings_check.py BASE_URL API_KEY MODEL alone|beside
"""

import math
import sys

import openai
from openai import OpenAI

base_url, key, model, mode = sys.argv[1:5]
client = OpenAI(base_url=base_url, api_key=key, max_retries=0)


def check(name, ok, detail=""):
    print(f"{'ok' if ok else 'FAILED'}: {name} {detail}".rstrip())
    if not ok:
        sys.exit(1)


def dot(a, b):
    return sum(x * y for x, y in zip(a, b))


ids = [m.id for m in client.models.list()]
check("models", model in ids, repr(ids))

texts = ["A man is eating food.", "A man is eating a piece of bread.",
         "A man is riding a horse."]
r = client.embeddings.create(model=model, input=texts)
vectors = [d.embedding for d in r.data]
check("one vector per text, in order", [d.index for d in r.data] == [0, 1, 2])
check("384 dimensions", all(len(v) == 384 for v in vectors), repr([len(v) for v in vectors]))
check("unit length", all(abs(math.sqrt(dot(v, v)) - 1) < 1e-5 for v in vectors))
food_bread, food_horse = dot(vectors[0], vectors[1]), dot(vectors[0], vectors[2])
check("meaning orders them", food_bread > food_horse, f"{food_bread:.3f} {food_horse:.3f}")
check("usage", r.usage.prompt_tokens > 20 and r.usage.total_tokens == r.usage.prompt_tokens,
      repr(r.usage))

floats = client.embeddings.create(model=model, input=texts, encoding_format="float")
same = all(abs(a - b) < 1e-6 for u, v in zip(vectors, [d.embedding for d in floats.data])
           for a, b in zip(u, v))
check("base64 and float agree", same)

cut = client.embeddings.create(model=model, input="hello", dimensions=128)
v = cut.data[0].embedding
check("dimensions", len(v) == 128 and abs(math.sqrt(dot(v, v)) - 1) < 1e-5, repr(len(v)))

tokens = client.embeddings.create(model=model, input=[[101, 7592, 2088, 102]])
hello = client.embeddings.create(model=model, input="hello world")
check("token ids as text", abs(dot(tokens.data[0].embedding, hello.data[0].embedding) - 1) < 1e-5)

try:
    client.embeddings.create(model="no-such-model", input="x")
    check("unknown model refused", False)
except openai.NotFoundError as e:
    check("unknown model refused", "no-such-model" in str(e), str(e))

try:
    client.embeddings.create(model=model, input=[])
    check("empty input refused", False)
except openai.BadRequestError as e:
    check("empty input refused", "input" in str(e), str(e))

if mode == "alone":
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
        check("chat refused", False)
    except openai.BadRequestError as e:
        check("chat refused", "embedding model" in str(e), str(e))
