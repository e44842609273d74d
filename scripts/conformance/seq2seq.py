"""Builds the encoder-decoder conformance models, beside the decoders (build.py) and the
encoders (encoders.py):

    t5-flan/hf/         a random-weight T5ForConditionalGeneration of Flan-T5's shape (gated
                        GELU, its own lm_head, `tie_word_embeddings: false`), f32, whose
                        safetensors also hold the encoder's and decoder's copies of the shared
                        embeddings (as older checkpoints do)
    t5-flan/model.gguf  llama.cpp's conversion of it (--outtype f32)
    t5-v1/hf/           T5 v1.0's shape (ReLU, the output tied to the embeddings: no lm_head),
                        bf16, without `n_positions` (the converter's default applies)
    t5-v1/hf-bin/       the same tensors as a PyTorch checkpoint (pytorch_model.bin)
    t5-v1/model.gguf    llama.cpp's conversion of hf/ (--outtype bf16)
    */reference.json    transformers' answers for one input (engine/tests/seq2seq.rs): its
                        ids, the encoder's output, 16 greedy decode steps and each step's
                        logits, and T5's bucket of every distance in -300..300 both ways

Both have 3 encoder and 2 decoder blocks (llama.cpp's converter maps decoder blocks only up
to the encoder's count), d_model 64, 4 heads of 16, d_ff 128, 32 buckets, and a SentencePiece
Unigram `spiece.model` trained here as T5's is (pad 0, eos 1, unk 2, no bos, nmt_nfkc), with
the tokenizer files transformers' T5Tokenizer writes from it (100 extra ids after the pieces).
The model's vocabulary is padded past the tokenizer's, as T5's 32128 rows are past 32100.

    python seq2seq.py LLAMA_CPP_SRC OUT
"""

import argparse
import collections
import hashlib
import json
import re
import shutil
import string
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import sentencepiece
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import T5Config, T5ForConditionalGeneration, T5Tokenizer
from transformers.models.t5.modeling_t5 import T5Attention

SEED = 1234
PIECES = 400
# Lines the stdlib's docstrings lack: accents, CJK, emoji, digits, runs of spaces.
EXTRA = """Ünïcödé – 日本語のテキスト and emoji 🦙🔥
Le café est très bon à Paris, dit-elle en 2026.
Der schnelle braune Fuchs springt über den faulen Hund.
   leading spaces, trailing   and 12345 numbers: 3.14159, 2,718.
"""


def stamp(extra: str) -> str:
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    h.update(f"{transformers.__version__} {torch.__version__} {extra}".encode())
    return h.hexdigest()


def up_to_date(target: Path, tag: str) -> bool:
    if (target / "stamp").is_file() and (target / "stamp").read_text() == tag:
        print(f"conformance: {target.name} is up to date", flush=True)
        return True
    print(f"conformance: building {target.name}", flush=True)
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    return False


def convert(llama_src: Path, hf: Path, gguf: Path, outtype: str) -> None:
    subprocess.run(
        [sys.executable, str(llama_src / "convert_hf_to_gguf.py"), str(hf),
         "--outtype", outtype, "--outfile", str(gguf)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def tokenizer(hf: Path) -> T5Tokenizer:
    """Trains hf/spiece.model with T5's settings on some varied text, and writes the files
    transformers' T5Tokenizer makes of it beside it."""
    corpus = "\n".join(m.__doc__ for m in (collections, json, argparse, textwrap, string, re))
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "corpus.txt"
        text.write_text(corpus + "\n" + EXTRA)
        sentencepiece.SentencePieceTrainer.train(
            input=str(text), model_prefix=str(Path(tmp) / "spiece"), vocab_size=PIECES,
            model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
            pad_piece="<pad>", eos_piece="</s>", unk_piece="<unk>", character_coverage=1.0,
            normalization_rule_name="nmt_nfkc", num_threads=1, minloglevel=2,
        )
        hf.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(tmp) / "spiece.model", hf / "spiece.model")
    # transformers 5 builds its tokenizer from a folder's spiece.model (the constructor's
    # vocab_file alone is not read), and writes tokenizer.json but no spiece.model.
    tok = T5Tokenizer.from_pretrained(hf)
    tok.save_pretrained(hf)
    return tok


def config(n_vocab: int, **kwargs) -> T5Config:
    # T5's decoder starts from its padding token; llama.cpp's converter requires the key.
    return T5Config(
        vocab_size=n_vocab, d_model=64, d_kv=16, num_heads=4, num_layers=3,
        num_decoder_layers=2, d_ff=128, relative_attention_num_buckets=32,
        relative_attention_max_distance=128, decoder_start_token_id=0, **kwargs,
    )


def randomized(cfg: T5Config) -> T5ForConditionalGeneration:
    torch.manual_seed(SEED)
    model = T5ForConditionalGeneration(cfg).eval()
    # Norm gains away from 1, so that a norm mapped to the wrong tensor shows; matrices of
    # unit-variance products and bias tables of unit scale, so that the logits differ by more
    # than rounding and greedy decoding does not settle on one token.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.empty_like(p).uniform_(0.5, 1.5))
            elif "relative_attention_bias" in name:
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * p.shape[-1] ** -0.5)
    return model


