//! Hearth's compute kernels as SPIR-V, compiled from `glsl/` by build.rs.
//!
//! Every variant is a [`Kernel`] constant named after it (`MATVEC_F16`), and [`ALL`] lists them.
//! The kernels that read weights are compiled once per `hearth_quant::Format`;
//! [`format_kernels`] gives a format's as a [`FormatKernels`], one field per kernel kind.
//! The kernels that read or write the KV cache are compiled once per [`KvType`];
//! [`kv_kernels`] gives a type's as a [`KvKernels`].
//! [`reflect`] reads back what a kernel binds, so the runtime builds descriptor layouts from the
//! SPIR-V itself and checks push-constant structs against the shader.

mod reflect;

pub use hearth_quant::{KvType, UnknownKvType, Q8_BLOCK};
pub use reflect::{reflect, ReflectError, Reflection};

/// One compiled kernel variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// Variant name, e.g. `matvec_f16`.
    pub name: &'static str,
    /// SPIR-V words, entry point `main`.
    pub spirv: &'static [u32],
}

include!(concat!(env!("OUT_DIR"), "/kernels.rs"));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_is_valid_spirv_with_bindings() {
        assert!(!ALL.is_empty());
        for k in ALL {
            assert_eq!(k.spirv[0], 0x0723_0203, "{} is not SPIR-V", k.name);
            let r = reflect(k.spirv).unwrap_or_else(|e| panic!("{}: {e}", k.name));
            assert!(!r.bindings.is_empty(), "{} binds no buffers", k.name);
            assert!(r.push_constant_size > 0, "{} has no push constants", k.name);
        }
    }

    #[test]
    fn every_format_has_its_kernels() {
        use hearth_quant::Format;
        for format in Format::ALL {
            let (k, m) = (format_kernels(format), format.module());
            assert_eq!(k.matvec.name, format!("matvec_{m}"));
            assert_eq!(k.matvec_wide.name, format!("matvec_{m}_wide"));
            assert_eq!(k.matmul.name, format!("matmul_{m}"));
            assert_eq!(k.embed.name, format!("embed_{m}"));
            assert_eq!(k.dequant.name, format!("dequant_{m}"));
        }
        for format in Format::ALL {
            let idot = format_kernels(format).matvec_idot;
            match format {
                Format::F32 | Format::F16 => assert_eq!(idot, None),
                _ => assert_eq!(
                    idot.map(|k| k.name.to_string()),
                    Some(format!("matvec_idot_{}", format.module()))
                ),
            }
        }
        assert_eq!(format_kernels(Format::F16).matvec, MATVEC_F16);
        assert_eq!(format_kernels(Format::Q4B64).matvec_wide, MATVEC_Q4B64_WIDE);
    }

    #[test]
    fn every_kv_type_has_its_kernels() {
        for kv in KvType::ALL {
            let (k, n) = (kv_kernels(kv), kv.name());
            assert_eq!(k.rope_kv.name, format!("rope_kv_{n}"));
            assert_eq!(k.attn_decode_wide.name, format!("attn_decode_{n}_wide"));
            assert_eq!(k.h2o_mass.name, format!("h2o_mass_{n}"));
        }
        assert_eq!(kv_kernels(KvType::Q8).kv_gather, KV_GATHER_Q8);
    }
}
