"""Builds each conformance family: a random-weight model from its config by transformers,
saved as safetensors with a tokenizer, converted to GGUF by llama.cpp's convert_hf_to_gguf.py,
and the reference logits transformers computes (f32, eager attention) for a fixed token
sequence. Writes, per family, into OUT/<family>/:

    hf/               config.json, model.safetensors, tokenizer files
    model.gguf        llama.cpp's conversion of hf/ (f32 weights)
    reference.json    {"tokens": [...], "prompt": P, "decode": D, "n_vocab": V, "gguf_runs": B, ...}
    reference.f32     logits for every position, [P + D, V] little-endian f32

    python build.py LLAMA_CPP_SRC OUT [FAMILY ...]
"""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from families import DECODE, FAMILIES, PROMPT

SEED = 1234

# A mixture-of-experts router's weights, [n_expert, hidden], by the names transformers gives them.
ROUTERS = ("mlp.gate.weight", "block_sparse_moe.gate.weight")

TEXTS = [
    "Hello world",
    "It's 2026: the 12345th test, isn't it?\n\n  Indented\tline",
    "Ünïcödé – 日本語のテキスト and emoji 🦙🔥",
    "def f(x):\n    return x ** 2  # squares\n",
    "   leading spaces, trailing   ",
]


def stamp(name: str, spec: dict) -> str:
    """Changes whenever the family's definition (its entry of families.py, with every value
    it takes from the file's constants), this script or a pinned version changes."""
    here = Path(__file__).parent
    h = hashlib.sha256()
    h.update(json.dumps(spec, sort_keys=True).encode())
    h.update((here / "build.py").read_bytes())
    h.update(f"{transformers.__version__} {torch.__version__} {PROMPT} {DECODE}".encode())
    return h.hexdigest()


