//! Compiles every GLSL kernel variant to SPIR-V and generates `kernels.rs`, which exposes each
//! variant as a `Kernel` constant named after it (`matvec_f16` -> `MATVEC_F16`), and for each
//! weight format a `FormatKernels` with one field per kernel kind that reads weights.
//!
//! A variant is a kernel source plus the weight format it reads. The formats are
//! `hearth_quant::Format::ALL`, declared once in `quant/src/formats/mod.rs`. A kernel that reads
//! weights includes the virtual file `"format.glsl"`, which resolves to
//! `glsl/include/quant/<module>.glsl` for that variant's format (`Format::module`); nothing
//! else changes between variants.

extern crate hearth_glslang_link;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use hearth_quant::Format;

/// (variant name, source file in glsl/, weight format or "" when the kernel reads no weights).
/// A variant whose name ends in one of `SUFFIXES` is compiled with that suffix's macro.
const VARIANTS: &[(&str, &str, &str)] = &[
    ("rmsnorm", "rmsnorm.comp", ""),
    ("qkv_adjust", "qkv_adjust.comp", ""),
    ("layernorm", "layernorm.comp", ""),
    ("attn_merge", "attn_merge.comp", ""),
    ("swiglu", "swiglu.comp", ""),
    ("bias_act", "bias_act.comp", ""),
    ("attn_encoder", "attn_encoder.comp", ""),
    ("bandwidth_read", "bandwidth_read.comp", ""),
    ("ig_speculate", "ig_speculate.comp", ""),
    ("ig_select", "ig_select.comp", ""),
    ("ig_select_wide", "ig_select.comp", ""),
    ("h2o_update", "h2o_update.comp", ""),
    ("moe_route", "moe_route.comp", ""),
    ("moe_combine", "moe_combine.comp", ""),
    ("quantize_q8", "quantize_q8.comp", ""),
];

/// Name suffixes of variants compiled with a macro defined, and the macro:
/// - `_wide`: for CPU devices, the buffers whose loads differ per lane are read in 8- or
///   16-byte words, through their device addresses where the host allows
///   (include/address.glsl);
/// - `_experts`: the product over a mixture of experts' selected rows (matvec.comp,
///   matmul.comp).
const SUFFIXES: &[(&str, &str)] = &[("_wide", "WIDE_LOADS"), ("_experts", "EXPERTS")];

/// Kernels compiled once per weight format, each a field of `FormatKernels`: (field, source
/// in glsl/, suffix from `SUFFIXES` or "", what it does). The variant of format `f` is named
/// `<source stem>_<f's module><suffix>`.
const FORMAT_KERNELS: &[(&str, &str, &str, &str)] = &[
    ("matvec", "matvec.comp", "", "Weight-streaming product"),
    (
        "matvec_wide",
        "matvec.comp",
        "_wide",
        "The product for the lane-per-row shape (CPU devices) loading blocks, x and the \
         norm gain 8 or 16 bytes at a time",
    ),
    (
        "matvec_experts",
        "matvec.comp",
        "_experts",
        "The product with the rows of the experts each token's router picked",
    ),
    ("matmul", "matmul.comp", "", "Tiled matrix-matrix product"),
    (
        "matmul_experts",
        "matmul.comp",
        "_experts",
        "The tiled product over each expert's slots (prefill of a mixture of experts)",
    ),
    ("embed", "embed.comp", "", "Embedding row gather"),
    (
        "dequant",
        "dequant.comp",
        "",
        "Whole-tensor dequantization to f32",
    ),
];

/// Kernels compiled only for the formats whose values are integer levels times a scale (plus
/// a base), every format but F32 and F16: (field, source in glsl/, what it does). Each is an
/// `Option<Kernel>` field of `FormatKernels`, `None` for the float formats; the variant of
/// format `f` is named `<source stem>_<f's module>`.
const LEVEL_KERNELS: &[(&str, &str, &str)] = &[(
    "matvec_idot",
    "matvec_idot.comp",
    "The product over 8-bit activations with integer dot products",
)];

/// Whether `format` stores integer levels (the `LEVEL_KERNELS` are compiled for it).
fn has_levels(format: Format) -> bool {
    format.block_size() > 1
}

