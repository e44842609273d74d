"""Builds the encoder conformance models, beside the decoder families (build.py):

    bert-minilm/model.gguf      llama.cpp's conversion of all-MiniLM-L6-v2 (the folder
                                scripts/setup installs), f32
    bert-rerank/hf/             a random-weight cross-encoder (BertForSequenceClassification,
                                one label) made by transformers, with MiniLM's tokenizer
    bert-rerank/model.gguf      llama.cpp's conversion of it
    bert-rerank/reference.json  query-document pairs: their ids, token types and
                                transformers' scores
    roberta-embed/, roberta-rerank/
                                hf/ and reference.json for RoBERTa (RobertaModel, mean-pooled
                                and normalized; RobertaForSequenceClassification), with
                                GPT-2's byte-level BPE vocabulary numbered as RoBERTa numbers
                                it (llama.cpp's converter names pre-tokenizers by their
                                vocabulary's hash, which a made-up one has not: no GGUF)
    xlmr-embed/, xlmr-rerank/   the same for XLM-RoBERTa (XLMRobertaModel with
                                sentence-transformers' mean pooling, normalized;
                                XLMRobertaForSequenceClassification, one label), with a
                                SentencePiece Unigram model trained here as XLM-R's is (unk 0,
                                bos 1, eos 2, nmt_nfkc), saved as sentencepiece.bpe.model beside
                                the tokenizer files transformers' XLMRobertaTokenizer writes
                                (fairseq's numbering: <s> <pad> </s> <unk>, the pieces, <mask>);
                                model.gguf: llama.cpp's conversion of hf/ (its XLM-R vocabulary
                                needs no pre-tokenizer name)
    xlmr-embed/hf-json/         hf/ without sentencepiece.bpe.model: the vocabulary from
                                tokenizer.json alone; model-json.gguf: llama.cpp's conversion

    python encoders.py LLAMA_CPP_SRC OUT MODELS_DIR
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
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertForSequenceClassification,
    RobertaConfig,
    RobertaForSequenceClassification,
    RobertaModel,
    RobertaTokenizerFast,
    XLMRobertaConfig,
    XLMRobertaForSequenceClassification,
    XLMRobertaModel,
    XLMRobertaTokenizer,
)

SEED = 1234
QUERY = "What is the capital of France?"
DOCUMENTS = [
    "Paris is the capital and largest city of France.",
    "The Eiffel Tower was completed in 1889.",
    "Bananas are rich in potassium.",
    "France's capital, Paris, lies on the Seine; its population is about two million.",
]


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
    target.mkdir(parents=True, exist_ok=True)
    (target / "stamp").unlink(missing_ok=True)
    return False


def convert(llama_src: Path, hf: Path, gguf: Path) -> None:
    subprocess.run(
        [sys.executable, str(llama_src / "convert_hf_to_gguf.py"), str(hf),
         "--outtype", "f32", "--outfile", str(gguf)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def minilm(llama_src: Path, out: Path, models: Path) -> None:
    folder = models / "all-MiniLM-L6-v2"
    target = out / "bert-minilm"
    tag = stamp((folder / "model.safetensors").stat().st_size.__str__())
    if up_to_date(target, tag):
        return
    convert(llama_src, folder, target / "model.gguf")
    (target / "stamp").write_text(tag)


def rerank(llama_src: Path, out: Path, models: Path) -> None:
    target = out / "bert-rerank"
    tag = stamp("rerank")
    if up_to_date(target, tag):
        return
    hf = target / "hf"
    hf.mkdir(exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(models / "all-MiniLM-L6-v2")
    tokenizer.save_pretrained(hf)
    torch.manual_seed(SEED)
    config = BertConfig(
        vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=128, type_vocab_size=2, num_labels=1,
        hidden_act="gelu",
    )
    model = BertForSequenceClassification(config).eval()
    # Norm gains and biases away from their defaults, so a missing one shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "LayerNorm.weight" in name:
                p.copy_(torch.empty_like(p).uniform_(0.5, 1.5))
            elif p.dim() == 1 and name.endswith("bias"):
                p.copy_(torch.empty_like(p).uniform_(-0.5, 0.5))
    model.save_pretrained(hf, safe_serialization=True)
    convert(llama_src, hf, target / "model.gguf")
    pairs = tokenizer([QUERY] * len(DOCUMENTS), DOCUMENTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        scores = model(**pairs).logits[:, 0].tolist()
    cases = []
    for i, doc in enumerate(DOCUMENTS):
        mask = pairs["attention_mask"][i].tolist()
        keep = lambda key: [v for v, m in zip(pairs[key][i].tolist(), mask) if m]
        cases.append(dict(document=doc, ids=keep("input_ids"), types=keep("token_type_ids"),
                          score=scores[i]))
    (target / "reference.json").write_text(json.dumps(dict(
        query=QUERY, cases=cases, transformers=transformers.__version__,
        torch=torch.__version__)))
    (target / "stamp").write_text(tag)


def roberta_tokenizer(llama_src: Path, target: Path):
    """RoBERTa's tokenizer over GPT-2's byte-level BPE (llama.cpp's ggml-vocab-gpt-2.gguf):
    <s>, <pad>, </s>, <unk> first, as RoBERTa numbers them, GPT-2's tokens after, <mask> last."""
    vocab = llama_src / "models" / "ggml-vocab-gpt-2.gguf"
    gpt2 = AutoTokenizer.from_pretrained(vocab.parent, gguf_file=vocab.name)
    model = json.loads(gpt2.backend_tokenizer.to_str())["model"]
    ids = {t: i + 4 for t, i in sorted(model["vocab"].items(), key=lambda kv: kv[1])}
    ids = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, **ids}
    ids["<mask>"] = len(ids)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return RobertaTokenizerFast(vocab=ids, merges=merges)


