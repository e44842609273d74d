"""The model families the conformance suite checks: each a small Hugging Face config of that
family (random weights), the llama.cpp vocabulary file its tokenizer comes from, and what the
config exercises. The shapes are small so that transformers, the converter and lavapipe take
seconds, yet every width is a multiple of 32 (Hearth's kernels read rows in 32-value blocks).
A family may also give:

    sentencepiece   normalizer settings (NormalizerSpec fields): its tokenizer is then a
                    SentencePiece tokenizer.model made from the vocabulary file (one of
                    llama.cpp's "llama" SentencePiece vocabularies), and the tokenizer
                    transformers uses for the model type is built from that
    pieces          with sentencepiece: how many of the vocabulary file's tokens are the
                    SentencePiece model's pieces (default all); of the later ones, those the file
                    marks control or user-defined are the tokenizer's added tokens, the rest
                    rows of the model without a token (the model's vocab_size is the file's)
    tokenizer_class with sentencepiece: the transformers tokenizer class (default the one
                    transformers uses for the model type)
    norm_init       the range the 1-D norm parameters are drawn from (default 0.5 to 1.5)
    router_init     the range a mixture-of-experts router's weights (mlp.gate.weight) are
                    drawn from, in place of transformers' normal(0, initializer_range)
    added_tokens    tokens added to the vocabulary file's tokenizer (special), where the
                    family's converter looks them up
    init            parameters (and buffers) drawn uniformly from a range of their own, by the
                    end of their name: {suffix: (low, high)}, before every other rule
    gguf_runs       False where llama.cpp's file leaves out something transformers runs (it
                    is then checked as a conversion only, the folder against the logits);
                    recorded in reference.json
    nextn           True: the saved weights gain a NextN (multi-token prediction) layer after
                    the last, random, as GLM-4.5's checkpoints carry it (transformers leaves it
                    out of the model, and so of the logits)
"""

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

# Phi-3's vocabulary: Llama's SentencePiece model (with a dummy prefix) and the chat tokens
# from 32000 (<|endoftext|>, the eos, to <|user|>), padded to 32064 rows; and its ids, with no
# padding token, so that no embedding row starts at zero.
PHI3_VOCAB = dict(
    vocab="phi-3", sentencepiece=dict(), pieces=32000, tokenizer_class="LlamaTokenizer"
)
PHI3_IDS = dict(bos_token_id=1, eos_token_id=32000, pad_token_id=None)

# Llama 2's SentencePiece vocabulary (with a dummy prefix), as Mistral and Mixtral ship it,
# and its ids.
LLAMA2_VOCAB = dict(vocab="llama-spm", sentencepiece=dict(), tokenizer_class="LlamaTokenizer")
LLAMA2_IDS = dict(bos_token_id=1, eos_token_id=2, pad_token_id=None)

