"""Builds the encoder-decoder conformance models (T5), beside build.py's decoders:

    t5-gated/hf/             a random-weight T5ForConditionalGeneration in Flan-T5's shape
                            (gated GELU, its own output matrix, 3 encoder and 2 decoder
                            blocks: llama.cpp converts no more decoder blocks than
                            encoder ones) made by transformers, with a SentencePiece Unigram
                            tokenizer trained here (spiece.model) and transformers' files
    t5-gated/model.gguf      llama.cpp's conversion of hf/ (f32)
    t5-gated/reference.json  transformers' answers for one input: its ids, the encoder's
                            output, 16 greedy decode steps and the logits of each, the
                            relative position buckets of every distance in -300..300
    t5-relu/                  the same for T5 v1.0's shape (ReLU, output tied to the
                            embeddings and the last state scaled by 1 / sqrt(d_model))

    python seq2seq.py LLAMA_CPP_SRC OUT
"""

import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

import sentencepiece as spm
import torch
from safetensors.torch import save_file
import transformers
from transformers import T5Config, T5ForConditionalGeneration, T5Tokenizer
from transformers.models.t5.modeling_t5 import T5Attention

SEED = 1234
STEPS = 16
INPUT = ("translate English to German: The quick brown fox jumps over the lazy dog, and "
         "then it runs far away into the forest near the river 12 times.")
# Text the tokenizer is trained on: enough of it, varied enough, for 400 pieces.
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "translate English to German: The house is wonderful.",
    "summarize: studies have shown that owning a dog is good for you.",
    "Ünïcödé text, café, naïve résumé; 日本語のテキスト and 中文.",
    "Numbers 12345 and 2026, prices like $3.50 or 7%.",
    "question: what is the capital of France? context: Paris is the capital.",
    "def f(x): return x ** 2  # squares",
    "   extra   spaces   between   words   ",
]


def stamp(extra: str) -> str:
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    h.update(f"{transformers.__version__} {torch.__version__} {spm.__version__} {extra}".encode())
    return h.hexdigest()


def tokenizer(hf: Path) -> T5Tokenizer:
    corpus = hf / "corpus.txt"
    # Made-up words from a few syllables, so that there are enough distinct pieces to learn.
    rng = random.Random(SEED)
    syllables = ["ka", "ri", "to", "men", "sa", "lo", "qu", "ist", "ber", "ung", "é", "ö", "日"]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(600)]
    lines = CORPUS * 20 + [" ".join(rng.choices(words, k=12)) for _ in range(1500)]
    corpus.write_text("\n".join(lines) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(hf / "spiece"), model_type="unigram",
        vocab_size=400, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=1.0,
        normalization_rule_name="nmt_nfkc", minloglevel=2,
    )
    corpus.unlink()
    (hf / "spiece.vocab").unlink()
    # Read back from spiece.model as transformers converts it, and saved with its own files.
    tok = T5Tokenizer.from_pretrained(hf, extra_ids=0)
    tok.save_pretrained(hf)
    return tok


def build(llama_src: Path, out: Path, name: str, gated: bool) -> None:
    target = out / name
    tag = stamp(name)
    if (target / "stamp").is_file() and (target / "stamp").read_text() == tag:
        print(f"conformance: {name} is up to date", flush=True)
        return
    print(f"conformance: building {name}", flush=True)
    hf = target / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    (target / "stamp").unlink(missing_ok=True)
    tok = tokenizer(hf)
    torch.manual_seed(SEED)
    config = T5Config(
        vocab_size=tok.vocab_size, d_model=64, d_kv=16, d_ff=128, num_layers=3,
        num_decoder_layers=2, num_heads=4, relative_attention_num_buckets=32,
        relative_attention_max_distance=128, dropout_rate=0.0, layer_norm_epsilon=1e-6,
        feed_forward_proj="gated-gelu" if gated else "relu", tie_word_embeddings=not gated,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, n_positions=512,
    )
    model = T5ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            # Norm gains away from 1 so a missing one shows; weights large enough that the
            # logits differ by more than rounding.
            if p.dim() == 1:
                p.copy_(torch.empty_like(p).uniform_(0.5, 1.5))
            elif "relative_attention_bias" in pname:
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * p.shape[-1] ** -0.5)
        if gated:
            # Flan-T5's output matrix is its own. transformers 5 ties it to the embeddings
            # whatever the config says (and so saves none): untie it by hand, and save the
            # weights and the config as Flan-T5's files have them.
            model.lm_head = torch.nn.Linear(64, config.vocab_size, bias=False)
            model.lm_head.weight.copy_(torch.randn_like(model.lm_head.weight) * 0.125)
    if gated:
        # One copy of the embeddings, as `shared.weight`, as transformers saves them.
        weights = {k: v.contiguous() for k, v in model.state_dict().items()
                   if not k.endswith("embed_tokens.weight")}
        save_file(weights, hf / "model.safetensors", metadata={"format": "pt"})
        config.save_pretrained(hf)
        cfg = json.loads((hf / "config.json").read_text())
        cfg["tie_word_embeddings"] = False
        cfg["architectures"] = ["T5ForConditionalGeneration"]
        (hf / "config.json").write_text(json.dumps(cfg, indent=2))
    else:
        model.save_pretrained(hf, safe_serialization=True)
    subprocess.run(
        [sys.executable, str(llama_src / "convert_hf_to_gguf.py"), str(hf),
         "--outtype", "f32", "--outfile", str(target / "model.gguf")],
        check=True, stdout=subprocess.DEVNULL,
    )

    ids = tok(INPUT).input_ids
    x = torch.tensor([ids])
    with torch.no_grad():
        memory = model.get_encoder()(input_ids=x).last_hidden_state
        # Greedy decoding, each step over the whole prefix, past the end-of-text token.
        out = [config.decoder_start_token_id]
        for _ in range(STEPS):
            logits = model(encoder_outputs=(memory,), decoder_input_ids=torch.tensor([out])).logits
            out.append(int(logits[0, -1].argmax()))
        logits = model(encoder_outputs=(memory,), decoder_input_ids=torch.tensor([out])).logits
    rel = torch.arange(-300, 301)
    buckets = {
        str(bi).lower(): T5Attention._relative_position_bucket(
            rel, bidirectional=bi, num_buckets=32, max_distance=128).tolist()
        for bi in (True, False)
    }
    (target / "reference.json").write_text(json.dumps(dict(
        text=INPUT, ids=ids, tokens=tok.convert_ids_to_tokens(ids),
        encoder=memory[0].flatten().tolist(), decoder=out,
        logits=logits[0].flatten().tolist(), n_vocab=config.vocab_size,
        buckets=buckets, transformers=transformers.__version__, torch=torch.__version__,
    )))
    (target / "stamp").write_text(tag)


def main() -> None:
    llama_src, out = Path(sys.argv[1]), Path(sys.argv[2])
    build(llama_src, out, "t5-gated", gated=True)
    build(llama_src, out, "t5-relu", gated=False)


if __name__ == "__main__":
    main()
