//! Dot products of one weight row with one activation row, per instruction set: integer
//! levels against 8-bit activations ([`Kernels::levels`]), and float rows (F32, F16 weights
//! widened to f32) against f32 activations ([`Kernels::floats`]).
//!
//! A row's levels dot is, per 32 values `c` of activation scale `xd[c]` and per half `h` of
//! them (16 values sharing the weight's `d[g]`, `g = 2c + h`), `d[g] * xd[c] * sum(level * q)`,
//! plus `sum(m[g] * sums[g])` for the weights' bases. The integer sums are exact; the SIMD
//! kernels keep eight or sixteen float partial sums, so their result differs from the portable
//! one's only by float summation order.

#[cfg(target_arch = "aarch64")]
mod neon;
mod portable;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_act;
#[cfg(target_arch = "x86_64")]
mod x86_fused;
#[cfg(target_arch = "x86_64")]
mod x86_interleaved;
#[cfg(target_arch = "x86_64")]
mod x86_kquant;
#[cfg(target_arch = "x86_64")]
mod x86_panel;

use crate::act::{ActQ8, ActRow};
use crate::interleave::{self, ROWS};
use crate::isa::Isa;
use crate::panel::Panel;
use hearth_model::{Error, Result};
use hearth_quant::Format;

/// One weight row's levels with the `d` and `m` of each 16 of them (see `levels`).
#[derive(Clone, Copy, Debug)]
pub struct LevelsRow<'a> {
    pub levels: &'a [i8],
    pub d: &'a [f32],
    pub m: &'a [f32],
    /// Whether any `m` is non-zero (the symmetric formats have none).
    pub has_base: bool,
}

/// A packed row's dot products with `N` activation rows, its blocks unpacked once for all.
type DotN<const N: usize> = unsafe fn(&[u8], &[ActRow; N]) -> [f32; N];

/// Prompt tokens a packed kernel takes per pass over a row's blocks.
pub const TOKENS: usize = 8;

/// One packed format's kernels for rows of one length, from [`Kernels::packed_dot`]: made
/// only for an instruction set the CPU has, and each call checks its slices' lengths.
#[derive(Clone, Copy)]
pub struct PackedDot {
    one: DotN<1>,
    two: DotN<2>,
    four: DotN<4>,
    many: DotN<TOKENS>,
    row_bytes: usize,
    cols: usize,
}

impl PackedDot {
    /// Whether `x` is an activation row of this product's length.
    fn takes(&self, x: &ActRow) -> bool {
        x.q.len() == self.cols && x.d.len() * 32 == self.cols && x.sums.len() * 16 == self.cols
    }

    fn fits(&self, row: &[u8], x: &ActRow) -> bool {
        row.len() == self.row_bytes && self.takes(x)
    }

    /// `row . x`; 0 for slices of the wrong length.
    pub fn one(&self, row: &[u8], x: ActRow) -> f32 {
        if !self.fits(row, &x) {
            return 0.0;
        }
        // SAFETY: `packed_dot` chose the kernel for an instruction set `Kernels::new` checked
        // the CPU has, and the lengths were checked above.
        unsafe { (self.one)(row, &[x])[0] }
    }

    /// `rows[r] . x` into `out[r]` for consecutive packed rows (a decode step's product): the
    /// lengths checked once for all of them. Zeros where they do not fit.
    pub fn rows(&self, rows: &[u8], x: ActRow, out: &mut [f32]) {
        if rows.len() != out.len() * self.row_bytes || !self.takes(&x) {
            out.fill(0.0);
            return;
        }
        let xs = [x];
        for (row, y) in rows.chunks_exact(self.row_bytes).zip(out) {
            // SAFETY: as in `one`; every row is `row_bytes` long and `x` was checked above.
            *y = unsafe { (self.one)(row, &xs)[0] };
        }
    }