def sentencepiece_tokenizer(vocab: Path, hf: Path, spec: dict):
    """Writes hf/tokenizer.model, a SentencePiece BPE model (byte fallback) with the pieces,
    scores and token types of a llama.cpp "llama" vocabulary file and the family's
    NormalizerSpec fields, and returns the transformers tokenizer built from it with the
    number of tokens in the file (the model's vocab_size). transformers would order the BPE
    merges by piece id, SentencePiece merges by score (Llama's vocabulary scores its "▁▁"
    below every other piece), so the merges here follow the scores; the tokenizer's ids must
    equal SentencePiece's on TEXTS.

    The file's first `pieces` tokens (default all) are SentencePiece's; of the tokens after
    them, those the file marks control or user-defined are added tokens of the transformers
    tokenizer (special if control), in id order, and the rest only rows of the model that the
    converter names [PADn]. A user-defined token among the pieces is added too (not special),
    as Phi-3's tokenizer adds "</s>"."""
    from gguf import GGUFReader
    from sentencepiece import SentencePieceProcessor
    from sentencepiece import sentencepiece_model_pb2 as spm
    from tokenizers import AddedToken
    from transformers.models.auto.tokenization_auto import (
        TOKENIZER_MAPPING_NAMES,
        tokenizer_class_from_name,
    )
    from transformers.tokenization_utils_base import generate_merges

    fields = GGUFReader(vocab).fields
    kind = fields["tokenizer.ggml.model"].contents()
    if kind != "llama":
        sys.exit(f"conformance: {vocab.name} is a {kind!r} vocabulary, not SentencePiece's")
    tokens = fields["tokenizer.ggml.tokens"].contents()
    scores = fields["tokenizer.ggml.scores"].contents()
    types = fields["tokenizer.ggml.token_type"].contents()
    n_pieces = spec.get("pieces", len(tokens))
    Piece = spm.ModelProto.SentencePiece
    proto = spm.ModelProto()
    # llama.cpp numbers token types as SentencePiece numbers piece types.
    for piece, score, type_ in zip(tokens[:n_pieces], scores, types):
        proto.pieces.add(piece=piece, score=score, type=type_)
    trainer = proto.trainer_spec
    trainer.model_type = spm.TrainerSpec.BPE
    trainer.vocab_size = len(proto.pieces)
    trainer.byte_fallback = True
    trainer.pad_id = -1
    special = {}
    for name, key in (("unk", "unknown"), ("bos", "bos"), ("eos", "eos"), ("pad", "padding")):
        if f"tokenizer.ggml.{key}_token_id" in fields:
            special[name] = fields[f"tokenizer.ggml.{key}_token_id"].contents()
    # SentencePiece's own unk, bos and eos: the vocabulary's where they are pieces, else its
    # defaults (Phi-3's eos is an added token; its SentencePiece model keeps "</s>", id 2).
    for name in ("unk", "bos", "eos"):
        i = special[name] if special[name] < n_pieces else getattr(trainer, f"{name}_id")
        setattr(trainer, f"{name}_id", i)
        setattr(trainer, f"{name}_piece", proto.pieces[i].piece)
        proto.pieces[i].type = Piece.UNKNOWN if name == "unk" else Piece.CONTROL
    normalizer = proto.normalizer_spec
    normalizer.name = "identity"
    normalizer.add_dummy_prefix = True
    normalizer.remove_extra_whitespaces = False
    normalizer.escape_whitespaces = True
    for key, value in spec["sentencepiece"].items():
        setattr(normalizer, key, value)
    model_file = hf / "tokenizer.model"
    model_file.write_bytes(proto.SerializeToString())

    ids = {p.piece: i for i, p in enumerate(proto.pieces)}
    cls = spec.get("tokenizer_class", TOKENIZER_MAPPING_NAMES[spec["model_type"]])
    tokenizer = tokenizer_class_from_name(cls)(
        vocab=ids,
        merges=generate_merges(ids, {p.piece: p.score for p in proto.pieces}),
        unk_token=tokens[special["unk"]],
        bos_token=tokens[special["bos"]],
        eos_token=tokens[special["eos"]],
        pad_token=tokens[special["pad"]] if "pad" in special else None,
        mask_token=None,
        add_bos_token=True,
    )
    if normalizer.add_dummy_prefix:
        # As SentencePiece (and Llama 2's and Phi-3's tokenizer.json): "▁" before every text.
        # A Metaspace pre-tokenizer adds none to a text that starts with a space.
        from tokenizers import normalizers

        tokenizer.backend_tokenizer.normalizer = normalizers.Sequence(
            [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]
        )
        tokenizer.backend_tokenizer.pre_tokenizer = None
    added = [
        i for i, type_ in enumerate(types)
        if type_ == Piece.USER_DEFINED or (i >= n_pieces and type_ == Piece.CONTROL)
    ]
    tokenizer.add_tokens([
        AddedToken(tokens[i], special=types[i] == Piece.CONTROL, normalized=False) for i in added
    ])
    for i in added:
        if (got := tokenizer.convert_tokens_to_ids(tokens[i])) != i:
            sys.exit(f"conformance: transformers numbers {tokens[i]!r} {got}, {vocab.name} {i}")
    reference = SentencePieceProcessor(model_file=str(model_file))
    for text in TEXTS:
        want = reference.encode(text)
        got = tokenizer(text, add_special_tokens=False)["input_ids"]
        if got != want:
            sys.exit(f"conformance: transformers tokenizes {text!r} as {got}, SentencePiece as {want}")
    return tokenizer, len(tokens)


def add_nextn_layer(hf: Path, model) -> None:
    """Adds a NextN layer to hf/model.safetensors as GLM-4.5's checkpoints hold it, after the
    last: a copy of the last decoder layer's tensors (renumbered) drawn anew, and the
    projection of the concatenated normed embedding and hidden state with its two norms and
    the head's norm."""
    from safetensors.torch import load_file, save_file

    path = hf / "model.safetensors"
    tensors = load_file(path)
    n = model.config.num_hidden_layers
    last, new = f"model.layers.{n - 1}.", f"model.layers.{n}."
    gen = torch.Generator().manual_seed(SEED + 1)
    for name, t in list(tensors.items()):
        if name.startswith(last):
            tensors[new + name[len(last):]] = torch.empty_like(t).uniform_(-0.1, 0.1, generator=gen)
    e = model.config.hidden_size
    tensors[new + "eh_proj.weight"] = torch.empty(e, 2 * e).uniform_(-0.1, 0.1, generator=gen)
    for norm in ("enorm", "hnorm", "shared_head.norm"):
        tensors[new + norm + ".weight"] = torch.empty(e).uniform_(0.5, 1.5, generator=gen)
    save_file(tensors, path, metadata={"format": "pt"})


