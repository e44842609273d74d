//! BERT's tensor names (BertModel, BertForMaskedLM, BertForSequenceClassification, and
//! RoBERTa's and XLM-RoBERTa's, which are BERT's under `roberta.`) as llama.cpp's converter
//! renames them: embeddings, their norm and token types, and each layer's attention,
//! post-norms and ungated MLP. The masked-LM head is dropped, and so is
//! the pooler of an embedding model, as llama.cpp drops them; a cross-encoder's pooler (its
//! classifier's first layer, which llama.cpp's converter drops too) is kept as `cls`.

/// Where a BERT tensor goes.
pub(crate) enum EncoderName {
    Global(&'static str),
    Layer(usize, &'static str),
    Skip,
}

/// `None` for a name that is not BERT's; `classifier`: the checkpoint has a classifier head.
pub(crate) fn encoder_name(name: &str, classifier: bool) -> Option<EncoderName> {
    let name = ["bert.", "roberta."]
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .unwrap_or(name);
    // Checkpoints from TensorFlow keep LayerNorm's gamma and beta.
    let name = match (name.strip_suffix(".gamma"), name.strip_suffix(".beta")) {
        (Some(stem), _) => format!("{stem}.weight"),
        (_, Some(stem)) => format!("{stem}.bias"),
        _ => name.to_string(),
    };
    let name = name.as_str();
    match name {
        "pooler.dense.weight" if classifier => return Some(EncoderName::Global("cls.weight")),
        "pooler.dense.bias" if classifier => return Some(EncoderName::Global("cls.bias")),
        _ => {}
    }
    if name == "embeddings.position_ids"
        || name.starts_with("pooler.")
        || name.starts_with("cls.predictions")
        || name.starts_with("lm_head.")
        || name.starts_with("cls.seq_relationship")
    {
        return Some(EncoderName::Skip);
    }
    let global = match name {
        "embeddings.word_embeddings.weight" => "token_embd.weight",
        "embeddings.position_embeddings.weight" => "position_embd.weight",
        "embeddings.token_type_embeddings.weight" => "token_types.weight",
        "embeddings.LayerNorm.weight" => "token_embd_norm.weight",
        "embeddings.LayerNorm.bias" => "token_embd_norm.bias",
        // A cross-encoder's score: one linear layer over the pooled first token (BERT), or a
        // dense layer, tanh and the output layer (RoBERTa's classification head).
        "classifier.weight" | "classifier.out_proj.weight" => "cls.output.weight",
        "classifier.bias" | "classifier.out_proj.bias" => "cls.output.bias",
        "classifier.dense.weight" => "cls.weight",
        "classifier.dense.bias" => "cls.bias",
        _ => "",
    };
    if !global.is_empty() {
        return Some(EncoderName::Global(global));
    }
    let rest = name.strip_prefix("encoder.layer.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, param) = rest.rsplit_once('.')?;
    let gguf = match (module, param) {
        ("attention.self.query", "weight") => "attn_q.weight",
        ("attention.self.query", "bias") => "attn_q.bias",
        ("attention.self.key", "weight") => "attn_k.weight",
        ("attention.self.key", "bias") => "attn_k.bias",
        ("attention.self.value", "weight") => "attn_v.weight",
        ("attention.self.value", "bias") => "attn_v.bias",
        ("attention.output.dense", "weight") => "attn_output.weight",
        ("attention.output.dense", "bias") => "attn_output.bias",
        ("attention.output.LayerNorm", "weight") => "attn_output_norm.weight",
        ("attention.output.LayerNorm", "bias") => "attn_output_norm.bias",
        ("intermediate.dense", "weight") => "ffn_up.weight",
        ("intermediate.dense", "bias") => "ffn_up.bias",
        ("output.dense", "weight") => "ffn_down.weight",
        ("output.dense", "bias") => "ffn_down.bias",
        ("output.LayerNorm", "weight") => "layer_output_norm.weight",
        ("output.LayerNorm", "bias") => "layer_output_norm.bias",
        _ => return None,
    };
    Some(EncoderName::Layer(layer, gguf))
}
