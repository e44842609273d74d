//! `hearth`: Hearth's command-line interface (the commands live in the `hearth_cli` library).

fn main() -> std::process::ExitCode {
    hearth_cli::main()
}