def roberta_config(tokenizer) -> RobertaConfig:
    return RobertaConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=130, type_vocab_size=1, pad_token_id=1,
        bos_token_id=0, eos_token_id=2, num_labels=1,
    )


def randomize(model) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "LayerNorm.weight" in name:
                p.copy_(torch.empty_like(p).uniform_(0.5, 1.5))
            elif p.dim() == 1 and name.endswith("bias"):
                p.copy_(torch.empty_like(p).uniform_(-0.5, 0.5))


def roberta(llama_src: Path, out: Path) -> None:
    texts = ["A man is eating food.", "Ünïcödé and emoji 🦙", "x"]
    target = out / "roberta-embed"
    if not up_to_date(target, stamp("roberta-embed")):
        tokenizer = roberta_tokenizer(llama_src, target)
        hf = target / "hf"
        tokenizer.save_pretrained(hf)
        torch.manual_seed(SEED)
        model = RobertaModel(roberta_config(tokenizer), add_pooling_layer=False).eval()
        randomize(model)
        model.save_pretrained(hf, safe_serialization=True)
        batch = tokenizer(texts, padding=True, return_tensors="pt")
        with torch.no_grad():
            states = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
        pooled = (states * mask).sum(1) / mask.sum(1)
        pooled = torch.nn.functional.normalize(pooled, dim=-1)
        cases = []
        for i, text in enumerate(texts):
            keep = [v for v, m in zip(batch["input_ids"][i].tolist(),
                                      batch["attention_mask"][i].tolist()) if m]
            cases.append(dict(text=text, ids=keep, embedding=pooled[i].tolist()))
        (target / "reference.json").write_text(json.dumps(dict(cases=cases)))
        (target / "stamp").write_text(stamp("roberta-embed"))
    target = out / "roberta-rerank"
    if not up_to_date(target, stamp("roberta-rerank")):
        tokenizer = roberta_tokenizer(llama_src, target)
        hf = target / "hf"
        tokenizer.save_pretrained(hf)
        torch.manual_seed(SEED + 1)
        model = RobertaForSequenceClassification(roberta_config(tokenizer)).eval()
        randomize(model)
        model.save_pretrained(hf, safe_serialization=True)
        pairs = tokenizer([QUERY] * len(DOCUMENTS), DOCUMENTS, padding=True, return_tensors="pt")
        with torch.no_grad():
            scores = model(**pairs).logits[:, 0].tolist()
        cases = []
        for i, doc in enumerate(DOCUMENTS):
            mask = pairs["attention_mask"][i].tolist()
            keep = [v for v, m in zip(pairs["input_ids"][i].tolist(), mask) if m]
            cases.append(dict(document=doc, ids=keep, types=[0] * len(keep), score=scores[i]))
        (target / "reference.json").write_text(json.dumps(dict(query=QUERY, cases=cases)))
        (target / "stamp").write_text(stamp("roberta-rerank"))