/// Kernels compiled once per KV cache type, each a field of `KvKernels`: (field, source in
/// glsl/, suffix from `SUFFIXES` or ""). The variant for type `t` is
/// `<source stem>_<t><suffix>`; it is compiled with `KV_<T>` defined (KV_F16), which
/// include/kv_cache.glsl reads.
const KV_KERNELS: &[(&str, &str, &str)] = &[
    ("rope_kv", "rope_kv.comp", ""),
    ("attn_decode", "attn_decode.comp", ""),
    ("attn_decode_wide", "attn_decode.comp", "_wide"),
    ("attn_prefill", "attn_prefill.comp", ""),
    ("attn_prefill_wide", "attn_prefill.comp", "_wide"),
    ("ig_partial_keys", "ig_partial_keys.comp", ""),
    ("kv_gather", "kv_gather.comp", ""),
    ("attn_sparse", "attn_sparse.comp", ""),
    ("h2o_lse", "h2o_lse.comp", ""),
    ("h2o_mass", "h2o_mass.comp", ""),
];

/// The KV cache types (`hearth_shaders::KvType`): (variant name in Rust, suffix).
const KV_TYPES: &[(&str, &str)] = &[("F32", "f32"), ("F16", "f16"), ("Q8", "q8")];

/// Which of the `variants` the build compiles: (name, source, weight format, KV type suffix).
type Variant = (String, String, String, String);

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("glsl");
    println!("cargo:rerun-if-changed={}", root.display());

    let compiler = shaderc::Compiler::new().expect("shaderc: could not create a compiler");
    let mut out = String::from("// Generated by build.rs: one constant per kernel variant.\n\n");
    let (spirv, revision) = shaderc::get_spirv_version();
    writeln!(
        out,
        "/// What compiled the kernels: SPIR-V for Vulkan 1.2, by shaderc (its newest SPIR-V).\n\
         pub const COMPILER: &str = \"SPIR-V for Vulkan 1.2, shaderc (SPIR-V {}.{} rev {revision})\";\n",
        spirv >> 16,
        (spirv >> 8) & 0xff
    )
    .unwrap();
    let mut all = Vec::new();
    let mut failures = Vec::new();

    let mut variants: Vec<Variant> = VARIANTS
        .iter()
        .map(|&(n, s, f)| (n.to_string(), s.to_string(), f.to_string(), String::new()))
        .collect();
    for &(_, source, suffix, _) in FORMAT_KERNELS {
        for format in Format::ALL {
            let name = variant_name(source, suffix, format.module());
            variants.push((
                name,
                source.to_string(),
                format.module().to_string(),
                String::new(),
            ));
        }
    }
    for &(_, source, _) in LEVEL_KERNELS {
        for format in Format::ALL.into_iter().filter(|&f| has_levels(f)) {
            let name = variant_name(source, "", format.module());
            variants.push((
                name,
                source.to_string(),
                format.module().to_string(),
                String::new(),
            ));
        }
    }
    for &(_, source, suffix) in KV_KERNELS {
        for &(_, kv) in KV_TYPES {
            let name = variant_name(source, suffix, kv);
            variants.push((name, source.to_string(), String::new(), kv.to_string()));
        }
    }

    for (name, source, format, kv) in &variants {
        let path = root.join(source);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        let mut options = shaderc::CompileOptions::new().expect("shaderc: no compile options");
        options.set_target_env(
            shaderc::TargetEnv::Vulkan,
            shaderc::EnvVersion::Vulkan1_2 as u32,
        );
        options.set_optimization_level(shaderc::OptimizationLevel::Performance);
        for &(suffix, macro_name) in SUFFIXES {
            if name.ends_with(suffix) {
                options.add_macro_definition(macro_name, None);
            }
        }
        if !kv.is_empty() {
            options.add_macro_definition(&format!("KV_{}", kv.to_uppercase()), None);
        }
        let include_root = root.clone();
        let format = format.to_string();
        options.set_include_callback(move |requested, _kind, from, _depth| {
            resolve_include(&include_root, &format, requested, from)
        });
        match compiler.compile_into_spirv(
            &text,
            shaderc::ShaderKind::Compute,
            &path.to_string_lossy(),
            "main",
            Some(&options),
        ) {
            Ok(artifact) => {
                let words = artifact.as_binary();
                let ident = name.to_uppercase();
                writeln!(out, "/// `{name}`: glsl/{source}").unwrap();
                write!(
                    out,
                    "pub const {ident}: Kernel = Kernel {{ name: \"{name}\", spirv: &["
                )
                .unwrap();
                for (i, w) in words.iter().enumerate() {
                    if i % 8 == 0 {
                        out.push_str("\n    ");
                    }
                    write!(out, "0x{w:08x}, ").unwrap();
                }
                out.push_str("\n] };\n\n");
                all.push(ident);
            }
            // shaderc's message already carries file:line for each error.
            Err(e) => failures.push(format!("{name} ({source}):\n{e}")),
        }
    }
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("{f}");
        }
        panic!(
            "{} shader variant(s) failed to compile (see above)",
            failures.len()
        );
    }
    writeln!(out, "/// Every kernel variant, in table order.").unwrap();
    writeln!(out, "pub const ALL: &[Kernel] = &[{}];", all.join(", ")).unwrap();
    write_format_kernels(&mut out);
    write_kv_kernels(&mut out);

    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("kernels.rs");
    std::fs::write(dest, out).expect("could not write kernels.rs");
}

