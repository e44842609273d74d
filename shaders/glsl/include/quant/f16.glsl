// IEEE half weights, two per 32-bit word (little-endian: element 2j in the low half).
// Read as words so no 16-bit storage feature is needed. The including kernel defines W_BINDING.
layout(binding = W_BINDING) readonly buffer Weights { uint w_words[]; };

float weight_at(uint i) {
    return unpackHalf2x16(w_words[i >> 1])[i & 1];
}

vec4 weight4_at(uint i) {
    if ((i & 1) == 0) {
        return vec4(unpackHalf2x16(w_words[i >> 1]), unpackHalf2x16(w_words[(i >> 1) + 1]));
    }
    return vec4(weight_at(i), weight_at(i + 1), weight_at(i + 2), weight_at(i + 3));
}