STEPS = 16
INPUT = ("translate English to German: The quick brown fox jumps over the lazy dog, and "
         "then it runs far away into the forest near the river 12 times.")


def answers(model: T5ForConditionalGeneration, tok: T5Tokenizer, target: Path) -> None:
    """Writes what transformers computes for INPUT: the encoder's output, then greedy
    decoding past the end-of-text token, and each step's logits."""
    ids = tok(INPUT).input_ids
    start = model.config.decoder_start_token_id
    with torch.no_grad():
        memory = model.get_encoder()(input_ids=torch.tensor([ids])).last_hidden_state
        out = [start]
        for _ in range(STEPS):
            step = model(encoder_outputs=(memory,), decoder_input_ids=torch.tensor([out]))
            out.append(int(step.logits[0, -1].argmax()))
        logits = model(encoder_outputs=(memory,), decoder_input_ids=torch.tensor([out])).logits
    rel = torch.arange(-300, 301)
    buckets = {
        str(both).lower(): T5Attention._relative_position_bucket(
            rel, bidirectional=both, num_buckets=32, max_distance=128).tolist()
        for both in (True, False)
    }
    (target / "reference.json").write_text(json.dumps(dict(
        text=INPUT, ids=ids, encoder=memory[0].flatten().tolist(), decoder=out,
        logits=logits[0].flatten().tolist(), n_vocab=model.config.vocab_size, buckets=buckets,
        transformers=transformers.__version__, torch=torch.__version__,
    )))


def padded(n: int) -> int:
    return (n + 63) // 64 * 64


def flan(llama_src: Path, out: Path) -> None:
    target = out / "t5-flan"
    if up_to_date(target, stamp("t5-flan")):
        return
    hf = target / "hf"
    tok = tokenizer(hf)
    model = randomized(config(padded(len(tok)), feed_forward_proj="gated-gelu", n_positions=1024))
    model.save_pretrained(hf, safe_serialization=True)
    # transformers 5 ties T5's lm_head whatever the config says; Flan-T5's checkpoints have
    # their own, and say so in config.json.
    tensors = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    tensors["lm_head.weight"] = torch.randn_like(tensors["shared.weight"]) * 0.05
    save_file(tensors, hf / "model.safetensors", metadata={"format": "pt"})
    # The model as those files describe it: its own output matrix, the state unscaled.
    with torch.no_grad():
        model.lm_head = torch.nn.Linear(64, model.config.vocab_size, bias=False)
        model.lm_head.weight.copy_(tensors["lm_head.weight"])
    model.config.scale_decoder_outputs = False
    answers(model, tok, target)
    cfg = json.loads((hf / "config.json").read_text())
    cfg["tie_word_embeddings"] = False
    cfg.pop("scale_decoder_outputs", None)
    (hf / "config.json").write_text(json.dumps(cfg, indent=2))
    convert(llama_src, hf, target / "model.gguf", "f32")
    (target / "stamp").write_text(stamp("t5-flan"))


def v1(llama_src: Path, out: Path) -> None:
    target = out / "t5-v1"
    if up_to_date(target, stamp("t5-v1")):
        return
    hf = target / "hf"
    tok = tokenizer(hf)
    model = randomized(config(padded(len(tok)), feed_forward_proj="relu"))
    model.to(torch.bfloat16).save_pretrained(hf, safe_serialization=True)
    # Older T5 checkpoints ship only a PyTorch file: the same tensors, pickled.
    bin_dir = target / "hf-bin"
    shutil.copytree(hf, bin_dir, ignore=shutil.ignore_patterns("*.safetensors"))
    torch.save(load_file(hf / "model.safetensors"), bin_dir / "pytorch_model.bin")
    convert(llama_src, hf, target / "model.gguf", "bf16")
    # The answers of the weights as stored: rounded to bf16, computed in f32.
    answers(model.to(torch.bfloat16).float(), tok, target)
    (target / "stamp").write_text(stamp("t5-v1"))


def main() -> None:
    llama_src, out = (Path(a) for a in sys.argv[1:3])
    flan(llama_src, out)
    v1(llama_src, out)


if __name__ == "__main__":
    main()
