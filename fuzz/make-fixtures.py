"""Writes the fuzz targets' fixed files and seed inputs: a tiny Llama folder (config.json,
model.safetensors, a byte-level BPE tokenizer.json and a SentencePiece tokenizer.model), each
small enough that the fuzzer mutates it quickly. Run with a Python that has transformers,
tokenizers and sentencepiece (the conformance venv):

    ~/.cache/hearth/conformance/venv/bin/python fuzz/make-fixtures.py
"""

import io
import json
import os

import sentencepiece as spm
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM

here = os.path.dirname(os.path.abspath(__file__))
fixtures = os.path.join(here, "fixtures")
os.makedirs(fixtures, exist_ok=True)
text = ["The quick brown fox jumps over the lazy dog.", "Hello, world! 123 <tool_call>",
        "def f(x):\n    return {\"a\": [1, 2]}", "naïve café über straße 東京"] * 20

bpe = Tokenizer(models.BPE())
bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
bpe.decoder = decoders.ByteLevel()
bpe.train_from_iterator(text, trainers.BpeTrainer(
    vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"]))
bpe.save(os.path.join(fixtures, "tokenizer.json"))

model = io.BytesIO()
spm.SentencePieceTrainer.train(sentence_iterator=iter(text), model_writer=model, vocab_size=360,
                               model_type="bpe", byte_fallback=True, character_coverage=1.0,
                               normalization_rule_name="identity")
with open(os.path.join(fixtures, "tokenizer.model"), "wb") as f:
    f.write(model.getvalue())

torch.manual_seed(0)
config = LlamaConfig(vocab_size=320, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                     tie_word_embeddings=True)
LlamaForCausalLM(config).save_pretrained(fixtures, safe_serialization=True)
for extra in ["generation_config.json"]:
    path = os.path.join(fixtures, extra)
    if os.path.exists(path):
        os.remove(path)
with open(os.path.join(fixtures, "config.json")) as f:
    print(json.dumps(json.load(f))[:200])
print(sorted(os.listdir(fixtures)))
