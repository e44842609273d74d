//! Q4_K rows interleaved eight at a time, the layout decode reads them in on x86-64: one
//! 32-bit lane of a 256-bit register per row, so that one integer dot-product instruction
//! takes four values of each of eight rows against the same four activations, broadcast.
//! Each lane's sum is then one row's, with no horizontal reduction per row, and a sub-block's
//! scales apply to all eight rows in one multiply-add.
//!
//! Read in the file's layout, a decode step's product spends most of its instructions on
//! each row alone (a reduction, a scale permuted out per 32 values, the 6-bit scales
//! decoded per row); interleaved, those costs are shared by eight rows. llama.cpp repacks
//! Q4_K for the same reason.
//!
//! A group of eight rows keeps, per super-block of 256 values, [`GROUP_SUPER_BYTES`]:
//!
//! | bytes      | what                                                        |
//! |------------|-------------------------------------------------------------|
//! | 0..16      | the eight rows' `d` (f16)                                   |
//! | 16..32     | their `dmin` (f16)                                          |
//! | 32..96     | sub-block `j`'s eight scales (6-bit, a byte each) at `8 j`  |
//! | 96..160    | sub-block `j`'s eight mins at `8 j`                         |
//! | 160..1184  | sub-block `j`'s levels at `128 j`: four chunks of 32 bytes  |
//!
//! In chunk `c` of sub-block `j`, byte `4 r + b` holds row `r`'s value `32 j + 4 c + b` in its
//! low nibble and value `32 j + 16 + 4 c + b` in its high nibble. The scales are kept a byte
//! each rather than in the file's 12-byte packing: 2.8% more bytes, and no decoding per row.

use hearth_quant::formats::kquant::{pack_scale_min_k4, scale_min_k4, K_SCALE_SIZE};
use hearth_quant::Format;
use rayon::prelude::*;

/// Rows interleaved together.
pub const ROWS: usize = 8;

/// Values of a super-block.
const SUPER: usize = 256;

/// Bytes of one Q4_K super-block in the file: `d`, `dmin`, 12 bytes of scales, 128 of levels.
const FILE_SUPER_BYTES: usize = 144;

/// Bytes of one interleaved group's super-block (eight rows).
pub const GROUP_SUPER_BYTES: usize = 32 + 128 + ROWS * 128;

/// Whether a matrix of `format` and this shape can be interleaved (Q4_K, whole groups).
pub fn fits(format: Format, rows: usize, cols: usize) -> bool {
    format == Format::Q4_K && rows > 0 && rows % ROWS == 0 && cols > 0 && cols % SUPER == 0
}

/// Bytes an interleaved matrix of `rows` by `cols` takes.
pub fn bytes(rows: usize, cols: usize) -> usize {
    rows / ROWS * cols / SUPER * GROUP_SUPER_BYTES
}

/// `data`, whole Q4_K rows of `cols` values ([`fits`]), interleaved.
pub fn q4_k(data: &[u8], cols: usize) -> Vec<u8> {
    let supers = cols / SUPER;
    let row_bytes = supers * FILE_SUPER_BYTES;
    let rows = data.len() / row_bytes;
    let mut out = vec![0u8; bytes(rows, cols)];
    let group_bytes = supers * GROUP_SUPER_BYTES;
    // Groups in parallel on the caller's pool: a 1B model's matrices are gigabytes of nibbles.
    out.par_chunks_exact_mut(group_bytes)
        .enumerate()
        .for_each(|(g, group)| {
            for (r, row) in data[g * ROWS * row_bytes..][..ROWS * row_bytes]
                .chunks_exact(row_bytes)
                .enumerate()
            {
                for (s, block) in row.chunks_exact(FILE_SUPER_BYTES).enumerate() {
                    put_super(
                        &mut group[s * GROUP_SUPER_BYTES..][..GROUP_SUPER_BYTES],
                        r,
                        block,
                    );
                }
            }
        });
    out
}

