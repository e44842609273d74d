//! Link-only crate: see build.rs. `extern crate hearth_glslang_link;` pulls the libraries in.
#![no_std]
