//! Every format's unpacked levels give back its own dequantization, bit for bit.

use hearth_quant::{Format, Rounding};

use super::{group_width, unpacker, RowLevels, GROUP};

/// Varied values: a few magnitudes, both signs, some exact zeros.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            let scale = [0.01, 0.3, 2.0, 40.0][(i / 64 + seed as usize) % 4];
            if i % 97 == 5 {
                0.0
            } else {
                ((u - 0.45) * scale) as f32
            }
        })
        .collect()
}

#[test]
fn levels_times_d_plus_m_are_the_dequantized_values() {
    for format in Format::ALL {
        let Some(unpack) = unpacker(format) else {
            continue;
        };
        let cols = 512;
        for seed in 0..4 {
            let x = values(cols, seed);
            let mut packed = vec![0u8; format.bytes_for(cols).unwrap()];
            format
                .quantize_with(&x, &mut packed, Rounding::Search)
                .unwrap();
            let mut want = vec![0f32; cols];
            format.dequantize(&packed, &mut want).unwrap();
            let mut row = RowLevels::default();
            row.unpack(format, unpack, &packed, cols);
            for (j, &w) in want.iter().enumerate() {
                let (d, m) = (row.d[j / GROUP], row.m[j / GROUP]);
                let got = f32::from(row.levels[j]) * d + m;
                assert_eq!(
                    got.to_bits(),
                    w.to_bits(),
                    "{format} seed {seed} value {j}: level {} * {d} + {m} = {got}, want {w}",
                    row.levels[j]
                );
            }
        }
    }
}

#[test]
fn each_group_width_shares_one_d_and_m() {
    for format in Format::ALL {
        let Some(unpack) = unpacker(format) else {
            continue;
        };
        let width = group_width(format) / GROUP;
        let cols = 512;
        let x = values(cols, 7);
        let mut packed = vec![0u8; format.bytes_for(cols).unwrap()];
        format
            .quantize_with(&x, &mut packed, Rounding::Search)
            .unwrap();
        let mut row = RowLevels::default();
        row.unpack(format, unpack, &packed, cols);
        for (d, m) in row.d.chunks(width).zip(row.m.chunks(width)) {
            assert!(
                d.iter().all(|v| v.to_bits() == d[0].to_bits()),
                "{format} d {d:?}"
            );
            assert!(
                m.iter().all(|v| v.to_bits() == m[0].to_bits()),
                "{format} m {m:?}"
            );
        }
    }
}
