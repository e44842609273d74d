//! The shapes a device's kernels may take in place of their defaults, as a tuner chose them
//! (`crate::tune`): what the device keeps and each kernel reads when it is built.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::WeightFormat;

/// The knobs of a matrix-vector product's shape (see `matvec::Shape`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MatvecVariant {
    /// Units per workgroup: subgroups on GPUs (lanes on CPU devices, not tuned).
    pub units: u32,
    /// 8-value chunks a GPU lane loads per turn.
    pub lane_chunks: u32,
    /// Rows a CPU device's lane shares each block of x with; in the integer-dot product, rows
    /// a subgroup computes together, sharing each load of x.
    pub rb: u32,
    /// The product over x rounded to 8-bit blocks with integer dot products
    /// (`matvec_idot.comp`, subgroup per row) rather than over f32 x. Absent in tunings kept
    /// before it existed: false.
    #[serde(default)]
    pub idot: bool,
}

/// What a device uses: a variant per format and tokens per pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Choices {
    matvec: BTreeMap<(String, u32), MatvecVariant>,
}

impl Choices {
    /// `format`'s products over `tokens` take `variant`.
    pub fn set_matvec(&mut self, format: &str, tokens: u32, variant: MatvecVariant) {
        self.matvec.insert((format.to_string(), tokens), variant);
    }

    pub fn matvec(&self, format: WeightFormat, tokens: u32) -> Option<MatvecVariant> {
        self.matvec
            .get(&(format.name().to_string(), tokens))
            .copied()
    }

    pub fn is_empty(&self) -> bool {
        self.matvec.is_empty()
    }

    /// (format, tokens, variant) for reports.
    pub fn list(&self) -> Vec<(String, u32, MatvecVariant)> {
        self.matvec
            .iter()
            .map(|((f, t), v)| (f.clone(), *t, *v))
            .collect()
    }
}
