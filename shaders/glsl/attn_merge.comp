#version 450
// Combines split decode attention's partials (include/attn_split.glsl) into each token's
// output: the runs' maxima give a common scale, and the rescaled sums and weighted V add up
// in run order, so the result does not depend on scheduling. With p.sinks, each query head's
// sink logit joins the maximum and the sum here, once for all the runs. One invocation per
// (token, query head, vec4 of head_dim).
#include "common.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;
const uint HD4 = HEAD_DIM / 4;
layout(binding = 0) readonly buffer Part { vec4 part[]; };
layout(binding = 1) writeonly buffer O { vec4 o[]; };        // [tokens, n_head * head_dim]
layout(binding = 2) readonly buffer Sinks { float sink_logit[]; };  // [n_head], where p.sinks
layout(push_constant) uniform Push {
    uint tokens;        // tokens t0 .. t0 + tokens of the step; partials count from t0
    uint t0;
    uint n_head;
    uint splits;        // runs per (token, head)
    uint sinks;         // 1: sink_logit holds each query head's sink
} p;

void main() {
    uint i = linear_index();
    if (i >= p.tokens * p.n_head * HD4) {
        return;
    }
    uint d = i % HD4;
    uint th = i / HD4;                                       // token of the dispatch, head
    uint h = th % p.n_head;
    uint t = p.t0 + th / p.n_head;
    uint base = th * p.splits * (HD4 + 1);
    float sink = p.sinks != 0u ? sink_logit[h] : -1e30;
    float m_all = sink;
    for (uint z = 0; z < p.splits; ++z) {
        m_all = max(m_all, part[base + z * (HD4 + 1) + HD4].x);
    }
    float l = p.sinks != 0u ? exp(sink - m_all) : 0.0;
    vec4 acc = vec4(0.0);
    for (uint z = 0; z < p.splits; ++z) {
        uint slot = base + z * (HD4 + 1);
        vec2 ml = part[slot + HD4].xy;
        float w = exp(ml.x - m_all);
        l += ml.y * w;
        acc += part[slot + d] * w;
    }
    o[(t * p.n_head * HEAD_DIM + h * HEAD_DIM) / 4 + d] = acc / l;
}