    /// `row . xs[i]` for [`TOKENS`] activation rows; zeros for slices of the wrong length.
    pub fn many(&self, row: &[u8], xs: &[ActRow; TOKENS]) -> [f32; TOKENS] {
        self.checked(self.many, row, xs)
    }

    /// `row . xs[i]` for four activation rows (a short step: a draft being verified).
    pub fn four(&self, row: &[u8], xs: &[ActRow; 4]) -> [f32; 4] {
        self.checked(self.four, row, xs)
    }

    /// `row . xs[i]` for two activation rows.
    pub fn two(&self, row: &[u8], xs: &[ActRow; 2]) -> [f32; 2] {
        self.checked(self.two, row, xs)
    }

    fn checked<const N: usize>(&self, f: DotN<N>, row: &[u8], xs: &[ActRow; N]) -> [f32; N] {
        if !xs.iter().all(|x| self.fits(row, x)) {
            return [0.0; N];
        }
        // SAFETY: as in `one`.
        unsafe { f(row, xs) }
    }
}

/// An interleaved group's products with `N` activation rows (see `x86_interleaved`).
type GroupN<const N: usize> = unsafe fn(&[u8], &[ActRow; N], &mut [[f32; ROWS]; N]);

/// Products of groups of interleaved rows (`crate::interleave`) of one length, from
/// [`Kernels::interleaved_dot`]: made only for an instruction set the CPU has, and each call
/// checks its slices' lengths.
#[derive(Clone, Copy)]
pub struct InterleavedDot {
    one: GroupN<1>,
    two: GroupN<2>,
    four: GroupN<4>,
    group_bytes: usize,
    cols: usize,
}

impl InterleavedDot {
    /// Bytes of one group of [`ROWS`] rows.
    pub fn group_bytes(&self) -> usize {
        self.group_bytes
    }

    /// `out[r * act.rows + t]` = row `r` of `group` . token `t` of `act`: four tokens a pass
    /// over the group, then two and one. Zeros where the sizes do not agree.
    pub fn run(&self, group: &[u8], act: &ActQ8, out: &mut [f32]) {
        let n = act.rows;
        let fits = group.len() == self.group_bytes
            && act.cols == self.cols
            && act.q.len() == n * self.cols
            && act.d.len() * 32 == act.q.len()
            && act.sums.len() * 16 == act.q.len()
            && out.len() == ROWS * n;
        if !fits {
            out.fill(0.0);
            return;
        }
        let mut t = 0;
        while t < n {
            let x = |i: usize| act.row(t + i);
            let mut ys = [[0f32; ROWS]; 4];
            // SAFETY: `interleaved_dot` chose the kernels for an instruction set
            // `Kernels::new` checked the CPU has and for groups of this many bytes; the sizes
            // were checked above.
            let taken = unsafe {
                match n - t {
                    4.. => {
                        (self.four)(group, &std::array::from_fn(x), &mut ys);
                        4
                    }
                    2 | 3 => {
                        (self.two)(
                            group,
                            &std::array::from_fn(x),
                            (&mut ys[..2]).try_into().unwrap(),
                        );
                        2
                    }
                    _ => {
                        (self.one)(group, &[x(0)], (&mut ys[..1]).try_into().unwrap());
                        1
                    }
                }
            };
            for (i, y) in ys[..taken].iter().enumerate() {
                for (r, &v) in y.iter().enumerate() {
                    out[r * n + t + i] = v;
                }
            }
            t += taken;
        }
    }
}

/// A panel kernel for `N` tokens (see `x86_panel`).
type PanelRun<const N: usize> = unsafe fn(&Panel, &[ActRow; N], &mut [f32]);

/// Tokens a panel kernel takes per pass over the panel.
pub const PANEL_TOKENS: usize = 4;