def build(llama_src: Path, out: Path, name: str, spec: dict) -> None:
    target = out / name
    tag = stamp(name, spec)
    if (target / "stamp").is_file() and (target / "stamp").read_text() == tag:
        print(f"conformance: {name} is up to date", flush=True)
        return
    print(f"conformance: building {name}", flush=True)
    hf = target / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    (target / "stamp").unlink(missing_ok=True)

    vocab = llama_src / "models" / f"ggml-vocab-{spec['vocab']}.gguf"
    if "sentencepiece" in spec:
        tokenizer, n_vocab = sentencepiece_tokenizer(vocab, hf, spec)
    else:
        tokenizer = AutoTokenizer.from_pretrained(vocab.parent, gguf_file=vocab.name)
        from tokenizers import AddedToken

        tokenizer.add_tokens([
            AddedToken(t, special=True, normalized=False) for t in spec.get("added_tokens", [])
        ])
        n_vocab = len(tokenizer)
    tokenizer.save_pretrained(hf)

    torch.manual_seed(SEED)
    config = AutoConfig.for_model(spec["model_type"], vocab_size=n_vocab, **spec["config"])
    model = AutoModelForCausalLM.from_config(
        config, dtype=torch.float32, attn_implementation="eager"
    )
    # Norm gains start at one; draw them so that a norm applied with the wrong gain shows.
    norm_low, norm_high = spec.get("norm_init", (0.5, 1.5))
    with torch.no_grad():
        for pname, p in model.named_parameters():
            inits = spec.get("init", {})
            suffix = next((k for k in inits if pname.endswith(k)), None)
            if suffix is not None:
                p.copy_(torch.empty_like(p).uniform_(*inits[suffix]))
            elif "router_init" in spec and pname.endswith(ROUTERS):
                p.copy_(torch.empty_like(p).uniform_(*spec["router_init"]))
            elif p.dim() == 1 and "norm" in pname:
                p.copy_(torch.empty_like(p).uniform_(norm_low, norm_high))
            elif p.dim() == 1 and pname.endswith("bias"):
                p.copy_(torch.empty_like(p).uniform_(-0.5, 0.5))
        # Buffers (a router's correction bias) by the `init` rules only.
        for pname, b in model.named_buffers():
            suffix = next((k for k in spec.get("init", {}) if pname.endswith(k)), None)
            if suffix is not None:
                b.copy_(torch.empty_like(b).uniform_(*spec["init"][suffix]))
    model.eval()
    model.save_pretrained(hf, safe_serialization=True)
    if spec.get("nextn"):
        add_nextn_layer(hf, model)

    gguf = target / "model.gguf"
    subprocess.run(
        [sys.executable, str(llama_src / "convert_hf_to_gguf.py"), str(hf),
         "--outtype", "f32", "--outfile", str(gguf)],
        check=True,
        stdout=subprocess.DEVNULL,
    )

    gen = torch.Generator().manual_seed(SEED)
    n = PROMPT + DECODE
    tokens = torch.randint(0, len(tokenizer), (1, n), generator=gen)
    with torch.no_grad():
        logits = model(tokens).logits[0].to(torch.float32).numpy()
    logits.astype("<f4").tofile(target / "reference.f32")
    # The tokenizer's ids for a few texts, without special tokens: what Hearth's tokenizer,
    # built from the GGUF file's vocabulary, must give.
    tokenized = [
        dict(text=t, ids=tokenizer(t, add_special_tokens=False)["input_ids"]) for t in TEXTS
    ]
    meta = dict(
        family=name,
        tokenized=tokenized,
        tokens=tokens[0].tolist(),
        prompt=PROMPT,
        decode=DECODE,
        n_vocab=int(logits.shape[1]),
        gguf_runs=spec.get("gguf_runs", True),
        transformers=transformers.__version__,
        torch=torch.__version__,
    )
    (target / "reference.json").write_text(json.dumps(meta))
    (target / "stamp").write_text(tag)


def main() -> None:
    llama_src, out = Path(sys.argv[1]), Path(sys.argv[2])
    names = sys.argv[3:] or list(FAMILIES)
    for name in names:
        if name not in FAMILIES:
            sys.exit(f"conformance: no family {name!r} (families: {', '.join(FAMILIES)})")
        build(llama_src, out, name, FAMILIES[name])


if __name__ == "__main__":
    main()
