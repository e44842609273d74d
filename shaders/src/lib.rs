//! Hearth's compute kernels as SPIR-V, compiled from `glsl/` by build.rs.
//!
//! Every variant is a [`Kernel`] constant named after it (`MATVEC_F16`), and [`ALL`] lists them.
//! [`reflect`] reads back what a kernel binds, so the runtime builds descriptor layouts from the
//! SPIR-V itself and checks push-constant structs against the shader.

mod reflect;

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

/// Looks a variant up by name.
pub fn by_name(name: &str) -> Option<Kernel> {
    ALL.iter().copied().find(|k| k.name == name)
}

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
        assert_eq!(by_name("matvec_f16"), Some(MATVEC_F16));
        assert_eq!(by_name("nope"), None);
    }
}