/// The variant of `source` for a format or KV type: `matvec_q4b64`, or `matvec_q4b64_wide`
/// with the suffix `_wide`.
fn variant_name(source: &str, suffix: &str, of: &str) -> String {
    let stem = source.trim_end_matches(".comp");
    format!("{stem}_{of}{suffix}")
}

/// The `KvKernels` struct, one field per kernel of `KV_KERNELS`, and `kv_kernels`, which
/// gives each KV type's variants.
fn write_kv_kernels(out: &mut String) {
    out.push_str("\n/// The kernels that read or write the KV cache, compiled for one `KvType`.\n");
    out.push_str("#[derive(Clone, Copy, Debug, PartialEq, Eq)]\n");
    out.push_str("pub struct KvKernels {\n");
    for &(field, source, _) in KV_KERNELS {
        writeln!(out, "    /// glsl/{source}.\n    pub {field}: Kernel,").unwrap();
    }
    out.push_str("}\n\n");
    out.push_str("/// The kernels compiled for `kv`.\n");
    out.push_str("pub const fn kv_kernels(kv: KvType) -> &'static KvKernels {\n");
    out.push_str("    match kv {\n");
    for &(variant, kv) in KV_TYPES {
        writeln!(out, "        KvType::{variant} => &KvKernels {{").unwrap();
        for &(field, source, suffix) in KV_KERNELS {
            let ident = variant_name(source, suffix, kv).to_uppercase();
            writeln!(out, "            {field}: {ident},").unwrap();
        }
        out.push_str("        },\n");
    }
    out.push_str("    }\n}\n");
}

/// The `FormatKernels` struct, one field per kind, and `format_kernels`, which gives each
/// format's variants.
fn write_format_kernels(out: &mut String) {
    out.push_str("\n/// The kernels that read weights, compiled for one weight format.\n");
    out.push_str("#[derive(Clone, Copy, Debug, PartialEq, Eq)]\n");
    out.push_str("pub struct FormatKernels {\n");
    for &(field, source, _, doc) in FORMAT_KERNELS {
        writeln!(
            out,
            "    /// {doc}: glsl/{source}.\n    pub {field}: Kernel,"
        )
        .unwrap();
    }
    for &(field, source, doc) in LEVEL_KERNELS {
        writeln!(
            out,
            "    /// {doc}: glsl/{source} (`None` for the float formats).\n    pub {field}: Option<Kernel>,"
        )
        .unwrap();
    }
    out.push_str("}\n\n");
    out.push_str("/// The kernels compiled for `format`.\n");
    out.push_str(
        "pub const fn format_kernels(format: hearth_quant::Format) -> &'static FormatKernels {\n",
    );
    out.push_str("    match format {\n");
    for format in Format::ALL {
        let variant = format.name();
        writeln!(
            out,
            "        hearth_quant::Format::{variant} => &FormatKernels {{"
        )
        .unwrap();
        for &(field, source, suffix, _) in FORMAT_KERNELS {
            let ident = variant_name(source, suffix, format.module()).to_uppercase();
            writeln!(out, "            {field}: {ident},").unwrap();
        }
        for &(field, source, _) in LEVEL_KERNELS {
            match has_levels(format) {
                true => {
                    let ident = variant_name(source, "", format.module()).to_uppercase();
                    writeln!(out, "            {field}: Some({ident}),").unwrap();
                }
                false => writeln!(out, "            {field}: None,").unwrap(),
            }
        }
        out.push_str("        },\n");
    }
    out.push_str("    }\n}\n");
}