# Routers drawn wider than transformers' normal(0, 0.02), from which the router's logits are a
# few tenths: the second and third largest then differ by under 0.1 at about half the
# positions, and which experts a token gets would hang on rounding. From this range the logits
# spread by about 2 (standard deviation), the second and third largest differ by over 0.1 at
# all but a few of the 80 positions x 2 layers (by about 0.01 at the least), and the second expert
# keeps a weight that shows (a quarter at the median).
ROUTER_INIT = (-0.3, 0.3)

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
    # Granite 3.x: Llama's block with its multipliers on the scores (in place of 1/sqrt(32)),
    # the embeddings, each branch's output before its residual add, and (dividing) the
    # logits; tied embeddings as the small sizes ship. Multipliers away from 1 so that a
    # missing one shows.
    "granite": dict(
        model_type="granite",
        vocab="llama-bpe",
        config=dict(
            BASE,
            tie_word_embeddings=True,
            attention_multiplier=0.0625,
            embedding_multiplier=12.0,
            residual_multiplier=0.22,
            logits_scaling=8.0,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
        ),
    ),
    # SmolLM3: Llama's block with every fourth layer rotating nothing (four layers here, so
    # that the last is one); tied embeddings as SmolLM3-3B ships.
    "smollm3": dict(
        model_type="smollm3",
        vocab="llama-bpe",
        config=dict(
            BASE,
            num_hidden_layers=4,
            tie_word_embeddings=True,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
        ),
    ),
    # GLM-4: q/k/v biases, half of each head rotated in adjacent pairs, norms after each
    # branch as well as before, gate and up in one matrix. llama.cpp's converter looks up
    # GLM's <|endoftext|> and <|user|> in the tokenizer: Qwen2's vocabulary has the first.
    "glm4": dict(
        model_type="glm4",
        vocab="qwen2",
        added_tokens=["<|user|>"],
        config=dict(
            BASE,
            head_dim=32,
            attention_bias=True,
            partial_rotary_factor=0.5,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                 partial_rotary_factor=0.5),
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
    # YaRN (Qwen2.5 and Qwen3 past 32k, DeepSeek): every pair's frequency blended between kept
    # and divided by the factor along a ramp, and cos and sin scaled by 0.1 ln(4) + 1; 80
    # positions against an original context of 32.
    "yarn": dict(
        model_type="qwen2",
        vocab="qwen2",
        config=dict(
            BASE,
            # The extended context: factor x original.
            max_position_embeddings=128,
            rope_parameters=dict(
                rope_type="yarn",
                rope_theta=10000.0,
                factor=4.0,
                original_max_position_embeddings=32,
            ),
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
    # Gemma 2: sliding-window attention on every other layer (0 and 2) with a window shorter
    # than the prompt, tanh soft-capping of attention scores and of the final logits, norms
    # after attention and after the MLP as well as before, the embeddings scaled by
    # sqrt(hidden_size), GeGLU (tanh GELU), tied embeddings, and four heads of 64 (256 wide)
    # in a 128-wide model. The GGUF file has no query_pre_attn_scalar (llama.cpp scales
    # scores by 1/sqrt(head_dim)), so it is head_dim here. Gemma's tokenizer is SentencePiece
    # BPE with byte fallback and no dummy prefix; llama.cpp ships no Gemma vocabulary of
    # that kind, so Llama's SentencePiece vocabulary stands in for it.
    "gemma2": dict(
        model_type="gemma2",
        vocab="llama-spm",
        sentencepiece=dict(add_dummy_prefix=False),
        # Gemma's norms scale by 1 + w: gains from 0.5 to 1.5 as for the other families.
        norm_init=(-0.5, 0.5),
        config=dict(
            BASE,
            num_hidden_layers=4,
            head_dim=64,
            query_pre_attn_scalar=64,
            sliding_window=24,
            attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0,
            hidden_activation="gelu_pytorch_tanh",
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
            # Weights drawn wider than transformers' 0.02, at which the attention scores stay
            # under 0.3 and a cap of 50 moves the logits by under 1e-6, below what the test
            # can see. At 0.05 the scores reach about 2: the attention cap moves the logits
            # by about 3e-4 and the final one by about 1e-2, while f32 rounding stays near 3e-6.
            initializer_range=0.05,
            # The vocabulary's own ids (Gemma's defaults are 0, 1 and 2 for pad, eos and bos);
            # no padding token, so that no embedding row starts at zero.
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=None,
        ),
    ),
    # Gemma 3: five sliding-window layers (0 to 4) then a global one (5), the period 6 that
    # llama.cpp assumes (the GGUF file gives only the window), with a window shorter than the
    # prompt; per-head RMSNorm of queries and keys (1 + w gains like the other norms); RoPE
    # per layer type: the global layers' base 1e6 with linear scaling by 8 (as Gemma 3 4B and
    # larger ship), the local layers' base 1e4 unscaled (rope.freq_base_swa in GGUF; llama.cpp
    # never scales local layers); no attention soft-capping (Gemma 3 dropped it) but a final
    # one; the rest as gemma2: sandwich norms, scaled embeddings, GeGLU, tied embeddings, heads
    # of 64 in a 128-wide model, query_pre_attn_scalar = head_dim, Llama's SentencePiece
    # vocabulary without a dummy prefix.
    "gemma3": dict(
        model_type="gemma3_text",
        vocab="llama-spm",
        sentencepiece=dict(add_dummy_prefix=False),
        norm_init=(-0.5, 0.5),
        config=dict(
            BASE,
            num_hidden_layers=6,
            layer_types=["sliding_attention"] * 5 + ["full_attention"],
            head_dim=64,
            query_pre_attn_scalar=64,
            sliding_window=24,
            attn_logit_softcapping=None,
            final_logit_softcapping=30.0,
            hidden_activation="gelu_pytorch_tanh",
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            rope_parameters=dict(
                full_attention=dict(rope_type="linear", rope_theta=1000000.0, factor=8.0),
                sliding_attention=dict(rope_type="default", rope_theta=10000.0),
            ),
            initializer_range=0.05,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=None,
        ),
    ),
    # Phi-3 (mini, 4k): q, k and v in one matrix (attn_qkv in GGUF) and gate and up in one
    # (ffn_up in GGUF, 2 * intermediate_size rows, the gate's first), grouped-query attention
    # (Phi-3 mini has none, the larger ones do), and a sliding window on every layer shorter
    # than the prompt: transformers applies it, llama.cpp ignores the window the converter
    # writes.
    "phi3": dict(
        PHI3_VOCAB,
        model_type="phi3",
        config=dict(
            BASE,
            **PHI3_IDS,
            original_max_position_embeddings=256,
            sliding_window=24,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
        ),
    ),
    # Phi-4-mini: Phi-3's block rotating three quarters of each head (24 of 32 dimensions),
    # with grouped-query attention and the output tied to the embeddings.
    "phi4mini": dict(
        PHI3_VOCAB,
        model_type="phi3",
        config=dict(
            BASE,
            **PHI3_IDS,
            tie_word_embeddings=True,
            original_max_position_embeddings=256,
            partial_rotary_factor=0.75,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                 partial_rotary_factor=0.75),
        ),
    ),
    # LongRoPE (Phi-3 128k, Phi-3.5 mini): per-pair divisors, the long set for a context past
    # the original 32 (transformers switches when the sequence does; 80 positions here, and
    # Hearth picks by its context of 128), and cos and sin scaled by sqrt(1 + ln(8) / ln(32)).
    "longrope": dict(
        PHI3_VOCAB,
        model_type="phi3",
        config=dict(
            BASE,
            **PHI3_IDS,
            original_max_position_embeddings=32,
            rope_parameters=dict(
                rope_type="longrope",
                rope_theta=10000.0,
                original_max_position_embeddings=32,
                short_factor=[1.0 + 0.05 * i for i in range(16)],
                long_factor=[1.0 + 0.5 * i for i in range(16)],
            ),
        ),
    ),
    # Mistral 7B: Llama's block with every layer local (a window of 24, shorter than the 80
    # positions); Llama 2's SentencePiece vocabulary. llama.cpp's converter drops the window,
    # so its file runs with full attention: the suite checks the folder, which Hearth
    # converts with the window kept, and compares llama.cpp's file only to that conversion.
    "mistral": dict(
        LLAMA2_VOCAB,
        model_type="mistral",
        gguf_runs=False,
        config=dict(
            BASE,
            **LLAMA2_IDS,
            head_dim=32,
            sliding_window=24,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
        ),
    ),
    # Mixtral: a router of four experts choosing two per token (softmax over all four, the top
    # two renormalised), each expert a SwiGLU MLP of 128; Llama 2's SentencePiece vocabulary
    # with a dummy prefix. llama.cpp converts it as "llama" with the experts stacked in 3-D
    # tensors (ffn_gate_exps, ffn_up_exps, ffn_down_exps) and the router as ffn_gate_inp.
    "mixtral": dict(
        LLAMA2_VOCAB,
        model_type="mixtral",
        router_init=ROUTER_INIT,
        config=dict(
            BASE,
            **LLAMA2_IDS,
            intermediate_size=128,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=None,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
        ),
    ),
    # Qwen2-MoE: Qwen2's block (q/k/v biases) with a router of four experts choosing two
    # per token, their softmax weights as they are (norm_topk_prob off), and a shared expert of
    # 96 that every token runs, scaled by the sigmoid of its own gate.
    "qwen2moe": dict(
        model_type="qwen2_moe",
        vocab="qwen2",
        router_init=ROUTER_INIT,
        config=dict(
            BASE,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            shared_expert_intermediate_size=96,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            norm_topk_prob=False,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
        ),
    ),
    # OLMoE: an RMSNorm over the whole query and the whole key projection (gains of 128 and
    # 64) before RoPE, and a router of four experts choosing two per token, their softmax
    # weights as they are. llama.cpp's converter writes an epsilon of 1e-5 whatever the config.
    "olmoe": dict(
        model_type="olmoe",
        vocab="llama-bpe",
        router_init=ROUTER_INIT,
        config=dict(
            BASE,
            intermediate_size=64,
            num_experts=4,
            num_experts_per_tok=2,
            norm_topk_prob=False,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
        ),
    ),
    # Qwen3-MoE: every layer a router of four experts choosing two per token, the two
    # weights renormalised to sum to one (norm_topk_prob), each expert a SwiGLU MLP of 64
    # (expert_feed_forward_length in GGUF; intermediate_size is the dense MLP's, which no
    # layer has); the rest as qwen3: per-head RMSNorm of queries and keys, heads of 64.
    "qwen3moe": dict(
        model_type="qwen3_moe",
        vocab="qwen2",
        router_init=ROUTER_INIT,
        config=dict(
            BASE,
            head_dim=64,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            norm_topk_prob=True,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
        ),
    ),
    # GPT-OSS: four layers, local (window 24, shorter than the 80 positions) and global in
    # turn from the first; a learned sink per head in every softmax, drawn so that it weighs
    # from little to most of a row; YaRN as gpt-oss ships it (factor 32 over 4096, beta 32
    # and 1, the correction range not rounded: `truncate` false); biases on q, k, v and o, on
    # the router and on every expert's gate, up and down; 2 of 4 experts per token, the
    # softmax over the two picked logits; the clamped SwiGLU, with gate/up weights drawn wide
    # enough that a few percent of gate and up values pass the limit of 7. Qwen2's vocabulary:
    # llama.cpp ships no o200k vocabulary file (its pre-tokenizer is tested on its own).
    "gptoss": dict(
        model_type="gpt_oss",
        vocab="qwen2",
        init={
            "self_attn.sinks": (-2.0, 3.0),
            "mlp.router.weight": ROUTER_INIT,
            "mlp.experts.gate_up_proj": (-0.5, 0.5),
            "mlp.experts.gate_up_proj_bias": (-0.5, 0.5),
            "mlp.experts.down_proj_bias": (-0.5, 0.5),
        },
        config=dict(
            BASE,
            num_hidden_layers=4,
            head_dim=32,
            intermediate_size=64,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=24,
            max_position_embeddings=131072,
            attention_bias=True,
            rope_parameters=dict(
                rope_type="yarn",
                rope_theta=150000.0,
                factor=32.0,
                beta_fast=32.0,
                beta_slow=1.0,
                truncate=False,
                original_max_position_embeddings=4096,
            ),
        ),
    ),
    # GLM-4.5 (GLM-4.5-Air): three layers, the first a dense MLP (first_k_dense_replace), the
    # others 2 of 8 experts per token and a shared expert of the experts' width. The router's
    # sigmoid scores plus a correction bias (drawn here: transformers starts it at zero) choose
    # the experts, within the better of 2 groups of 4 (n_group, topk_group), a group scored by
    # its two best; the chosen experts' scores without the bias, renormalised, times 2.5
    # (routed_scaling_factor). q/k/v biases, a per-head RMSNorm of queries and keys
    # (use_qk_norm), the first half of each head rotated as halves. One NextN (multi-token
    # prediction) layer is added to the saved weights, as GLM-4.5's checkpoints carry it: llama.cpp
    # writes it as a fourth block, which decoding leaves out. llama.cpp's converter looks up
    # GLM's [gMASK], <|user|> and <|observation|>.
    "glm4moe": dict(
        model_type="glm4_moe",
        vocab="qwen2",
        added_tokens=["[gMASK]", "<|user|>", "<|observation|>"],
        init={
            "mlp.gate.weight": ROUTER_INIT,
            "mlp.gate.e_score_correction_bias": (-0.3, 0.3),
        },
        nextn=True,
        config=dict(
            BASE,
            num_hidden_layers=3,
            head_dim=32,
            moe_intermediate_size=64,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_shared_experts=1,
            first_k_dense_replace=1,
            n_group=2,
            topk_group=1,
            routed_scaling_factor=2.5,
            norm_topk_prob=True,
            use_qk_norm=True,
            attention_bias=True,
            num_nextn_predict_layers=1,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                 partial_rotary_factor=0.5),
        ),
    ),
    # DeepSeek-V3: multi-head latent attention with low-rank queries (q_lora_rank), YaRN with
    # mscale and mscale_all_dim (the scores scaled by mscale_all_dim's mscale squared),
    # interleaved RoPE; a leading dense block, then 8 experts in 4 groups of which the 2
    # best by the sum of their two best scores take part, chosen by sigmoid scores plus the
    # correction bias, their weights renormalized and scaled, and a shared expert. The cache
    # holds 64 latent and 32 rotated values per position (a multiple of 32, so q8 caches
    # run too); 80 positions run past YaRN's original 64. `scoring_func` as DeepSeek-V3's
    # config.json has it, which llama.cpp's converter reads (transformers' router is sigmoid).
    # The norms' epsilon is DeepSeek's 1e-6: transformers' latent norms (q_a_layernorm,
    # kv_a_layernorm) keep their default 1e-6 whatever rms_norm_eps says, llama.cpp's take
    # rms_norm_eps.
    "deepseek3": dict(
        model_type="deepseek_v3",
        vocab="llama-bpe",
        init={
            "mlp.gate.weight": ROUTER_INIT,
            "mlp.gate.e_score_correction_bias": (-0.3, 0.3),
        },
        config=dict(
            BASE,
            num_hidden_layers=3,
            num_key_value_heads=4,
            rms_norm_eps=1e-6,
            q_lora_rank=64,
            kv_lora_rank=64,
            qk_rope_head_dim=32,
            qk_nope_head_dim=32,
            v_head_dim=32,
            moe_intermediate_size=64,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_shared_experts=1,
            first_k_dense_replace=1,
            n_group=4,
            topk_group=2,
            routed_scaling_factor=2.5,
            norm_topk_prob=True,
            scoring_func="sigmoid",
            rope_interleave=True,
            rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                 original_max_position_embeddings=64, beta_fast=32.0,
                                 beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0),
        ),
    ),
    # DeepSeek-V2 (as V2-Lite: queries without a low rank): latent attention with values
    # wider than the keys' unrotated part, YaRN with V2's mscale = mscale_all_dim = 0.707;
    # softmax routing over 8 experts in 4 groups, the 2 best groups by their best expert
    # (V2's group-limited greedy choice), the weights not renormalized but scaled, and two
    # shared experts. DeepSeek's epsilon, as deepseek3's.
    "deepseek2": dict(
        model_type="deepseek_v2",
        vocab="qwen2",
        router_init=ROUTER_INIT,
        config=dict(
            BASE,
            num_hidden_layers=3,
            num_key_value_heads=4,
            rms_norm_eps=1e-6,
            q_lora_rank=None,
            kv_lora_rank=32,
            qk_rope_head_dim=32,
            qk_nope_head_dim=32,
            v_head_dim=64,
            moe_intermediate_size=64,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_shared_experts=2,
            first_k_dense_replace=1,
            topk_method="group_limited_greedy",
            n_group=4,
            topk_group=2,
            routed_scaling_factor=1.5,
            norm_topk_prob=False,
            scoring_func="softmax",
            rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                 original_max_position_embeddings=64, beta_fast=32.0,
                                 beta_slow=1.0, mscale=0.707, mscale_all_dim=0.707),
        ),
    ),
}
