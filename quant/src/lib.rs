//! Block quantization formats: quantization, CPU reference dequantization and dot products.
//!
//! A quantized tensor is a sequence of fixed-size blocks; each block stores a small group of
//! values (32, 64 or 256) as integers plus one or two f16 scales.
//!
//! - [`Format`] names Hearth's own formats ([`formats`]), the layouts weights live in on the
//!   device: F32, F16, Q2, Q3, Q3H, Q4, Q4B64, Q5, Q6, Q8, Q4_0, Q5_0, Q5_1, ggml's k-quants
//!   Q2_K to Q6_K, its i-quants (IQ1_S to IQ4_XS), TQ1_0, TQ2_0 and MXFP4. For each it quantizes f32 values ([`Rounding::Search`] by default, or
//!   Inferflow's [`Rounding::MinMax`]; the GGUF types as ggml's reference quantizers),
//!   dequantizes them, and computes a reference dot product with an f32 vector. Each format's
//!   module has a GLSL twin in `shaders/glsl/include/quant/` with the same layout and
//!   dequantization. Q4, Q8, Q4_0, Q5_0 and Q5_1 are GGUF's Q4_1, Q8_0, Q4_0, Q5_0 and Q5_1
//!   byte for byte, the k-quants, i-quants, ternary types and MXFP4 GGUF's own; the others are recorded in GGUF files under
//!   private type ids from [`PRIVATE_ID_BASE`] with [`FORMAT_VERSION`] under the key
//!   [`VERSION_KEY`].
//! - [`BlockType`] names every GGUF type this crate reads, and [`dequantize`] turns them into
//!   f32 exactly as ggml's reference `dequantize_row_*` functions do, operation for operation,
//!   so the results are bit-identical to ggml's. The one type that is not a Hearth format
//!   ([`ggml`]: BF16) is converted at load into one;
//!   [`BlockType::format`] says which types need not be.
//!
//! Sizes are checked, never trusted: a wrong byte or value count, a partial block or a
//! non-finite value to quantize is an [`Error`] that names it.
//!
//! ```
//! use hearth_quant::{dequantize_ggml, formats::q8::BlockQ8, BlockType, Format, Half};
//!
//! // Quantize 64 values to Q4B64 (one block of 36 bytes) and back.
//! let w: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin()).collect();
//! let mut bytes = vec![0u8; Format::Q4B64.bytes_for(w.len()).unwrap()];
//! Format::Q4B64.quantize(&w, &mut bytes)?;
//! let mut back = vec![0.0f32; 64];
//! Format::Q4B64.dequantize(&bytes, &mut back)?;
//! assert!(w.iter().zip(&back).all(|(a, b)| (a - b).abs() < 0.07)); // half a step of 2/15
//! let dot = Format::Q4B64.dot(&bytes, &w)?;
//! assert!((dot - w.iter().zip(&back).map(|(a, b)| a * b).sum::<f32>()).abs() < 1e-4);
//!
//! // One Q8_0 block: scale 0.5 and the quants 0, 1, 2, ..., 31.
//! let block = BlockQ8 { d: Half::from_f32(0.5), qs: std::array::from_fn(|i| i as i8) };
//! let mut out = [0.0f32; 32];
//! dequantize_ggml(8, bytemuck::bytes_of(&block), &mut out)?;
//! assert_eq!(out[3], 1.5);
//!
//! // Sizes are checked, never trusted.
//! assert!(hearth_quant::dequantize(BlockType::Q8_0, &[0; 33], &mut out).is_err());
//! assert!(Format::Q8.dequantize(&[0; 33], &mut out).is_err());
//! # Ok::<(), hearth_quant::Error>(())
//! ```

mod block_type;
mod error;
pub mod formats;
pub mod ggml;
mod kv_type;
#[cfg(test)]
pub(crate) mod testutil;

