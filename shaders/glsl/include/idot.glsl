// The signed dot product of two words of four packed bytes, as an int: SPIR-V's OpSDot with
// the 4x8-bit packed format (SPV_KHR_integer_dot_product), what GL_EXT_integer_dot_product
// calls dotPacked4x8EXT. Declared through GL_EXT_spirv_intrinsics because the glslang that
// builds the kernels (Debian 12's 12.0) predates the GLSL extension. The device must have
// shaderIntegerDotProduct enabled (kernels/src/vk/device.rs).
#extension GL_EXT_spirv_intrinsics : require

// 6019 DotProduct, 6018 DotProductInput4x8BitPacked; 4450 OpSDot; the literal is the packed
// vector format, 0 PackedVectorFormat4x8Bit.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018],
                  id = 4450)
int sdot_packed(int a, int b, spirv_literal int packed_format);

int dot4x8(uint a, uint b) {
    return sdot_packed(int(a), int(b), 0);
}
