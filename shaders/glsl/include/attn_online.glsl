// The online softmax that decode attention (attn_decode.comp, attn_sparse.comp) runs for QH
// query heads sharing one KV head, and its merge. Each invocation takes entries (key and
// value rows) one at a time, loading each row once for all QH heads; then the workgroup
// rescales the invocations' partials to its max and sums them. The including kernel defines
// HEAD_DIM, HD4, QH and SUBGROUPS, fills qs with the scaled queries, declares o (binding 1)
// and part (binding 8), and has n_head and splits in its push constants (include/
// attn_split.glsl says what splits > 1 writes). It also defines ROLLED_KEYS_ID, a free
// specialization constant id for ROLLED_KEYS, and CAP_SCORE(s), the score as the softmax
// takes it (soft-capped or as it is). A kernel that defines SINKS_BINDING reads each query
// head's sink there (where p.sinks is set): a logit that joins the softmax's denominator and
// adds no value. Unsplit, online_end folds it in; split, attn_merge.comp does, once.

// CPU devices walk a key row in a loop rather than unrolled: q is in shared memory, so the
// loop indexes no register array, and LLVM compiles the kernel in well under half the time
// (lavapipe: 8.7 -> 3.5 s for attn_decode's fused variant, paid once before a first answer)
// and runs it faster (SmolLM2 at 2048 tokens: attn_decode 1240 -> 1180 us, attn_sparse
// 155 -> 116 us per layer). GPUs unroll it, for the loads in flight.
layout(constant_id = ROLLED_KEYS_ID) const bool ROLLED_KEYS = false;

#ifdef SINKS_BINDING
layout(binding = SINKS_BINDING) readonly buffer Sinks { float sink_logit[]; };
#endif

shared vec4 qs[QH * HD4];
shared vec4 merged[SUBGROUPS][HD4];
shared vec4 lane_acc[SUBGROUPS == 1 ? WG : 1][HD4];    // the lanes' partials (one subgroup)

// Per query head: the running max m, the sum l and the weighted V acc.
float on_m[QH];
float on_l[QH];
vec4 on_acc[QH * HD4];

void online_begin() {
    [[unroll]] for (uint qh = 0; qh < QH; ++qh) {
        on_m[qh] = -1e30;
        on_l[qh] = 0.0;
    }
    [[unroll]] for (uint i = 0; i < QH * HD4; ++i) {
        on_acc[i] = vec4(0.0);
    }
}

// Adds the key's vec4 d times each head's query to its score s[qh].
#define KEY_DOTS(KEY, d)                                                          \
    {                                                                             \
        vec4 k = KEY(d);                                                          \
        [[unroll]] for (uint qh = 0; qh < QH; ++qh) {                             \
            s[qh] += dot(qs[qh * HD4 + d], k);                                    \
        }                                                                         \
    }

// Adds one entry, whose key's vec4 d is KEY(d) and value's VALUE(d).
#define ONLINE_ADD(KEY, VALUE)                                                    \
    {                                                                             \
        float s[QH];                                                              \
        [[unroll]] for (uint qh = 0; qh < QH; ++qh) {                             \
            s[qh] = 0.0;                                                          \
        }                                                                         \
        if (ROLLED_KEYS) {                                                        \
            [[dont_unroll]] for (uint d = 0; d < HD4; ++d) {                      \
                KEY_DOTS(KEY, d)                                                  \
            }                                                                     \
        } else {                                                                  \
            [[unroll]] for (uint d = 0; d < HD4; ++d) {                           \
                KEY_DOTS(KEY, d)                                                  \
            }                                                                     \
        }                                                                         \
        float c[QH];                                                              \
        float e[QH];                                                              \
        [[unroll]] for (uint qh = 0; qh < QH; ++qh) {                             \
            s[qh] = CAP_SCORE(s[qh]);                                             \
            float m_new = max(on_m[qh], s[qh]);                                   \
            c[qh] = exp(on_m[qh] - m_new);                                        \
            e[qh] = exp(s[qh] - m_new);                                           \
            on_l[qh] = on_l[qh] * c[qh] + e[qh];                                  \
            on_m[qh] = m_new;                                                     \
        }                                                                         \
        [[unroll]] for (uint d = 0; d < HD4; ++d) {                               \
            vec4 v = VALUE(d);                                                     \
            [[unroll]] for (uint qh = 0; qh < QH; ++qh) {                         \
                on_acc[qh * HD4 + d] = on_acc[qh * HD4 + d] * c[qh] + e[qh] * v;  \
            }                                                                     \
        }                                                                         \
    }