# XLM-RoBERTa's tokenizer is trained on the stdlib's docstrings and these lines: accents,
# CJK, emoji, digits, runs of spaces. Hangul is not among them: it is unknown to the model.
XLMR_CORPUS = """Ünïcödé – 日本語のテキスト and emoji 🦙🔥
Le café est très bon à Paris, dit-elle en 2026. Où est la gare ?
Der schnelle braune Fuchs springt über den faulen Hund. Straße, Größe.
巴黎是法国的首都。东京是日本的首都。
Москва — столица России.
   leading spaces, trailing   and 12345 numbers: 3.14159, 2,718.
"""
# Texts to embed: accents, CJK, an unknown script, runs of spaces, a single letter, full-width
# forms NFKC folds, and one longer than the model's 128 positions (cut, </s> kept).
XLMR_TEXTS = [
    "A man is eating food.",
    "Le café à Paris: naïve Größe, Ünïcödé – ok",
    "巴黎是法国的首都。日本語のテキスト",
    "안녕하세요 and Москва",
    "emoji 🦙🔥 and   runs   of spaces  ",
    "x",
    "ＡＢＣ１２３ full-width",
    " ".join(["The quick brown fox jumps over the lazy dog."] * 30),
]
XLMR_DOCUMENTS = DOCUMENTS + [
    "Paris est la capitale de la France ; 巴黎是法国的首都。",
    " ".join(["Paris is a large city in France with many museums."] * 30),
]
# A pair whose parts are both longer than half the positions: transformers cuts both.
XLMR_LONG_QUERY = " ".join(["Which city is the capital of France, and why?"] * 12)


def xlmr_tokenizer(hf: Path) -> XLMRobertaTokenizer:
    """Trains hf/sentencepiece.bpe.model as XLM-R's was trained (Unigram, <unk> <s> </s>
    first, nmt_nfkc), and writes the files transformers' XLMRobertaTokenizer makes of it."""
    corpus = "\n".join(m.__doc__ for m in (collections, json, argparse, string, textwrap, re))
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "corpus.txt"
        text.write_text(corpus + "\n" + XLMR_CORPUS)
        sentencepiece.SentencePieceTrainer.train(
            input=str(text), model_prefix=str(Path(tmp) / "sp"), vocab_size=400,
            model_type="unigram", unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
            character_coverage=1.0, normalization_rule_name="nmt_nfkc", num_threads=1,
            minloglevel=2,
        )
        hf.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(tmp) / "sp.model", hf / "sentencepiece.bpe.model")
    # transformers 5 builds the tokenizer from the folder's sentencepiece.bpe.model.
    tokenizer = XLMRobertaTokenizer.from_pretrained(hf)
    tokenizer.save_pretrained(hf)
    return tokenizer


def xlmr_config(tokenizer, **kwargs) -> XLMRobertaConfig:
    return XLMRobertaConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=130, type_vocab_size=1, pad_token_id=1,
        bos_token_id=0, eos_token_id=2, **kwargs,
    )


def unit_products(model) -> None:
    """Norm gains and biases away from their defaults (randomize), and every linear layer's
    matrix drawn so that its products have about unit variance: with transformers' 0.02 the
    classifier's scores differ by less than the bounds the tests hold them to."""
    randomize(model)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, module.in_features ** -0.5)


