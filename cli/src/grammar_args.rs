//! Constrained output's options, shared by the commands that generate: llama.cpp's flags.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use hearth_engine::grammar::GrammarSpec;

/// Hold the output to a grammar: only tokens that keep the text valid are drawn, and the
/// text ends when the grammar is complete. At most one of these.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(id = "constraint", multiple = false)]
pub struct GrammarArgs {
    /// A GBNF grammar (llama.cpp's format; `root` is where the text starts).
    #[arg(long, value_name = "GBNF")]
    pub grammar: Option<String>,
    /// A GBNF grammar from FILE.
    #[arg(long, value_name = "FILE")]
    pub grammar_file: Option<PathBuf>,
    /// A JSON Schema the output must validate against (`{}`: any JSON value). A keyword the
    /// schema compiler does not implement is an error naming it.
    #[arg(short = 'j', long, value_name = "SCHEMA")]
    pub json_schema: Option<String>,
    /// A JSON Schema from FILE.
    #[arg(long, value_name = "FILE")]
    pub json_schema_file: Option<PathBuf>,
}

impl GrammarArgs {
    /// The constraint asked for, read and parsed as far as JSON; the engine compiles it
    /// (and refuses a grammar that does not) before generating.
    pub fn spec(&self) -> Result<Option<GrammarSpec>> {
        if let Some(text) = &self.grammar {
            return Ok(Some(GrammarSpec::Gbnf(text.clone())));
        }
        if let Some(path) = &self.grammar_file {
            return Ok(Some(GrammarSpec::Gbnf(read(path)?)));
        }
        let (text, from) = match (&self.json_schema, &self.json_schema_file) {
            (Some(text), _) => (text.clone(), "--json-schema".to_string()),
            (None, Some(path)) => (read(path)?, path.display().to_string()),
            (None, None) => return Ok(None),
        };
        let schema = serde_json::from_str(&text)
            .with_context(|| format!("{from}: a JSON Schema must be JSON"))?;
        Ok(Some(GrammarSpec::JsonSchema(schema)))
    }
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde_json::json;

    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        grammar: GrammarArgs,
    }

    fn spec(args: &[&str]) -> Result<Option<GrammarSpec>> {
        let cli = Cli::try_parse_from(std::iter::once("hearth").chain(args.iter().copied()))?;
        cli.grammar.spec()
    }

    #[test]
    fn each_flag_gives_its_constraint() {
        assert_eq!(spec(&[]).unwrap(), None);
        assert_eq!(
            spec(&["--grammar", "root ::= \"a\""]).unwrap(),
            Some(GrammarSpec::Gbnf("root ::= \"a\"".into()))
        );
        assert_eq!(
            spec(&["-j", r#"{"type": "object"}"#]).unwrap(),
            Some(GrammarSpec::JsonSchema(json!({"type": "object"})))
        );
        let dir = std::env::temp_dir().join(format!("hearth-grammar-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let gbnf = dir.join("g.gbnf");
        std::fs::write(&gbnf, "root ::= [0-9]+\n").unwrap();
        let schema = dir.join("s.json");
        std::fs::write(&schema, r#"{"type": "integer"}"#).unwrap();
        assert_eq!(
            spec(&["--grammar-file", gbnf.to_str().unwrap()]).unwrap(),
            Some(GrammarSpec::Gbnf("root ::= [0-9]+\n".into()))
        );
        assert_eq!(
            spec(&["--json-schema-file", schema.to_str().unwrap()]).unwrap(),
            Some(GrammarSpec::JsonSchema(json!({"type": "integer"})))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn one_constraint_at_most_and_json_that_parses() {
        assert!(spec(&["--grammar", "root ::= \"a\"", "-j", "{}"]).is_err());
        let e = spec(&["--json-schema", "{type: object}"]).unwrap_err();
        assert!(format!("{e:#}").starts_with("--json-schema: a JSON Schema must be JSON"));
        let e = spec(&["--grammar-file", "/nonexistent/g.gbnf"]).unwrap_err();
        assert!(format!("{e:#}").starts_with("reading /nonexistent/g.gbnf"));
    }
}
