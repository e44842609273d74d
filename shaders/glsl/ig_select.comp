#version 450
// InfiniGen's token selection for the current token of each row of a step, one workgroup per
// (KV head g, token), or on CPU devices one per token for every KV head in turn
// (EVERY_KV_HEAD), so that the heads' maxima and counts are taken once; a step of fewer
// tokens than the CPU has cores gives each token a few workgroups, which split its KV heads.
// The y row of workgroups is the token (ig_step.glsl), whose scores, selection and count are
// its own slices of the buffers.
//
// Every head h counts the positions t < index scoring within alpha of its best mx_h; the
// mean count over all heads, rounded up and capped by the token's budget, is k, how many
// positions each KV head fetches (InfiniGen's rule: every head gets the typical head's
// share). KV head g keeps the k positions closest to the best of some head of its group:
//   d[t] = min over h in g's group of (mx_h - scores[h][t]) >= 0,
// the k smallest d, ties at the cut going to lower positions: a radix select over d's bits
// (non-negative floats order like their bits) finds the cut value and how many positions
// equal to it to keep. A final pass writes the kept positions in ascending order, scanning
// tiles of WG positions. Every count is an integer, so the result does not depend on
// scheduling. The `recent` newest tokens come first (key 0; every other key is d's bits plus
// one) and add to k; seq_pos says which they are, since once the row's pool evicts tokens
// an entry's index is no longer its position.
//
// The keys of the first KEY_CACHE positions are computed once (for the first KV head, in the
// counting pass) and kept in shared memory for the five passes that read them; later
// positions (longer histories than the cache holds) recompute theirs.
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "reduce.glsl"
#include "ig_push.glsl"
#define IG_STEPS_BINDING 4
#include "ig_step.glsl"

layout(constant_id = 1) const uint KEY_CACHE = 1024;            // keys kept in shared memory
layout(constant_id = 2) const bool EVERY_KV_HEAD = false;       // one workgroup per token
const uint MAX_HEADS = 256;                                      // query heads
const uint ALL = 0xFFFFFFFFu;
layout(binding = 0) readonly buffer Scores { float scores[]; };  // [tokens, n_head, n_ctx]
layout(binding = 1) readonly buffer SeqPos { uint seq_pos[]; };  // [rows, n_ctx]
// The `_wide` variant (CPU devices) reads both through their addresses (address.glsl).
#ifdef WIDE_LOADS
#define BY_ADDRESS_ID 3
#include "address.glsl"
layout(binding = 0) readonly buffer ScoreWords { uint score_words[]; };
layout(binding = 0) readonly buffer ScoreQuads { u64vec2 score_quads[]; };
#define SCORE(i) uintBitsToFloat(WORDS32_AT(p.scores_addr, score_words, (i)))
#define SEQ_POS(i) WORDS32_AT(p.seq_pos_addr, seq_pos, (i))
#else
#define SCORE(i) scores[i]
#define SEQ_POS(i) seq_pos[i]
#endif
layout(binding = 2) writeonly buffer Idx { uint sel_idx[]; };    // [tokens, n_kv, cap]
layout(binding = 3) writeonly buffer Count { uint sel_count[]; }; // [tokens, n_kv]

shared float best[MAX_HEADS];
shared uint hist[256];
shared uint found[2];
shared uint chunk_sums[16];
shared uint tile_sums[WG];
shared uint keys[KEY_CACHE];

uint group;
uint h0;
uint sb;            // this token's scores: scores[sb + h * n_ctx + t]
IgStep at;
uint recent;        // the newest positions kept on top of the budget

// d[t] as bits. x - x is +0, and d >= 0 by construction, so clearing the sign bit only maps a
// -0 (from a max that came out as -0) to +0.
uint key_of(uint t, float d) {
    bool newest = SEQ_POS(at.row * p.n_ctx + t) + recent >= at.pos;
    return newest ? 0u : (floatBitsToUint(d) & 0x7FFFFFFFu) + 1u;
}

