//! Where a model runs, as users name it (`--device cpu`, `--device vulkan:1`), and the default:
//! the best Vulkan device, unless the only Vulkan devices are CPUs (Mesa's lavapipe) or there
//! are none, where the native CPU executor runs the model several times faster.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::{BackendKind, EngineOptions};
use hearth_cpu::Isa;
use hearth_kernels::vk::{list_devices, DeviceInfo, DeviceKind};

/// An executor and, for Vulkan, which device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The native CPU executor.
    Cpu,
    /// A Vulkan device by its index in `hearth devices`; `None`: the best one.
    Vulkan(Option<usize>),
}

impl Placement {
    /// [`Placement::Cpu`] where no Vulkan device is a GPU, else the best Vulkan device.
    pub fn default_for_host() -> Self {
        Self::default_among(&list_devices().unwrap_or_default())
    }

    /// [`default_for_host`](Self::default_for_host) given the Vulkan devices found.
    pub fn default_among(devices: &[DeviceInfo]) -> Self {
        match devices.iter().any(|d| d.kind != DeviceKind::Cpu) {
            true => Placement::Vulkan(None),
            false => Placement::Cpu,
        }
    }

    /// Sets `options` to run here.
    pub fn apply(self, options: &mut EngineOptions) {
        match self {
            Placement::Cpu => options.backend = BackendKind::Cpu,
            Placement::Vulkan(index) => {
                options.backend = BackendKind::Vulkan;
                options.device = index;
            }
        }
    }
}

impl FromStr for Placement {
    type Err = String;

    /// `cpu`, `vulkan`, `vulkan:N`, or a bare Vulkan index `N`.
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let index = |n: &str| {
            n.parse::<usize>()
                .map_err(|_| format!("{s:?}: expected cpu, vulkan or vulkan:N (N an index)"))
        };
        match s.to_ascii_lowercase().as_str() {
            "cpu" => Ok(Placement::Cpu),
            "vulkan" | "gpu" => Ok(Placement::Vulkan(None)),
            lower => match lower.strip_prefix("vulkan:") {
                Some(n) => Ok(Placement::Vulkan(Some(index(n)?))),
                None => Ok(Placement::Vulkan(Some(index(lower)?))),
            },
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Cpu => f.write_str("cpu"),
            Placement::Vulkan(None) => f.write_str("vulkan"),
            Placement::Vulkan(Some(i)) => write!(f, "vulkan:{i}"),
        }
    }
}

/// The native CPU executor as `hearth devices` reports it.
#[derive(Clone, Debug, Serialize)]
pub struct CpuExecutorInfo {
    /// The instruction set its kernels use: the best the CPU has, or the one asked for.
    pub isa: String,
    /// Every instruction set the CPU has kernels for, lowest first.
    pub available: Vec<String>,
    /// Worker threads by default.
    pub threads: usize,
}

impl CpuExecutorInfo {
    /// The CPU executor here, with the instruction set `isa` where one is asked for.
    pub fn detect(isa: Option<Isa>) -> Self {
        Self {
            isa: isa.unwrap_or_else(Isa::best).to_string(),
            available: Isa::available().iter().map(Isa::to_string).collect(),
            threads: hearth_cpu::default_threads(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print_back() {
        for (text, want) in [
            ("cpu", Placement::Cpu),
            ("CPU", Placement::Cpu),
            ("vulkan", Placement::Vulkan(None)),
            ("vulkan:1", Placement::Vulkan(Some(1))),
            ("0", Placement::Vulkan(Some(0))),
        ] {
            assert_eq!(text.parse::<Placement>().unwrap(), want, "{text}");
        }
        assert_eq!(Placement::Vulkan(Some(2)).to_string(), "vulkan:2");
        let err = "vulkan:x".parse::<Placement>().unwrap_err();
        assert!(err.contains("vulkan:x"), "{err}");
        assert!("tpu".parse::<Placement>().is_err());
    }
}
