"""The model families the conformance suite checks: each a small Hugging Face config of that
family (random weights), the llama.cpp vocabulary file its tokenizer comes from, and what the
config exercises. The shapes are small so that transformers, the converter and lavapipe take
seconds, yet every width is a multiple of 32 (Hearth's kernels read rows in 32-value blocks)."""

# Tokens fed to both sides: a prompt of PROMPT tokens, then DECODE tokens one step each.
PROMPT = 64
DECODE = 16

# Shared by every family unless it says otherwise.
BASE = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
)

FAMILIES = {
    # Llama 3.x: the llama3 RoPE frequency table (rope_freqs.weight in GGUF), exercised past
    # the original context: 80 positions against an original 32.
    "llama3": dict(
        model_type="llama",
        vocab="llama-bpe",
        config=dict(
            BASE,
            rope_parameters=dict(
                rope_type="llama3",
                rope_theta=10000.0,
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=32,
            ),
        ),
    ),
    # Qwen2 / Qwen2.5: biases on q, k and v; tied embeddings as the small sizes ship.
    "qwen2": dict(
        model_type="qwen2",
        vocab="qwen2",
        config=dict(
            BASE,
            tie_word_embeddings=True,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
        ),
    ),
    # Qwen3: per-head RMSNorm of queries and keys, and a head width of its own (64 with four
    # heads of a 128-wide model).
    "qwen3": dict(
        model_type="qwen3",
        vocab="qwen2",
        config=dict(
            BASE,
            head_dim=64,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
        ),
    ),
}
