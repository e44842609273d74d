//! Which SIMD instruction set the kernels use: the best the running CPU reports, or a lower
//! one a frontend names (`--isa`, `HEARTH_CPU_ISA`: for tests and comparisons). An
//! instruction set is only ever used after the CPU has reported it, so a binary built for any
//! x86-64 or ARM64 runs on every such CPU, with the portable kernels where it has nothing
//! better.

use std::fmt;

use hearth_model::{Error, Result};

/// The option that names an instruction set, in errors.
const FIELD: &str = "isa";

/// An instruction set the kernels are written for, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Plain Rust, which the compiler vectorizes for the build's baseline.
    Portable,
    /// x86-64 AVX2 with FMA and F16C: 32 int8 products a `vpmaddubsw`.
    Avx2,
    /// x86-64 AVX-VNNI (256-bit `vpdpbusd`, Alder Lake and later).
    AvxVnni,
    /// x86-64 AVX-512 with VNNI (512-bit `vpdpbusd`, Ice Lake, Zen 4 and later).
    Avx512Vnni,
    /// ARM64 NEON with the dot-product extension (`sdot`).
    NeonDot,
}

impl Isa {
    /// Every instruction set, lowest first.
    pub const ALL: [Isa; 5] = [
        Isa::Portable,
        Isa::Avx2,
        Isa::AvxVnni,
        Isa::Avx512Vnni,
        Isa::NeonDot,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avx-vnni",
            Isa::Avx512Vnni => "avx512-vnni",
            Isa::NeonDot => "neon-dotprod",
        }
    }

    /// Whether the running CPU reports everything this instruction set's kernels use.
    pub fn supported(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::AvxVnni => Isa::Avx2.supported() && is_x86_feature_detected!("avxvnni"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => {
                Isa::Avx2.supported()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDot => std::arch::is_aarch64_feature_detected!("dotprod"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Whether this build has kernels of its own for the instruction set (the x86-64 sets on
    /// x86-64, NEON's on ARM64).
    pub const fn has_kernels(self) -> bool {
        match self {
            Isa::Portable => true,
            Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => cfg!(target_arch = "x86_64"),
            Isa::NeonDot => cfg!(target_arch = "aarch64"),
        }
    }

    /// The instruction sets the running CPU supports and this build has kernels for, lowest
    /// first.
    pub fn available() -> Vec<Isa> {
        Isa::ALL
            .into_iter()
            .filter(|i| i.supported() && i.has_kernels())
            .collect()
    }

    /// The best instruction set the running CPU supports.
    pub fn best() -> Isa {
        Isa::available().into_iter().max().unwrap_or(Isa::Portable)
    }

    /// The instruction set called `name`, if the running CPU supports it.
    pub fn named(name: &str) -> Result<Isa> {
        let names = || {
            Isa::available()
                .iter()
                .map(|i| i.name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let isa = Isa::ALL
            .into_iter()
            .find(|i| i.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                Error::options(
                    FIELD,
                    format!("no instruction set {name:?}; this CPU runs {}", names()),
                )
            })?;
        if !isa.supported() {
            return Err(Error::options(
                FIELD,
                format!("this CPU does not report {name}; it runs {}", names()),
            ));
        }
        if !isa.has_kernels() {
            return Err(Error::options(
                FIELD,
                format!("this build has no {name} kernels; it runs {}", names()),
            ));
        }
        Ok(isa)
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn portable_is_always_there_and_names_round_trip() {
        assert!(Isa::available().contains(&Isa::Portable));
        for isa in Isa::available() {
            assert_eq!(Isa::named(isa.name()).unwrap(), isa);
        }
        assert!(Isa::best() >= Isa::Portable);
    }

    /// Where a test run names the instruction set the machine must run (scripts/arm64-test
    /// does, on an emulated CPU), it is there with its kernels.
    #[test]
    fn the_expected_set_is_available() {
        if let Ok(name) = std::env::var("HEARTH_TEST_EXPECT_ISA") {
            let isa = Isa::named(&name).unwrap();
            assert_eq!(Isa::best(), isa, "{:?}", Isa::available());
        }
    }

    #[test]
    fn unknown_or_missing_sets_are_refused_by_name() {
        let err = Isa::named("sse9").unwrap_err().to_string();
        assert!(err.contains("sse9") && err.contains("portable"), "{err}");
        if let Some(missing) = Isa::ALL.into_iter().find(|i| !Isa::available().contains(i)) {
            let err = Isa::named(missing.name()).unwrap_err().to_string();
            assert!(err.contains(missing.name()), "{err}");
        }
    }
}