pub use block_type::BlockType;
pub use error::{Error, Result};
pub use formats::f16::Half;
pub use formats::{Format, Rounding, FORMAT_VERSION, PRIVATE_ID_BASE, VERSION_KEY};
pub use kv_type::{KvType, UnknownKvType, Q8_BLOCK};

/// Dequantizes `out.len()` values of type `ty` from `bytes`.
///
/// `out.len()` must be a whole number of blocks and `bytes` exactly the bytes those blocks take
/// ([`BlockType::bytes_for`]); anything else is an error that names both sizes, and `out` is left
/// untouched. `bytes` may have any alignment, so a slice of a memory-mapped file works as it is.
pub fn dequantize(ty: BlockType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    check_sizes(ty, bytes.len(), out.len())?;
    use BlockType::*;
    match ty {
        F32 => formats::f32::dequantize(bytes, out),
        F16 => formats::f16::dequantize(bytes, out),
        BF16 => ggml::bf16::dequantize(bytes, out),
        Q4_0 => for_each_block(bytes, out, formats::q4_0::BlockQ4_0::dequantize),
        Q4_1 => for_each_block(bytes, out, formats::q4::BlockQ4::dequantize),
        Q5_0 => for_each_block(bytes, out, formats::q5_0::BlockQ5_0::dequantize),
        Q5_1 => for_each_block(bytes, out, formats::q5_1::BlockQ5_1::dequantize),
        Q8_0 => for_each_block(bytes, out, formats::q8::BlockQ8::dequantize),
        Q2_K => for_each_block(bytes, out, formats::q2_k::BlockQ2_K::dequantize),
        Q3_K => for_each_block(bytes, out, formats::q3_k::BlockQ3_K::dequantize),
        Q4_K => for_each_block(bytes, out, formats::q4_k::BlockQ4_K::dequantize),
        Q5_K => for_each_block(bytes, out, formats::q5_k::BlockQ5_K::dequantize),
        Q6_K => for_each_block(bytes, out, formats::q6_k::BlockQ6_K::dequantize),
        IQ2_XXS => for_each_block(bytes, out, formats::iq::iq2::BlockIq2Xxs::dequantize),
        IQ2_XS => for_each_block(bytes, out, formats::iq::iq2::BlockIq2Xs::dequantize),
        IQ2_S => for_each_block(bytes, out, formats::iq::iq2::BlockIq2S::dequantize),
        IQ3_XXS => for_each_block(bytes, out, formats::iq::iq3::BlockIq3Xxs::dequantize),
        IQ3_S => for_each_block(bytes, out, formats::iq::iq3::BlockIq3S::dequantize),
        IQ1_S => for_each_block(bytes, out, formats::iq::iq1::BlockIq1S::dequantize),
        IQ1_M => for_each_block(bytes, out, formats::iq::iq1::BlockIq1M::dequantize),
        IQ4_NL => for_each_block(bytes, out, formats::iq4_nl::BlockIq4Nl::dequantize),
        IQ4_XS => for_each_block(bytes, out, formats::iq4_xs::BlockIq4Xs::dequantize),
        TQ1_0 => for_each_block(bytes, out, formats::ternary::BlockTq1_0::dequantize),
        TQ2_0 => for_each_block(bytes, out, formats::ternary::BlockTq2_0::dequantize),
        MXFP4 => for_each_block(bytes, out, formats::mxfp4::BlockMxfp4::dequantize),
    }
    Ok(())
}

/// [`dequantize`] for a tensor type given by its GGUF id (`ggml_type`); ids this crate cannot
/// dequantize are [`Error::Unsupported`].
pub fn dequantize_ggml(type_id: u32, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let ty = BlockType::from_ggml_id(type_id).ok_or(Error::Unsupported { id: type_id })?;
    dequantize(ty, bytes, out)
}

