// Weight loads of 8 or 16 bytes for the lane-per-row matrix-vector product on CPU devices with
// 64-bit shader integers and buffer device addresses (variants `matvec_<format>_wide`,
// WIDE_LOADS): a load whose address differs per lane costs such a device a scalar load per
// lane, whatever its width, so fewer and wider loads cost less, and where the host allows,
// loads through an address cost less than from a bound buffer (address.glsl). The including
// kernel defines W_ADDR, the weights' address. Buffers are whole 8-byte words, so a block's
// last load stays inside.
#include "address.glsl"
layout(binding = W_BINDING) readonly buffer Weights64 { uint64_t w64[]; };
layout(binding = W_BINDING) readonly buffer Weights128 { u64vec2 w128[]; };

// The N words from word `at` on (a block's words), from the N / 2 + 1 8-byte words that cover
// them: the first starts in the high half of the first load when `at` is odd.
#define WIDE_WORDS(at, N, out_words)                                              \
    {                                                                             \
        uvec2 a[N / 2 + 1];                                                       \
        for (uint k = 0; k < N / 2 + 1; ++k) {                                    \
            a[k] = WORDS64_AT(W_ADDR, w64, (at) / 2 + k);                           \
        }                                                                         \
        bool odd = ((at) & 1u) != 0u;                                             \
        for (uint i = 0; i < N; ++i) {                                            \
            uint lo = (i & 1u) == 0u ? a[i / 2].x : a[i / 2].y;                   \
            uint hi = (i & 1u) == 0u ? a[i / 2].y : a[i / 2 + 1].x;               \
            out_words[i] = odd ? hi : lo;                                         \
        }                                                                         \
    }

// The 4 N words of the N 16-byte words from 16-byte word `at` on, for the formats whose blocks
// are whole 16-byte words.
#define WIDE_UVEC4S(at, N, out_words)                                             \
    for (uint i = 0; i < N; ++i) {                                                \
        uvec4 v = WORDS128_AT(W_ADDR, w128, (at) + i);                            \
        out_words[4 * i] = v.x;                                                   \
        out_words[4 * i + 1] = v.y;                                               \
        out_words[4 * i + 2] = v.z;                                               \
        out_words[4 * i + 3] = v.w;                                               \
    }
