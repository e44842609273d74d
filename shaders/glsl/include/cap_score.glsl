// A score soft-capped as the push block's `softcap` asks (0: as it is), for the attention
// kernels (attn_push.glsl) and InfiniGen's (ig_push.glsl) alike. The clamp keeps tanh's
// exponentials finite on drivers that build it from them (tanh(15) is 1 in f32).
float cap_score(float s) {
    return p.softcap > 0.0 ? p.softcap * tanh(clamp(s / p.softcap, -15.0, 15.0)) : s;
}
