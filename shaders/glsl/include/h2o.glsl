// What the H2O kernels (h2o_update.comp, h2o_lse.comp, h2o_mass.comp) share: their push
// constants (`H2oPush` in kernels/src/h2o.rs) and the scores of one KV head's group
// of query heads against a key.
//
// H2O's state for a layer, per cache row and KV head: `kept` [rows, n_kv, cap] holds the
// positions it keeps, `kept_count` [rows, n_kv] of them in use and in no particular order,
// and `mass` [rows, n_kv, n_ctx] the attention each position has received: the softmax
// probabilities of the group's query heads, summed over the steps (model/src/kv/h2o.rs is
// the reference). The including kernel defines HEAD_DIM, HD4 and GROUP.
layout(push_constant) uniform Push {
    uint t0;            // the dispatch's first token: its row of q and of the step buffer
    uint tokens;
    uint q_stride;      // floats per token of q: the query heads, then the key heads
    uint n_head;
    uint n_head_kv;
    uint head_dim;
    uint n_ctx;
    uint max_blocks;    // entries per row of the block tables
    uint cap;           // slots per (row, KV head) of kept, and per (token, KV head) of the
                        // gathered keys
    float scale;        // 1 / sqrt(head_dim)
} p;

// Scores of the group's GROUP query heads (qs[base + h * HD4 + d], staged by the kernel) against
// the key whose vec4 d is KEY(d), times p.scale, into s[GROUP].
#define GROUP_SCORES(s, qs, base, KEY)                                            \
    {                                                                             \
        [[unroll]] for (uint h = 0; h < GROUP; ++h) {                             \
            s[h] = 0.0;                                                           \
        }                                                                         \
        [[unroll]] for (uint d = 0; d < HD4; ++d) {                               \
            vec4 k = KEY(d);                                                      \
            [[unroll]] for (uint h = 0; h < GROUP; ++h) {                         \
                s[h] += dot(qs[(base) + h * HD4 + d], k);                         \
            }                                                                     \
        }                                                                         \
        [[unroll]] for (uint h = 0; h < GROUP; ++h) {                             \
            s[h] *= p.scale;                                                      \
        }                                                                         \
    }

// Adds scores s[GROUP] to per-head running maxima m and sums l (of exp(score - m)).
#define ONLINE_MAX_SUM(s, m, l)                                                   \
    {                                                                             \
        [[unroll]] for (uint h = 0; h < GROUP; ++h) {                             \
            float m_new = max(m[h], s[h]);                                        \
            l[h] = l[h] * exp(m[h] - m_new) + exp(s[h] - m_new);                  \
            m[h] = m_new;                                                         \
        }                                                                         \
    }

// Merges the invocations' (m, l) into the workgroup's, in place (every invocation gets it).
#define MERGE_MAX_SUM(m, l)                                                       \
    {                                                                             \
        [[unroll]] for (uint h = 0; h < GROUP; ++h) {                             \
            float best = workgroup_max(m[h]);                                     \
            l[h] = workgroup_sum(l[h] * exp(m[h] - best));                        \
            m[h] = best;                                                          \
        }                                                                         \
    }