/// Products of [`Panel`]s with many tokens, from [`Kernels::panel_dot`]: made only for an
/// instruction set the CPU has, and each call checks the panel's and the tokens' sizes.
#[derive(Clone, Copy)]
pub struct PanelDot {
    lanes: usize,
    group: usize,
    /// `None`: the portable kernel.
    simd: Option<(PanelRun<1>, PanelRun<PANEL_TOKENS>)>,
}

impl PanelDot {
    /// Rows a panel holds for these kernels.
    pub fn lanes(&self) -> usize {
        self.lanes
    }

    /// `out[t * lanes + lane]` = row `lane` of `p` . token `t` of `act`, for every token;
    /// zeros where the sizes do not agree.
    pub fn run(&self, p: &Panel, act: &ActQ8, out: &mut [f32]) {
        let lanes = self.lanes;
        let fits = p.is_consistent()
            && p.lanes == lanes
            && p.group == self.group
            && p.cols == act.cols
            && act.cols.is_multiple_of(32)
            && act.q.len() == act.rows * act.cols
            && act.u.len() == act.q.len()
            && act.d.len() * 32 == act.q.len()
            && act.sums.len() * 16 == act.q.len()
            && out.len() == act.rows * lanes;
        if !fits {
            out.fill(0.0);
            return;
        }
        let Some((one, many)) = self.simd else {
            for (t, y) in out.chunks_exact_mut(lanes).enumerate() {
                p.dot_portable(act.row(t), y);
            }
            return;
        };
        let mut blocks = out.chunks_exact_mut(PANEL_TOKENS * lanes);
        for (b, y) in blocks.by_ref().enumerate() {
            let xs = std::array::from_fn(|i| act.row(b * PANEL_TOKENS + i));
            // SAFETY: `panel_dot` chose the kernels for an instruction set `Kernels::new`
            // checked the CPU has, with this panel's lanes and group; the sizes were checked
            // above.
            unsafe { many(p, &xs, y) };
        }
        let done = act.rows / PANEL_TOKENS * PANEL_TOKENS;
        for (t, y) in blocks.into_remainder().chunks_exact_mut(lanes).enumerate() {
            // SAFETY: as above.
            unsafe { one(p, &[act.row(done + t)], y) };
        }
    }
}

/// The kernels of one instruction set the running CPU supports: only [`Kernels::new`] makes
/// them, after checking, so calling them never executes an instruction the CPU lacks.
#[derive(Clone, Copy, Debug)]
pub struct Kernels {
    isa: Isa,
}

