#!/usr/bin/env python3
"""Regenerates the tokenizer fixtures in models/tests/fixtures/ from an independent reference.

The reference is the Python Hugging Face `tokenizers` package, configured from the same
vocabulary, merges and token types the GGUF file stores (read with the `gguf` package), with
SmolLM2's pre-tokenizer (Digits(individual_digits) then ByteLevel with the GPT-2 regex, as in
its tokenizer.json). The Rust tests compare Hearth's tokenizer against the ids recorded here.

    python3 -m venv /tmp/fixenv && /tmp/fixenv/bin/pip install tokenizers gguf
    /tmp/fixenv/bin/python models/scripts/make_tokenizer_fixtures.py [MODELS_DIR]

MODELS_DIR defaults to $HEARTH_MODELS or ~/.cache/hearth/models. CI does not run this.
"""

import hashlib
import json
import os
import sys
from pathlib import Path

from gguf import GGUFReader
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "tests" / "fixtures"
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
MINILM = "all-MiniLM-L6-v2"

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Strings covering what tokenizers get wrong: spaces at the edges, digits, code, punctuation
# runs, scripts without spaces, emoji (multi-token UTF-8), special tokens, control whitespace.
CASES = [
    "",
    "Hello world",
    "Hello, world!",
    " leading space",
    "trailing space ",
    "  two leading spaces",
    "two trailing spaces  ",
    "   ",
    " ",
    "12345",
    "3.14",
    "pi is 3.14159 and e is 2.71828",
    "1,000,000 and -42 and 007",
    "version 2.0.1-rc3",
    "def add(a, b):\n    return a + b\n",
    'fn main() { println!("{}", x); }',
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "Wait... what?!?!",
    "!!!???...---",
    "a--b==c!=d && e||f",
    "((()))[]{}<>",
    "你好，世界",
    "日本語のテキストです。",
    "한국어 텍스트",
    "I love 🦀 and 🐍!",
    "👨‍👩‍👧‍👦 family",
    "🎉🎉🎉",
    "naïve café résumé",
    "Ελληνικά και Русский",
    "<|im_start|>user\nHi<|im_end|>",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    "What is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text<|im_end|>more",
    "<|im_start|><|im_end|>",
    "line1\nline2\n\nline4",
    "\n",
    "\n\n\n",
    "\ttab\tseparated\t",
    "mixed \t\n whitespace",
    "trailing newline\n",
    "\r\nwindows\r\n",
    "I'm sure it's what they've said; we'll see, I'd go.",
    "DON'T SHOUT",
    "non\u00a0breaking space",
    "ideographic\u3000space",
    "zero\u200bwidth",
    "ﬁ ligature",
    "antidisestablishmentarianism",
    "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?x=1&y=2",
    "x² + y³ = ⅔ and ٣٤٥",
    "The quick brown fox jumps over the lazy dog. " * 3,
]

# Strings for the pre-tokenizer fixtures (no vocabulary involved).
PRETOKENIZE_CASES = CASES + [
    "Hello  world's 42\n\n  x  ",
    "I'LL pay 12345\n\n  now",
    "   \n\t  end",
    "a\n\n\nb  \n c",
    "x\u00a0\u00a0y",
]


def models_dir():
    if len(sys.argv) > 1:
        return Path(sys.argv[1])
    env = os.environ.get("HEARTH_MODELS")
    return Path(env) if env else Path.home() / ".cache" / "hearth" / "models"


def field(reader, name):
    return reader.fields[name].contents()


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def smollm2_reference(path):
    """A HF tokenizer built from the GGUF vocabulary, like SmolLM2's tokenizer.json."""
    reader = GGUFReader(str(path))
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field(reader, "tokenizer.ggml.merges")]
    assert field(reader, "tokenizer.ggml.pre") == "smollm"
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    # CONTROL (3) and USER_DEFINED (4) tokens are added tokens, matched before BPE.
    special = [
        AddedToken(t, special=True, normalized=False)
        for t, ty in zip(tokens, types)
        if ty in (3, 4)
    ]
    tok.add_special_tokens(special)
    return tok


def smollm2_fixture(directory):
    path = directory / SMOLLM2
    tok = smollm2_reference(path)
    cases = []
    for text in CASES:
        ids = tok.encode(text, add_special_tokens=False).ids
        decoded = tok.decode(ids, skip_special_tokens=False)
        assert decoded == text, (text, decoded)
        cases.append({"text": text, "ids": ids})
    return {
        "model": SMOLLM2,
        "sha256": sha256(path),
        "reference": "Python tokenizers from the GGUF vocabulary and merges; "
        "pre-tokenizer Digits(individual_digits) + ByteLevel(GPT-2 regex)",
        "cases": cases,
    }


def pretokenize_fixture():
    def split(pattern):
        return pre_tokenizers.Split(Regex(pattern), behavior="isolated")

    named = {
        "gpt-2": split(GPT2_PATTERN),
        "smollm": pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), split(GPT2_PATTERN)]
        ),
        "llama3": split(LLAMA3_PATTERN),
    }
    out = {}
    for name, pre in named.items():
        out[name] = [
            {"text": t, "words": [w for w, _ in pre.pre_tokenize_str(t)]}
            for t in PRETOKENIZE_CASES
        ]
    return out


def minilm_fixture(directory):
    path = directory / MINILM / "tokenizer.json"
    tok = Tokenizer.from_file(str(path))
    texts = ["Hello world!", "The Quick Brown Fox.", "naïve café", "embeddings are 42% fun", ""]
    cases = []
    for text in texts:
        enc = tok.encode(text, add_special_tokens=True)
        # The file pads to a fixed length; the padding is part of what the wrapper returns.
        cases.append(
            {
                "text": text,
                "ids": enc.ids,
                "tokens": enc.tokens,
                "attention_mask": enc.attention_mask,
            }
        )
    return {"model": MINILM, "sha256": sha256(path), "cases": cases}


def compact(value, indent=0):
    """JSON with one line per list element, so diffs show which case changed."""
    pad = " " * indent
    if isinstance(value, dict) and any(isinstance(v, (list, dict)) for v in value.values()):
        items = [f"{pad} {json.dumps(k)}: {compact(v, indent + 1).lstrip()}" for k, v in value.items()]
        return pad + "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and value and isinstance(value[0], dict):
        items = [pad + " " + json.dumps(v, ensure_ascii=False) for v in value]
        return pad + "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return pad + json.dumps(value, ensure_ascii=False)


def write(name, data):
    FIXTURES.mkdir(parents=True, exist_ok=True)
    with open(FIXTURES / name, "w", encoding="utf-8") as f:
        f.write(compact(data) + "\n")
    json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    print(f"wrote {FIXTURES / name}")


def main():
    directory = models_dir()
    write("smollm2_tokens.json", smollm2_fixture(directory))
    write("pretokenize.json", pretokenize_fixture())
    write("minilm_tokens.json", minilm_fixture(directory))


if __name__ == "__main__":
    main()