/// Writes row `r`'s super-block `block` (the file's 144 bytes) into a group's super-block.
fn put_super(out: &mut [u8], r: usize, block: &[u8]) {
    out[2 * r..2 * r + 2].copy_from_slice(&block[0..2]);
    out[16 + 2 * r..16 + 2 * r + 2].copy_from_slice(&block[2..4]);
    let packed: &[u8; K_SCALE_SIZE] = block[4..16].try_into().expect("12 bytes");
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, packed);
        out[32 + 8 * j + r] = sc;
        out[96 + 8 * j + r] = m;
    }
    // The file keeps sub-blocks 2i and 2i + 1 in the low and high nibbles of bytes
    // 32 i..32 i + 32.
    let level = |v: usize| {
        let (j, i) = (v / 32, v % 32);
        let byte = block[16 + 32 * (j / 2) + i];
        if j % 2 == 0 {
            byte & 0x0F
        } else {
            byte >> 4
        }
    };
    for j in 0..8 {
        for c in 0..4 {
            for b in 0..4 {
                let lo = level(32 * j + 4 * c + b);
                let hi = level(32 * j + 16 + 4 * c + b);
                out[160 + 128 * j + 32 * c + 4 * r + b] = lo | hi << 4;
            }
        }
    }
}

/// Row `r` of the interleaved group `group` (`cols` values), in the file's layout, into
/// `out` (resized): what the products that unpack rows read.
pub fn row_of(group: &[u8], cols: usize, r: usize, out: &mut Vec<u8>) {
    let supers = cols / SUPER;
    out.clear();
    out.resize(supers * FILE_SUPER_BYTES, 0);
    for (s, block) in out.chunks_exact_mut(FILE_SUPER_BYTES).enumerate() {
        let sup = &group[s * GROUP_SUPER_BYTES..][..GROUP_SUPER_BYTES];
        block[0..2].copy_from_slice(&sup[2 * r..2 * r + 2]);
        block[2..4].copy_from_slice(&sup[16 + 2 * r..16 + 2 * r + 2]);
        let sc: [u8; 8] = std::array::from_fn(|j| sup[32 + 8 * j + r]);
        let m: [u8; 8] = std::array::from_fn(|j| sup[96 + 8 * j + r]);
        block[4..16].copy_from_slice(&pack_scale_min_k4(&sc, &m));
        for j in 0..8 {
            for c in 0..4 {
                for b in 0..4 {
                    let byte = sup[160 + 128 * j + 32 * c + 4 * r + b];
                    for (v, level) in [(4 * c + b, byte & 0x0F), (16 + 4 * c + b, byte >> 4)] {
                        let at = 16 + 32 * (j / 2) + v;
                        block[at] |= if j % 2 == 0 { level } else { level << 4 };
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_come_back_byte_for_byte() {
        let (rows, cols) = (16, 512);
        let mut s = 0x1234_5678_9ABC_DEF1u64;
        let data: Vec<u8> = (0..rows * cols / SUPER * FILE_SUPER_BYTES)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect();
        let inter = q4_k(&data, cols);
        assert_eq!(inter.len(), bytes(rows, cols));
        let row_bytes = cols / SUPER * FILE_SUPER_BYTES;
        let group_bytes = cols / SUPER * GROUP_SUPER_BYTES;
        let mut row = Vec::new();
        for r in 0..rows {
            row_of(
                &inter[r / ROWS * group_bytes..][..group_bytes],
                cols,
                r % ROWS,
                &mut row,
            );
            assert_eq!(row, data[r * row_bytes..][..row_bytes], "row {r}");
        }
    }

    #[test]
    fn a_panel_from_groups_is_the_panel_from_the_rows() {
        use crate::levels::{unpacker, RowLevels};
        use crate::panel::Panel;
        let (rows, cols) = (24, 512);
        let values: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919) % 1013) as f32 / 1013.0 - 0.4)
            .collect();
        let w = hearth_model::Matrix::quantize(Format::Q4_K, rows, cols, &values).unwrap();
        let inter = q4_k(&w.data, cols);
        let row_bytes = w.data.len() / rows;
        let group_bytes = bytes(ROWS, cols);
        let unpack = unpacker(Format::Q4_K).unwrap();
        let mut scratch = RowLevels::default();
        for lanes in [8, 16] {
            for first in (0..rows).step_by(lanes) {
                let count = lanes.min(rows - first);
                let mut want = Panel::default();
                let plain = &w.data[first * row_bytes..][..count * row_bytes];
                want.fill(lanes, Format::Q4_K, unpack, plain, cols, &mut scratch);
                let mut got = Panel::default();
                let groups = &inter[first / ROWS * group_bytes..][..count / ROWS * group_bytes];
                got.fill_interleaved(lanes, groups, rows - first, cols);
                assert_eq!(
                    (got.rows, &got.levels, &got.d, &got.m, &got.bias),
                    (want.rows, &want.levels, &want.d, &want.m, &want.bias),
                    "{lanes} lanes from row {first}"
                );
            }
        }
    }
}
