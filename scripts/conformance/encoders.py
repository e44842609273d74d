"""Builds the encoder conformance models, beside the decoder families (build.py):

    bert-minilm/model.gguf      llama.cpp's conversion of all-MiniLM-L6-v2 (the folder
                                scripts/setup installs), f32
    bert-rerank/hf/             a random-weight cross-encoder (BertForSequenceClassification,
                                one label) made by transformers, with MiniLM's tokenizer
    bert-rerank/model.gguf      llama.cpp's conversion of it
    bert-rerank/reference.json  query-document pairs: their ids, token types and
                                transformers' scores

    python encoders.py LLAMA_CPP_SRC OUT MODELS_DIR
"""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch
import transformers
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

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


def main() -> None:
    llama_src, out, models = (Path(a) for a in sys.argv[1:4])
    minilm(llama_src, out, models)
    rerank(llama_src, out, models)


if __name__ == "__main__":
    main()