// The passes that read every score (maxima, counts, key fills) take P consecutive positions
// per invocation: four on CPU devices, where the `_wide` variant loads them as one 16-byte
// word when rows are whole 16-byte words (a load per lane costs the same at any width there).
const uint P = EVERY_KV_HEAD ? 4 : 1;
#define NEG_INF uintBitsToFloat(0xFF800000u)
#define POS_INF uintBitsToFloat(0x7F800000u)

// Head h's scores at positions t .. t + P (t a multiple of P), -inf from position n on.
vec4 scores_at(uint h, uint t, uint n) {
    uint i = sb + h * p.n_ctx + t;
    if (P == 1) {
        return vec4(SCORE(i), NEG_INF, NEG_INF, NEG_INF);
    }
    vec4 v = vec4(NEG_INF);
#ifdef WIDE_LOADS
    if ((p.n_ctx & 3u) == 0u) {
        v = uintBitsToFloat(WORDS128_AT(p.scores_addr, score_quads, i >> 2));
    } else
#endif
    {
        [[unroll]] for (uint k = 0; k < 4; ++k) {
            v[k] = t + k < n ? SCORE(i + k) : NEG_INF;
        }
    }
    return mix(v, vec4(NEG_INF), greaterThanEqual(uvec4(t) + uvec4(0, 1, 2, 3), uvec4(n)));
}

// Keys of positions t .. t + P (those below min(n, KEY_CACHE)) from their distances.
void store_keys(uint t, uint n, vec4 d) {
    [[unroll]] for (uint k = 0; k < P; ++k) {
        if (t + k < min(n, KEY_CACHE)) {
            keys[t + k] = key_of(t + k, d[k]);
        }
    }
}

// d[t] for the KV head whose first query head is h0.
float distance(uint t) {
    float d = POS_INF;
    for (uint i = 0; i < group; ++i) {
        d = min(d, best[h0 + i] - SCORE(sb + (h0 + i) * p.n_ctx + t));
    }
    return d;
}

uint key_at(uint t) {
    return t < KEY_CACHE ? keys[t] : key_of(t, distance(t));
}

// KV head g keeps the `budget` positions of smallest key (after the cache holds its keys),
// written in ascending order.
void select_for(uint g, uint tk, uint n, uint budget) {
    uint tid = gl_LocalInvocationID.x;
    uint out_base = (tk * p.n_head_kv + g) * p.cap;
    // Keep d < cut, and the first take_eq positions with d == cut.
    uint cut = ALL;
    uint take_eq = ALL;
    uint candidates = n;
    if (candidates > budget && budget == 0) {
        cut = 0;
        take_eq = 0;
    } else if (candidates > budget) {
        // The budget-th smallest key, 8 bits at a time from the top: `rank` counts from 1
        // among the keys that share the digits found so far.
        uint prefix = 0;
        uint mask = 0;
        uint rank = budget;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (uint i = tid; i < 256; i += WG) {
                hist[i] = 0;
            }
            barrier();
            for (uint t = tid; t < n; t += WG) {
                uint key = key_at(t);
                if ((key & mask) == prefix) {
                    atomicAdd(hist[(key >> shift) & 255u], 1u);
                }
            }
            barrier();
            // The first digit whose running count reaches rank (255 if none does): the chunk
            // of 16 digits holding it, from chunk sums taken in parallel, then the digit.
            for (uint c = tid; c < 16; c += WG) {
                uint sum = 0;
                for (uint i = 0; i < 16; ++i) {
                    sum += hist[16 * c + i];
                }
                chunk_sums[c] = sum;
            }
            barrier();
            if (tid == 0) {
                uint below = 0;
                uint chunk = 0;
                while (chunk < 15 && below + chunk_sums[chunk] < rank) {
                    below += chunk_sums[chunk];
                    ++chunk;
                }
                uint digit = 16 * chunk;
                while (digit < 16 * chunk + 15 && below + hist[digit] < rank) {
                    below += hist[digit];
                    ++digit;
                }
                found[0] = digit;
                found[1] = below;
            }
            barrier();
            prefix |= found[0] << shift;
            rank -= found[1];
            mask |= 255u << shift;
            // found and hist are rewritten only after the next iteration's first barrier.
        }
        cut = prefix;
        take_eq = rank;
    }

    // Ascending positions: each tile's exclusive scan of (less, equal) flags, packed in one
    // uint (a tile holds at most WG < 2^16 of each), plus the running totals of earlier tiles.
    uint run_less = 0;
    uint run_eq = 0;
    for (uint base = 0; base < n; base += WG) {
        uint t = base + tid;
        uint key = t < n ? key_at(t) : 0;
        bool less = t < n && key < cut;
        bool eq = t < n && key == cut;
        uint flags = (less ? 1u : 0u) | (eq ? 0x10000u : 0u);
        uint before = subgroupExclusiveAdd(flags);
        uint total = subgroupAdd(flags);
        if (gl_NumSubgroups > 1) {
            if (subgroupElect()) {
                tile_sums[gl_SubgroupID] = total;
            }
            barrier();
            total = 0;
            for (uint s = 0; s < gl_NumSubgroups; ++s) {
                before += s < gl_SubgroupID ? tile_sums[s] : 0;
                total += tile_sums[s];
            }
            barrier();
        }
        uint less_before = run_less + (before & 0xFFFFu);
        uint eq_before = run_eq + (before >> 16);
        if (less || (eq && eq_before < take_eq)) {
            sel_idx[out_base + less_before + min(eq_before, take_eq)] = t;
        }
        run_less += total & 0xFFFFu;
        run_eq += total >> 16;
    }
    if (tid == 0) {
        sel_count[tk * p.n_head_kv + g] = run_less + min(run_eq, take_eq);
    }
}

