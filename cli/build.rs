//! Records the commit the binary is built from, for `hearth --version`: `HEARTH_COMMIT` when
//! set (a build from a source tarball), else git's, else "unknown".

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=HEARTH_COMMIT");
    let commit = std::env::var("HEARTH_COMMIT").ok().or_else(git_commit);
    println!(
        "cargo:rustc-env=HEARTH_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
}

fn git_commit() -> Option<String> {
    let run = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    // A new commit or checkout changes HEAD or the ref it names.
    if let Some(dir) = run(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(head) = run(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{head}");
        }
        println!("cargo:rerun-if-changed={dir}/packed-refs");
    }
    run(&["rev-parse", "--short=12", "HEAD"])
}
