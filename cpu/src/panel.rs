//! Weight rows unpacked into a panel for products with many tokens (a prompt's): a few rows
//! ([`Panel::lanes`], one per SIMD lane) with their levels interleaved four at a time, so
//! that one integer dot-product instruction takes four values of every row against the same
//! four values of one token, broadcast. A lane's 32-bit sum is then one row's, with no
//! horizontal reduction, and each group's scales apply to all the rows in one multiply-add.
//!
//! The token's bytes are the unsigned operand (`q + 128`, [`crate::act::ActQ8::u`]) and the
//! levels the signed one, so every format's levels (-128..=127) fit; the `128 * sum(level)`
//! this adds is subtracted by starting each group's sum at [`Panel::bias`].
//!
//! Unpacking costs about as much as one token's products, so a panel pays from a handful of
//! tokens on; decode reads the packed rows directly (`dot`).

use hearth_quant::Format;

use crate::act::ActRow;
use crate::interleave::{self, GROUP_SUPER_BYTES};
use crate::levels::{group_width, has_base, RowLevels, Unpack, GROUP};

/// Values a step of the products takes from each row: one 32-bit lane's bytes.
pub const STEP: usize = 4;

/// Up to [`lanes`](Self::lanes) weight rows, unpacked and interleaved. Lanes past
/// [`rows`](Self::rows) hold zeros.
#[derive(Clone, Debug, Default)]
pub struct Panel {
    pub lanes: usize,
    pub rows: usize,
    pub cols: usize,
    /// Values that share one `d` and `m` (16 or 32; see [`group_width`]).
    pub group: usize,
    /// Whether any `m` is non-zero.
    pub has_base: bool,
    /// [cols / 4][lanes][4]
    pub levels: Vec<i8>,
    /// [cols / group][lanes]
    pub d: Vec<f32>,
    /// [cols / group][lanes]
    pub m: Vec<f32>,
    /// [cols / group][lanes]: `-128 * sum(level)` over the group.
    pub bias: Vec<i32>,
}

impl Panel {
    /// Unpacks `rows` (whole rows of `format`, `cols` values each, at most `lanes` of them)
    /// into this panel, reusing its memory and `scratch`'s.
    pub fn fill(
        &mut self,
        lanes: usize,
        format: Format,
        unpack: Unpack,
        rows: &[u8],
        cols: usize,
        scratch: &mut RowLevels,
    ) {
        let row_bytes = format.bytes_for(cols).unwrap_or(0).max(1);
        let count = (rows.len() / row_bytes).min(lanes);
        let group = group_width(format);
        self.shape(lanes, format, count, cols);
        for (lane, row) in rows.chunks_exact(row_bytes).take(count).enumerate() {
            scratch.unpack(format, unpack, row, cols);
            for (s, four) in scratch.levels.chunks_exact(STEP).enumerate() {
                let at = (s * lanes + lane) * STEP;
                self.levels[at..at + STEP].copy_from_slice(four);
            }
            for (g, levels) in scratch.levels.chunks_exact(group).enumerate() {
                // A group's 16-value entries are equal (`group_width`): take the first.
                let entry = g * group / GROUP;
                self.d[g * lanes + lane] = scratch.d[entry];
                self.m[g * lanes + lane] = scratch.m[entry];
                let sum: i32 = levels.iter().map(|&l| i32::from(l)).sum();
                self.bias[g * lanes + lane] = -128 * sum;
            }
        }
    }

    /// Sizes this for `rows` rows of `format`, zeroed.
    fn shape(&mut self, lanes: usize, format: Format, rows: usize, cols: usize) {
        let group = group_width(format);
        let groups = cols / group;
        self.lanes = lanes;
        self.rows = rows;
        self.cols = cols;
        self.group = group;
        self.has_base = has_base(format);
        self.levels.clear();
        self.levels.resize(cols * lanes, 0);
        for v in [&mut self.d, &mut self.m] {
            v.clear();
            v.resize(groups * lanes, 0.0);
        }
        self.bias.clear();
        self.bias.resize(groups * lanes, 0);
    }