/// Checks that `values` values of type `ty` are whole blocks that take exactly `bytes` bytes.
fn check_sizes(ty: BlockType, bytes: usize, values: usize) -> Result<()> {
    let Some(expected) = ty.bytes_for(values) else {
        return Err(Error::PartialBlock {
            ty,
            values,
            block_size: ty.block_size(),
        });
    };
    if bytes != expected {
        return Err(Error::ByteCount {
            ty,
            values,
            expected,
            found: bytes,
        });
    }
    Ok(())
}

/// Runs `f` on each block of `bytes` and its `N` output values. The caller has checked the sizes
/// (`bytes` holds exactly `out.len() / N` blocks); blocks are 1-aligned, so the view is always
/// possible.
pub(crate) fn for_each_block<B: bytemuck::Pod, const N: usize>(
    bytes: &[u8],
    out: &mut [f32],
    f: fn(&B, &mut [f32; N]),
) {
    let blocks: &[B] = bytemuck::cast_slice(bytes);
    for (block, out) in blocks.iter().zip(out.chunks_exact_mut(N)) {
        if let Ok(out) = <&mut [f32; N]>::try_from(out) {
            f(block, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_round_trips_its_ggml_id() {
        for ty in BlockType::ALL {
            let id = ty.ggml_id().unwrap();
            assert_eq!(BlockType::from_ggml_id(id), Some(ty));
        }
        assert_eq!(BlockType::from_ggml_id(12), Some(BlockType::Q4_K));
        assert_eq!(BlockType::from_ggml_id(30), Some(BlockType::BF16));
        assert_eq!(BlockType::Q6_K.name(), "Q6_K");
        assert_eq!(BlockType::Q6_K.to_string(), "Q6_K");
    }

    #[test]
    fn geometry_matches_ggml() {
        // (type, values per block, bytes per block) from ggml's type traits.
        let table = [
            (BlockType::F32, 1, 4),
            (BlockType::F16, 1, 2),
            (BlockType::BF16, 1, 2),
            (BlockType::Q4_0, 32, 18),
            (BlockType::Q4_1, 32, 20),
            (BlockType::Q5_0, 32, 22),
            (BlockType::Q5_1, 32, 24),
            (BlockType::Q8_0, 32, 34),
            (BlockType::Q2_K, 256, 84),
            (BlockType::Q3_K, 256, 110),
            (BlockType::Q4_K, 256, 144),
            (BlockType::Q5_K, 256, 176),
            (BlockType::Q6_K, 256, 210),
            (BlockType::IQ2_XXS, 256, 66),
            (BlockType::IQ2_XS, 256, 74),
            (BlockType::IQ3_XXS, 256, 98),
            (BlockType::IQ1_S, 256, 50),
            (BlockType::IQ3_S, 256, 110),
            (BlockType::IQ2_S, 256, 82),
            (BlockType::IQ1_M, 256, 56),
            (BlockType::IQ4_NL, 32, 18),
            (BlockType::IQ4_XS, 256, 136),
            (BlockType::TQ1_0, 256, 54),
            (BlockType::TQ2_0, 256, 66),
            (BlockType::MXFP4, 32, 17),
        ];
        assert_eq!(table.len(), BlockType::ALL.len());
        for (ty, size, bytes) in table {
            assert_eq!((ty.block_size(), ty.block_bytes()), (size, bytes), "{ty}");
        }
        assert_eq!(BlockType::Q4_K.bytes_for(512), Some(288));
        assert_eq!(BlockType::Q4_K.bytes_for(100), None);
        assert_eq!(BlockType::F32.bytes_for(usize::MAX), None);
    }

    #[test]
    fn unknown_ids_are_unsupported() {
        let mut out = [0.0; 32];
        for id in [4, 9, 15, 31, 1000] {
            let err = dequantize_ggml(id, &[0; 36], &mut out).unwrap_err();
            assert_eq!(err, Error::Unsupported { id });
            assert!(err.to_string().contains(&id.to_string()));
        }
    }

    #[test]
    fn byte_count_mismatch_names_both_sizes() {
        let mut out = [7.0; 64];
        let err = dequantize(BlockType::Q4_1, &[0; 39], &mut out).unwrap_err();
        assert_eq!(
            err,
            Error::ByteCount {
                ty: BlockType::Q4_1,
                values: 64,
                expected: 40,
                found: 39
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains("Q4_1") && msg.contains("40") && msg.contains("39"),
            "{msg}"
        );
        assert_eq!(out, [7.0; 64], "output untouched on error");

        // Too many bytes is as wrong as too few.
        let count = |ty, values, expected, found| {
            Err(Error::ByteCount {
                ty,
                values,
                expected,
                found,
            })
        };
        let f32s = dequantize(BlockType::F32, &[0; 12], &mut out[..2]);
        assert_eq!(f32s, count(BlockType::F32, 2, 8, 12));
        let q6_k = dequantize(BlockType::Q6_K, &[0; 211], &mut [0.0; 256]);
        assert_eq!(q6_k, count(BlockType::Q6_K, 256, 210, 211));
        let f16s = dequantize(BlockType::F16, &[0; 3], &mut [0.0; 1]);
        assert_eq!(f16s, count(BlockType::F16, 1, 2, 3));
        assert_eq!(out, [7.0; 64], "output untouched on error");
    }

    #[test]
    fn partial_blocks_are_rejected() {
        let mut out = [0.0; 33];
        let err = dequantize(BlockType::Q8_0, &[0; 34], &mut out).unwrap_err();
        assert_eq!(
            err,
            Error::PartialBlock {
                ty: BlockType::Q8_0,
                values: 33,
                block_size: 32
            }
        );
        assert!(err.to_string().contains("33"));
        let err = dequantize(BlockType::Q2_K, &[0; 84], &mut [0.0; 255]).unwrap_err();
        assert!(matches!(
            err,
            Error::PartialBlock {
                block_size: 256,
                ..
            }
        ));
    }

    #[test]
    fn empty_tensors_are_fine() {
        for ty in BlockType::ALL {
            assert_eq!(dequantize(ty, &[], &mut []), Ok(()), "{ty}");
            // No values take no bytes: one block's bytes are too many.
            let block = vec![0u8; ty.block_bytes()];
            assert_eq!(
                dequantize(ty, &block, &mut []),
                Err(Error::ByteCount {
                    ty,
                    values: 0,
                    expected: 0,
                    found: ty.block_bytes()
                }),
                "{ty}"
            );
        }
    }

    #[test]
    fn unaligned_bytes_are_fine() {
        // Every format views bytes in place; an odd start address must not matter.
        let block = formats::q8::BlockQ8 {
            d: Half::from_f32(0.25),
            qs: [-4; 32],
        };
        let mut storage = [0u8; 35];
        storage[1..].copy_from_slice(bytemuck::bytes_of(&block));
        let mut out = [0.0; 32];
        dequantize(BlockType::Q8_0, &storage[1..], &mut out).unwrap();
        assert_eq!(out, [-1.0; 32]);

        let mut storage = [0u8; 9];
        storage[1..].copy_from_slice(bytemuck::cast_slice(&[1.5f32, -2.0]));
        let mut out = [0.0; 2];
        dequantize(BlockType::F32, &storage[1..], &mut out).unwrap();
        assert_eq!(out, [1.5, -2.0]);
    }

    #[test]
    fn multiple_blocks_land_in_order() {
        let blocks: [formats::q8::BlockQ8; 3] = std::array::from_fn(|i| formats::q8::BlockQ8 {
            d: Half::from_f32(i as f32 + 1.0),
            qs: [1; 32],
        });
        let out = testutil::dequantize_all(BlockType::Q8_0, bytemuck::cast_slice(&blocks));
        assert_eq!(out.len(), 96);
        assert_eq!(
            (out[0], out[31], out[32], out[63], out[64], out[95]),
            (1., 1., 2., 2., 3., 3.)
        );
    }
}
