// The 16 non-linear levels IQ4_NL and IQ4_XS index with 4 bits (ggml's kvalues_iq4nl),
// denser near zero. Mirrors quant/src/formats/iq4_nl.rs's LEVELS.
#ifndef QUANT_IQ4_LEVELS
#define QUANT_IQ4_LEVELS

const float IQ4_LEVELS[16] = float[16](
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
    1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

// The levels of four 4-bit indices.
vec4 iq4_levels4(uvec4 q) {
    return vec4(IQ4_LEVELS[q.x], IQ4_LEVELS[q.y], IQ4_LEVELS[q.z], IQ4_LEVELS[q.w]);
}

#endif
