// A format's levels as packed signed bytes, for the products with integer dot products over
// 8-bit activations (matvec_idot.comp):
//   block_ilevels8(blk, j, lo, hi)   the levels block_levels8 gives for values 8j .. 8j + 8,
//                         four to a word (value 8j + i in byte i of lo, 8j + 4 + i in byte i
//                         of hi), each a signed byte: every quantized format's levels lie in
//                         -127..=127
// A format that can take them from its bytes defines HAS_ILEVELS and its own; the others
// pack block_levels8's floats here. Included after format.glsl.
#ifndef HAS_ILEVELS
uint pack_levels4(vec4 v) {
    uvec4 b = uvec4(ivec4(v)) & 0xFFu;
    return b.x | (b.y << 8) | (b.z << 16) | (b.w << 24);
}

void block_ilevels8(Block blk, uint j, out uint lo, out uint hi) {
    vec4 a;
    vec4 b;
    block_levels8(blk, j, a, b);
    lo = pack_levels4(a);
    hi = pack_levels4(b);
}
#endif