// The keys of the first KEY_CACHE positions, for the KV head whose first query head is h0.
void fill_keys(uint n) {
    for (uint t = P * gl_LocalInvocationID.x; t < min(n, KEY_CACHE); t += P * WG) {
        vec4 d = vec4(POS_INF);
        for (uint i = 0; i < group; ++i) {
            d = min(d, best[h0 + i] - scores_at(h0 + i, t, n));
        }
        store_keys(t, n, d);
    }
    // With P > 1 the positions an invocation writes are not those it reads later.
    barrier();
}

void main() {
    // With EVERY_KV_HEAD, workgroup x of a token's X takes KV heads x, x + X, ...
    uint g0 = gl_WorkGroupID.x;
    uint g_step = EVERY_KV_HEAD ? gl_NumWorkGroups.x : 1;
    uint g_end = EVERY_KV_HEAD ? p.n_head_kv : g0 + 1;
    uint tk = gl_WorkGroupID.y;
    uint tid = gl_LocalInvocationID.x;
    group = p.n_head / p.n_head_kv;
    h0 = g0 * group;
    at = steps[tk];
    sb = tk * p.n_head * p.n_ctx;
    recent = min(p.recent, p.cap - min(at.budget, p.cap));
    uint n = at.index;

    for (uint h = 0; h < p.n_head; ++h) {
        float m = NEG_INF;
        for (uint t = P * tid; t < n; t += P * WG) {
            vec4 v = scores_at(h, t, n);
            m = max(m, max(max(v.x, v.y), max(v.z, v.w)));
        }
        m = workgroup_max(m);
        if (tid == 0) {
            best[h] = m;
        }
    }
    barrier();

    // k: the mean over heads of the positions within alpha of their head's best. The same
    // pass fills the key cache for the first KV head.
    float mine = 0.0;
    for (uint t = P * tid; t < n; t += P * WG) {
        vec4 d = vec4(POS_INF);
        for (uint h = 0; h < p.n_head; ++h) {
            vec4 v = scores_at(h, t, n);
            mine += dot(vec4(greaterThanEqual(v, vec4(best[h] - p.alpha))), vec4(1.0));
            if (h - h0 < group) {
                d = min(d, best[h] - v);
            }
        }
        store_keys(t, n, d);
    }
    barrier();
    // Counts stay far below 2^24, where float sums are exact.
    uint critical = uint(workgroup_sum(mine));
    uint budget = min(min(min((critical + p.n_head - 1) / p.n_head, at.budget) + recent, n), p.cap);

    for (uint g = g0; g < g_end; g += g_step) {
        h0 = g * group;
        if (g != g0) {
            fill_keys(n);
        }
        select_for(g, tk, n, budget);
    }
}
