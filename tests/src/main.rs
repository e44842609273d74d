//! `hearth`, as the end-to-end tests run it: the same entry point as the installed binary.

fn main() -> std::process::ExitCode {
    hearth_cli::main()
}
