//! Debian's `libshaderc_combined.a` holds only shaderc itself; glslang and SPIRV-Tools come as
//! separate static archives. Linking them here puts them into every binary that uses this crate
//! (the shader build script), next to the shaderc that `shaderc-sys` links.

const LIBS: &[&str] = &[
    "MachineIndependent",
    "GenericCodeGen",
    "OSDependent",
    "OGLCompiler",
    "SPIRV",
    "SPIRV-Tools-opt",
    "SPIRV-Tools",
    "glslang-default-resource-limits",
    "HLSL",
];

fn main() {
    println!("cargo:rerun-if-env-changed=SHADERC_LIB_DIR");
    let dir = std::env::var("SHADERC_LIB_DIR")
        .unwrap_or_else(|_| "/usr/lib/x86_64-linux-gnu".to_string());
    println!("cargo:rustc-link-search=native={dir}");
    for lib in LIBS {
        println!("cargo:rustc-link-lib=static={lib}");
    }
    println!("cargo:rustc-link-lib=dylib=stdc++");
}