impl Kernels {
    /// The kernels of `isa`; an error where the running CPU does not support it.
    pub fn new(isa: Isa) -> Result<Self> {
        if !isa.supported() {
            return Err(Error::options(
                "isa",
                format!("this CPU does not report {isa}"),
            ));
        }
        // Instruction sets without kernels of their own on this architecture run the
        // portable ones.
        let isa = match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => isa,
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDot => isa,
            _ => Isa::Portable,
        };
        Ok(Self { isa })
    }

    /// The instruction set the kernels use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// `w . x` for a row of levels and a row of quantized activations of the same length (a
    /// multiple of 32); 0 for slices of other lengths.
    pub fn levels(&self, w: LevelsRow, x: ActRow) -> f32 {
        let n = w.levels.len();
        // Bounds the kernels rely on, checked once (they index without checks).
        let ok = n.is_multiple_of(32)
            && x.q.len() == n
            && w.d.len() == n / 16
            && w.m.len() == n / 16
            && x.d.len() == n / 32
            && x.sums.len() == n / 16;
        if !ok || n == 0 {
            return 0.0;
        }
        let base = if w.has_base {
            portable::dot_f32(w.m, x.sums)
        } else {
            0.0
        };
        let products = match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `new` checked that the CPU supports the instruction set, and the
            // slices' lengths were checked above.
            Isa::Avx512Vnni => unsafe { x86::levels_avx512vnni(w, x) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Isa::AvxVnni => unsafe { x86::levels_avxvnni(w, x) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Isa::Avx2 => unsafe { x86::levels_avx2(w, x) },
            #[cfg(target_arch = "aarch64")]
            // SAFETY: as above.
            Isa::NeonDot => unsafe { neon::levels(w, x) },
            _ => portable::levels(w, x),
        };
        products + base
    }

    /// Whether [`packed`](Self::packed) reads `format`'s blocks directly on this instruction
    /// set (the common formats on x86-64, llama.cpp's Q4_K_M among them); other rows are
    /// unpacked to levels first.
    pub fn reads_packed(&self, format: Format) -> bool {
        matches!(self.isa, Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni)
            && matches!(
                format,
                Format::Q4
                    | Format::Q4_0
                    | Format::Q8
                    | Format::Q5_0
                    | Format::Q5_1
                    | Format::Q4_K
                    | Format::Q6_K
            )
    }

    /// The dot products of packed `format` rows of `cols` values with quantized activations,
    /// where [`reads_packed`](Self::reads_packed) says so: chosen and checked once per
    /// product, so each row pays only a length check.
    pub fn packed_dot(&self, format: Format, cols: usize) -> Option<PackedDot> {
        if !self.reads_packed(format) || !cols.is_multiple_of(32) {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let row_bytes = format.bytes_for(cols)?;
            use x86_fused::{avx2, vnni};
            use x86_kquant::{avx2 as k_avx2, vnni as k_vnni};
            let wide = self.isa == Isa::Avx512Vnni;
            // Every token count a product takes, from one generic kernel.
            macro_rules! by_n {
                ($f:path) => {
                    (
                        $f as DotN<1>,
                        $f as DotN<2>,
                        $f as DotN<4>,
                        $f as DotN<TOKENS>,
                    )
                };
            }
            let (one, two, four, many) = match (wide, format) {
                (true, Format::Q4) => by_n!(vnni::q4),
                (true, Format::Q4_0) => by_n!(vnni::q4_0),
                (true, Format::Q8) => by_n!(vnni::q8),
                (true, Format::Q5_0) => by_n!(k_vnni::q5_0),
                (true, Format::Q5_1) => by_n!(k_vnni::q5_1),
                (true, Format::Q4_K) => by_n!(k_vnni::q4_k),
                (true, Format::Q6_K) => by_n!(k_vnni::q6_k),
                (false, Format::Q4) => by_n!(avx2::q4),
                (false, Format::Q4_0) => by_n!(avx2::q4_0),
                (false, Format::Q8) => by_n!(avx2::q8),
                (false, Format::Q5_0) => by_n!(k_avx2::q5_0),
                (false, Format::Q5_1) => by_n!(k_avx2::q5_1),
                (false, Format::Q4_K) => by_n!(k_avx2::q4_k),
                (false, Format::Q6_K) => by_n!(k_avx2::q6_k),
                _ => return None,
            };
            return Some(PackedDot {
                one,
                two,
                four,
                many,
                row_bytes,
                cols,
            });
        }
        #[allow(unreachable_code)]
        None
    }

    /// The products of `format`'s rows of `cols` values interleaved [`ROWS`] at a time, where
    /// this instruction set has them (Q4_K on x86-64); the executor interleaves a matrix at
    /// load only where this says so.
    pub fn interleaved_dot(&self, format: Format, cols: usize) -> Option<InterleavedDot> {
        if !interleave::fits(format, ROWS, cols) {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        {
            use x86_interleaved::{avx2, vnni};
            let group_bytes = interleave::bytes(ROWS, cols);
            let (one, two, four) = match self.isa {
                Isa::Avx512Vnni => (
                    vnni::q4_k::<1> as GroupN<1>,
                    vnni::q4_k::<2> as GroupN<2>,
                    vnni::q4_k::<4> as GroupN<4>,
                ),
                Isa::Avx2 | Isa::AvxVnni => (
                    avx2::q4_k::<1> as GroupN<1>,
                    avx2::q4_k::<2> as GroupN<2>,
                    avx2::q4_k::<4> as GroupN<4>,
                ),
                _ => return None,
            };
            return Some(InterleavedDot {
                one,
                two,
                four,
                group_bytes,
                cols,
            });
        }
        #[allow(unreachable_code)]
        None
    }

    /// The products of panels of `format`'s rows with many tokens; `None` where the
    /// instruction set cannot take the format's levels (AVX2 and the 8-bit formats).
    pub fn panel_dot(&self, format: Format) -> Option<PanelDot> {
        let group = crate::levels::group_width(format);
        let portable = PanelDot {
            lanes: 8,
            group,
            simd: None,
        };
        // One instruction set's kernels (`$m::LANES`, `$m::panel::<G, N>`) for the group.
        #[allow(unused_macros)]
        macro_rules! kernels {
            ($($m:ident)::+) => {
                PanelDot {
                    lanes: $($m)::+::LANES,
                    group,
                    simd: Some(match group {
                        16 => ($($m)::+::panel::<16, 1>, $($m)::+::panel::<16, PANEL_TOKENS>),
                        _ => ($($m)::+::panel::<32, 1>, $($m)::+::panel::<32, PANEL_TOKENS>),
                    }),
                }
            };
        }
        Some(match self.isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => kernels!(x86_panel::avx512vnni),
            #[cfg(target_arch = "x86_64")]
            Isa::AvxVnni => kernels!(x86_panel::avxvnni),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 if crate::levels::beyond_64(format) => return None,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => kernels!(x86_panel::avx2),
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDot => kernels!(neon),
            _ => portable,
        })
    }

    /// `w . x` for a row of levels and a row of f32 activations of the same length (a
    /// multiple of 16): the activations as they are, at f32's precision.
    pub fn levels_f32(&self, w: LevelsRow, x: &[f32]) -> f32 {
        let n = w.levels.len();
        if x.len() != n || w.d.len() != n / 16 || w.m.len() != n / 16 || !n.is_multiple_of(16) {
            return 0.0;
        }
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `new` checked that the CPU supports AVX2 and FMA (every x86 set here
            // includes them); the lengths were checked above.
            Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => unsafe { x86::levels_f32_avx2(w, x) },
            _ => portable::levels_f32(w, x),
        }
    }

    /// `out += sum(w[p] * rows[p])` for `w.len()` rows of `out.len()` values (attention's
    /// weighted sum of V rows); `out` unchanged where `rows` is not that long.
    pub fn weighted_sum(&self, w: &[f32], rows: &[f32], out: &mut [f32]) {
        if rows.len() != w.len() * out.len() {
            return;
        }
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `new` checked that the CPU supports AVX2 and FMA (every x86 set here
            // includes them); the lengths were checked above.
            Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => unsafe {
                x86::weighted_sum_avx2(w, rows, out)
            },
            _ => portable::weighted_sum(w, rows, out),
        }
    }

    /// Quantizes `x` ([rows, cols], `cols` a multiple of 32) into `act`, reusing its memory:
    /// the same values as [`ActQ8::quantize`].
    pub fn quantize(&self, x: &[f32], cols: usize, act: &mut ActQ8) {
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni
                if cols.is_multiple_of(32) && x.len().is_multiple_of(cols.max(1)) =>
            {
                act.shape(x, cols);
                let ActQ8 { q, u, d, sums, .. } = act;
                // SAFETY: `new` checked that the CPU supports AVX2; `shape` sized the vectors
                // for `x`, a whole number of 32-value blocks.
                unsafe { x86_act::quantize_avx2(x, q, u, d, sums) }
            }
            _ => act.quantize(x, cols),
        }
    }

    /// `out[p] = q . rows[p]` for `out.len()` rows of `q.len()` values (attention's scores);
    /// zeros where `rows` is not that long.
    pub fn dots(&self, q: &[f32], rows: &[f32], out: &mut [f32]) {
        if rows.len() != q.len() * out.len() {
            out.fill(0.0);
            return;
        }
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `new` checked that the CPU supports AVX2 and FMA (every x86 set here
            // includes them); the lengths were checked above.
            Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => unsafe { x86::dots_avx2(q, rows, out) },
            _ => portable::dots(q, rows, out),
        }
    }

    /// `x` replaced by `exp(x - max)`, where `max` is its largest value, returning `max` and
    /// the sum: a softmax not yet divided (attention's, over a part of the positions). No
    /// values: a max of -inf and a sum of 0.
    pub fn exp_shifted(&self, x: &mut [f32]) -> (f32, f32) {
        let max = x
            .iter()
            .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
        if x.is_empty() {
            return (max, 0.0);
        }
        let sum = match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `new` checked that the CPU supports AVX2 and FMA (every x86 set here
            // includes them).
            Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => unsafe { x86::exp_shifted_avx2(x, max) },
            _ => x.iter_mut().fold(0.0, |sum, v| {
                *v = (*v - max).exp();
                sum + *v
            }),
        };
        (max, sum)
    }

    /// `w . x` for a row of F16 weights as the file holds them (`2 * x.len()` bytes) and f32
    /// activations, without widening the row first (a decode step's F16 products); 0 for a row
    /// of another length.
    pub fn f16_dot(&self, w: &[u8], x: &[f32]) -> f32 {
        if w.len() != 2 * x.len() {
            return 0.0;
        }
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `new` checked that the CPU supports AVX2, FMA and F16C (every x86 set
            // here includes them); the lengths were checked above.
            Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => unsafe { x86::f16_dot_avx2(w, x) },
            _ => portable::f16_dot(w, x),
        }
    }

    /// `out[t * rows + r] = w[r] . x[t]` for the `cols`-long f32 rows of `w` (`rows` of them)
    /// and of `x` (`n`): a matrix product, by the `gemm` crate, which picks its own SIMD kernels at run
    /// time (packing both sides into cache-sized blocks, near the cores' peak multiply-adds);
    /// the portable instruction set keeps to plain Rust. Zeros where the sizes disagree.
    pub fn gemm(&self, w: &[f32], x: &[f32], cols: usize, out: &mut [f32]) {
        let (rows, n) = (w.len() / cols.max(1), x.len() / cols.max(1));
        if cols == 0 || rows * cols != w.len() || n * cols != x.len() || out.len() != rows * n {
            out.fill(0.0);
            return;
        }
        if self.isa == Isa::Portable {
            for (xt, ys) in x.chunks_exact(cols).zip(out.chunks_exact_mut(rows)) {
                for (wr, y) in w.chunks_exact(cols).zip(ys) {
                    *y = portable::dot_f32(wr, xt);
                }
            }
            return;
        }
        // SAFETY: the sizes were checked above: `out` as rows x n has its columns rows apart,
        // `w` is rows x cols with rows cols apart, and `x` as cols x n has its columns cols
        // apart.
        unsafe {
            gemm::gemm(
                rows,
                n,
                cols,
                out.as_mut_ptr(),
                rows as isize,
                1,
                false,
                w.as_ptr(),
                1,
                cols as isize,
                x.as_ptr(),
                cols as isize,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            )
        }
    }

    /// `w . x` for two f32 rows of the same length.
    pub fn floats(&self, w: &[f32], x: &[f32]) -> f32 {
        let n = w.len().min(x.len());
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `new` checked that the CPU supports AVX2 and FMA (every x86 set here
            // includes them); the kernel reads `n` values of each.
            Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => unsafe {
                x86::floats_avx2(&w[..n], &x[..n])
            },
            _ => portable::dot_f32(&w[..n], &x[..n]),
        }
    }
}

#[cfg(test)]
mod tests;