// Writes vec4 d of query head h's merged result: into its partial at `slot` (splits > 1) or,
// divided by the sum, into o at token `out_token`.
void store_merged(uint h, uint out_token, uint slot, uint d, vec4 sum, float l_all) {
    if (p.splits > 1) {
        part[slot + d] = sum;
    } else {
        o[(out_token * p.n_head * HEAD_DIM + h * HEAD_DIM) / 4 + d] = sum / l_all;
    }
}

// Merges the workgroup's partials for query heads h0 .. h0 + QH and writes them: to o at
// token `out_token` or, with splits > 1, as run z's partials of the dispatch's token
// `part_token`.
void online_end(uint h0, uint out_token, uint part_token, uint z) {
    uint tid = gl_LocalInvocationID.x;
    [[unroll]] for (uint qh = 0; qh < QH; ++qh) {
        uint h = h0 + qh;
        float m_all = workgroup_max(on_m[qh]);
        float f = exp(on_m[qh] - m_all);
        float l_all = workgroup_sum(on_l[qh] * f);
        // The output is sum * scale / l_out: with a sink, both rescaled to the larger of the
        // running max and the sink, and the sink's weight added to the denominator.
        float scale = 1.0;
        float l_out = l_all;
#ifdef SINKS_BINDING
        if (p.sinks != 0u && p.splits == 1) {
            float sink = sink_logit[h];
            float m_s = max(m_all, sink);
            scale = exp(m_all - m_s);
            l_out = l_all * scale + exp(sink - m_s);
        }
#endif
        uint slot = ((part_token * p.n_head + h) * p.splits + z) * (HD4 + 1);
        if (SUBGROUPS == 1) {
            // One subgroup (CPU devices): each lane leaves its partial in shared memory and
            // the lanes sum them by columns. 48 subgroupAdds of vec4s, unrolled, took LLVM
            // 1.3 s longer to compile (lavapipe, attn_decode's fused variant for SmolLM2).
            [[unroll]] for (uint d = 0; d < HD4; ++d) {
                lane_acc[tid][d] = on_acc[qh * HD4 + d] * f;
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            for (uint d = tid; d < HD4; d += WG) {
                vec4 sum = vec4(0.0);
                for (uint l = 0; l < WG; ++l) {
                    sum += lane_acc[l][d];
                }
                store_merged(h, out_token, slot, d, sum * scale, l_out);
            }
            // lane_acc is the next head's.
            subgroupBarrier();
        } else {
            [[unroll]] for (uint d = 0; d < HD4; ++d) {
                vec4 v = subgroupAdd(on_acc[qh * HD4 + d] * f);
                if (subgroupElect()) {
                    merged[gl_SubgroupID][d] = v;
                }
            }
            barrier();
            for (uint d = tid; d < HD4; d += WG) {
                vec4 sum = vec4(0.0);
                for (uint s = 0; s < gl_NumSubgroups; ++s) {
                    sum += merged[s][d];
                }
                store_merged(h, out_token, slot, d, sum * scale, l_out);
            }
            // merged is the next head's.
            barrier();
        }
        if (p.splits > 1 && tid == 0) {
            part[slot + HD4] = vec4(m_all, l_all, 0.0, 0.0);
        }
    }
}