    /// Fills this from Q4_K rows interleaved in groups (`crate::interleave`): `groups` holds
    /// whole groups of `cols`-value rows, of which the first `rows` (at most `lanes`) are
    /// taken. The same panel as [`fill`](Self::fill) of the rows in the file's packing, with
    /// no unpacking: a group's four levels of a row are already side by side.
    pub fn fill_interleaved(&mut self, lanes: usize, groups: &[u8], rows: usize, cols: usize) {
        let group_bytes = interleave::bytes(interleave::ROWS, cols);
        let count = rows
            .min(lanes)
            .min(groups.len() / group_bytes * interleave::ROWS);
        self.shape(lanes, Format::Q4_K, count, cols);
        for lane in 0..count {
            let (g, r) = (lane / interleave::ROWS, lane % interleave::ROWS);
            let group = &groups[g * group_bytes..][..group_bytes];
            for (s, sup) in group.chunks_exact(GROUP_SUPER_BYTES).enumerate() {
                let half = |at: usize| half::f16::from_le_bytes([sup[at], sup[at + 1]]).to_f32();
                let (d, dmin) = (half(2 * r), half(16 + 2 * r));
                for j in 0..8 {
                    // Each 32 values are one group: as `levels::q4_k` unpacks them.
                    let at = (8 * s + j) * lanes + lane;
                    self.d[at] = d * f32::from(sup[32 + 8 * j + r]);
                    self.m[at] = -(dmin * f32::from(sup[96 + 8 * j + r]));
                    let mut sum = 0i32;
                    for c in 0..4 {
                        let q = &sup[160 + 128 * j + 32 * c + 4 * r..][..4];
                        // Steps of four values: 8 j + c for the low nibbles (values 4 c..),
                        // 8 j + 4 + c for the high ones (values 16 + 4 c..), of super-block s.
                        for (step, shift) in [(8 * j + c, 0), (8 * j + 4 + c, 4)] {
                            let at = ((64 * s + step) * lanes + lane) * STEP;
                            for (b, &q) in q.iter().enumerate() {
                                let level = (q >> shift) & 0x0F;
                                self.levels[at + b] = level as i8;
                                sum += i32::from(level);
                            }
                        }
                    }
                    self.bias[at] = -128 * sum;
                }
            }
        }
    }

    /// Whether the vectors' lengths agree with the shape (what the kernels index by).
    pub fn is_consistent(&self) -> bool {
        let groups = self.cols / self.group.max(1);
        self.group > 0
            && self.cols.is_multiple_of(self.group)
            && self.group.is_multiple_of(STEP)
            && self.levels.len() == self.cols * self.lanes
            && [self.d.len(), self.m.len(), self.bias.len()] == [groups * self.lanes; 3]
    }

    /// One token's products with every lane, in plain Rust: the portable kernel and the
    /// oracle of the SIMD ones (which differ only by float summation order).
    pub fn dot_portable(&self, x: ActRow, out: &mut [f32]) {
        let lanes = self.lanes;
        out[..lanes].fill(0.0);
        for g in 0..self.cols / self.group {
            for (lane, y) in out[..lanes].iter_mut().enumerate() {
                let mut sum = self.bias[g * lanes + lane];
                for s in g * self.group / STEP..(g + 1) * self.group / STEP {
                    let w = &self.levels[(s * lanes + lane) * STEP..][..STEP];
                    let u = &x.u[s * STEP..][..STEP];
                    for (&w, &u) in w.iter().zip(u) {
                        sum += i32::from(w) * i32::from(u);
                    }
                }
                let first = g * self.group;
                let scale = self.d[g * lanes + lane] * x.d[first / 32];
                *y += sum as f32 * scale;
                if self.has_base {
                    let xs: f32 = x.sums[first / GROUP..(first + self.group) / GROUP]
                        .iter()
                        .sum();
                    *y += self.m[g * lanes + lane] * xs;
                }
            }
        }
    }
}