/// `#include "format.glsl"` names the variant's weight format; `"quant/grids/<grid>.glsl"` is a
/// lattice grid of ggml's i-quants, generated from hearth-quant's tables (`grid_glsl`);
/// everything else is a path relative to `glsl/include/`.
fn resolve_include(
    root: &Path,
    format: &str,
    requested: &str,
    from: &str,
) -> Result<shaderc::ResolvedInclude, String> {
    if let Some(grid) = requested
        .strip_prefix("quant/grids/")
        .and_then(|r| r.strip_suffix(".glsl"))
    {
        return Ok(shaderc::ResolvedInclude {
            resolved_name: format!("quant/grids/{grid}.glsl"),
            content: grid_glsl(grid).ok_or_else(|| format!("{from}: no grid {grid}"))?,
        });
    }
    let path = if requested == "format.glsl" {
        if format.is_empty() {
            return Err(format!(
                "{from} includes format.glsl but its variant has no format"
            ));
        }
        root.join("include/quant").join(format!("{format}.glsl"))
    } else {
        root.join("include").join(requested)
    };
    let content = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(shaderc::ResolvedInclude {
        resolved_name: path.to_string_lossy().into_owned(),
        content,
    })
}

/// The GLSL of one i-quant grid (`iq2xxs`, ...) from `hearth_quant::formats::iq::iq_grids`, so the
/// kernels and the Rust dequantization read one table: `<NAME>_ROWS` holds the rows (each a
/// u16 of level indices, first value lowest, two rows to a word), and
/// `<name>_values4(row, first)` gives values `first .. first + 4` of a row as its levels.
fn grid_glsl(grid: &str) -> Option<String> {
    use hearth_quant::formats::iq::iq_grids::*;
    let (levels, rows, bits): (&[i8], &[u16], u32) = match grid {
        "iq2xxs" => (&IQ2XXS_LEVELS, &IQ2XXS_PACKED, 2),
        "iq2xs" => (&IQ2XS_LEVELS, &IQ2XS_PACKED, 2),
        "iq2s" => (&IQ2S_LEVELS, &IQ2S_PACKED, 2),
        "iq3xxs" => (&IQ3XXS_LEVELS, &IQ3XXS_PACKED, 3),
        "iq3s" => (&IQ3S_LEVELS, &IQ3S_PACKED, 3),
        "iq1s" => (&IQ1S_LEVELS, &IQ1S_PACKED, 2),
        _ => return None,
    };
    let upper = grid.to_uppercase();
    let join = |v: Vec<String>| v.join(", ");
    let words: Vec<String> = rows
        .chunks(2)
        .map(|p| {
            format!(
                "{:#x}u",
                u32::from(p[0]) | u32::from(*p.get(1).unwrap_or(&0)) << 16
            )
        })
        .collect();
    let mut out = format!("#ifndef GRID_{upper}\n#define GRID_{upper}\n");
    let n = levels.len();
    let _ = writeln!(
        out,
        "const int {upper}_LEVELS[{n}] = int[{n}]({});",
        join(levels.iter().map(i8::to_string).collect())
    );
    let _ = writeln!(
        out,
        "const uint {upper}_ROWS[{}] = uint[{}]({});",
        words.len(),
        words.len(),
        join(words.clone())
    );
    let mask = (1u32 << bits) - 1;
    let _ = writeln!(
        out,
        "uint {grid}_row(uint i) {{ return ({upper}_ROWS[i >> 1] >> (16u * (i & 1u))) & 0xFFFFu; }}"
    );
    let value = |k: u32| format!("{upper}_LEVELS[(row >> ({bits}u * (first + {k}u))) & {mask}u]");
    let _ = writeln!(
        out,
        "ivec4 {grid}_values4(uint row, uint first) {{ return ivec4({}); }}\n#endif",
        join((0..4).map(value).collect())
    );
    Some(out)
}