def xlmr(llama_src: Path, out: Path) -> None:
    target = out / "xlmr-embed"
    if not up_to_date(target, stamp("xlmr-embed")):
        hf = target / "hf"
        shutil.rmtree(hf, ignore_errors=True)
        tokenizer = xlmr_tokenizer(hf)
        torch.manual_seed(SEED + 2)
        # With its pooler, as multilingual-e5's checkpoints have one (the conversion drops it).
        model = XLMRobertaModel(xlmr_config(tokenizer)).eval()
        unit_products(model)
        model.save_pretrained(hf, safe_serialization=True)
        (hf / "modules.json").write_text(json.dumps([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling",
             "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize",
             "type": "sentence_transformers.models.Normalize"},
        ]))
        (hf / "1_Pooling").mkdir(exist_ok=True)
        (hf / "1_Pooling" / "config.json").write_text(json.dumps(
            {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}))
        convert(llama_src, hf, target / "model.gguf")
        hf_json = target / "hf-json"
        shutil.rmtree(hf_json, ignore_errors=True)
        shutil.copytree(hf, hf_json)
        (hf_json / "sentencepiece.bpe.model").unlink()
        convert(llama_src, hf_json, target / "model-json.gguf")
        batch = tokenizer(XLMR_TEXTS, padding=True, truncation=True, max_length=128,
                          return_tensors="pt")
        with torch.no_grad():
            states = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
        pooled = (states * mask).sum(1) / mask.sum(1)
        pooled = torch.nn.functional.normalize(pooled, dim=-1)
        cases = []
        for i, text in enumerate(XLMR_TEXTS):
            keep = [v for v, m in zip(batch["input_ids"][i].tolist(),
                                      batch["attention_mask"][i].tolist()) if m]
            cases.append(dict(text=text, ids=keep, embedding=pooled[i].tolist()))
        (target / "reference.json").write_text(json.dumps(dict(
            cases=cases, transformers=transformers.__version__, torch=torch.__version__)))
        (target / "stamp").write_text(stamp("xlmr-embed"))
    target = out / "xlmr-rerank"
    if not up_to_date(target, stamp("xlmr-rerank")):
        hf = target / "hf"
        shutil.rmtree(hf, ignore_errors=True)
        tokenizer = xlmr_tokenizer(hf)
        torch.manual_seed(SEED + 3)
        model = XLMRobertaForSequenceClassification(xlmr_config(tokenizer, num_labels=1)).eval()
        unit_products(model)
        model.save_pretrained(hf, safe_serialization=True)
        convert(llama_src, hf, target / "model.gguf")
        queries = [QUERY] * len(XLMR_DOCUMENTS) + [XLMR_LONG_QUERY]
        documents = XLMR_DOCUMENTS + [XLMR_DOCUMENTS[-1]]
        pairs = tokenizer(queries, documents, padding=True, truncation=True, max_length=128,
                          return_tensors="pt")
        with torch.no_grad():
            scores = model(**pairs).logits[:, 0].tolist()
        cases = []
        for i, (query, doc) in enumerate(zip(queries, documents)):
            mask = pairs["attention_mask"][i].tolist()
            keep = [v for v, m in zip(pairs["input_ids"][i].tolist(), mask) if m]
            cases.append(dict(query=query, document=doc, ids=keep, types=[0] * len(keep),
                              score=scores[i]))
        (target / "reference.json").write_text(json.dumps(dict(
            cases=cases, transformers=transformers.__version__, torch=torch.__version__)))
        (target / "stamp").write_text(stamp("xlmr-rerank"))


def main() -> None:
    llama_src, out, models = (Path(a) for a in sys.argv[1:4])
    minilm(llama_src, out, models)
    rerank(llama_src, out, models)
    roberta(llama_src, out)
    xlmr(llama_src, out)


if __name__ == "__main__":
    main()
