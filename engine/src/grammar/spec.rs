//! What a request constrains its output to ([`GrammarSpec`]), and llguidance's grammar for it.

use hearth_model::{Error, Result};
use llguidance::api::TopLevelGrammar;
use llguidance::JsonCompileOptions;
use serde_json::{json, Value};

use super::gbnf::Gbnf;
use super::lark::to_lark;
use super::vocabulary::Vocabulary;

/// The whitespace a JSON Schema allows between tokens (before and after a brace, bracket,
/// comma or colon): none, a space, or one or two line ends and an indent of up to 20 spaces
/// or tabs. This is llama.cpp's choice (`SPACE_RULE` of its JSON Schema converter): a model
/// may lay out its JSON as it was trained to, but cannot spend its tokens on blank lines.
const JSON_WHITESPACE: &str = r"[ ]|\n{1,2}[ \t]{0,20}";

/// A constraint on the generated text.
#[derive(Clone, Debug, PartialEq)]
pub enum GrammarSpec {
    /// A GBNF grammar (llama.cpp's format; `root` is where the text starts).
    Gbnf(String),
    /// Text valid under this JSON Schema. A keyword that llguidance does not implement
    /// (`if`/`then`, `not`, `oneOf`, `dependentSchemas`, ...) is an error naming it, never a
    /// looser grammar.
    JsonSchema(Value),
    /// Any JSON object (OpenAI's JSON mode).
    JsonObject,
}

impl GrammarSpec {
    /// The request field an error in this constraint is reported under.
    pub fn field(&self) -> &'static str {
        match self {
            GrammarSpec::Gbnf(_) => "grammar",
            GrammarSpec::JsonSchema(_) => "json_schema",
            GrammarSpec::JsonObject => "response_format",
        }
    }

    /// The grammar in llguidance's terms, for `vocabulary` (whose tokens a GBNF grammar
    /// may name).
    pub(crate) fn to_llguidance(&self, vocabulary: &Vocabulary) -> Result<TopLevelGrammar> {
        let schema = match self {
            GrammarSpec::Gbnf(text) => {
                let lark = Gbnf::parse(text)
                    .and_then(|g| to_lark(&g, &|t| vocabulary.token_id(t)))
                    .map_err(|e| Error::options(self.field(), e.to_string()))?;
                return Ok(TopLevelGrammar::from_lark(lark));
            }
            GrammarSpec::JsonObject => json!({ "type": "object" }),
            GrammarSpec::JsonSchema(Value::Bool(true)) => json!({}),
            GrammarSpec::JsonSchema(Value::Object(schema)) => {
                if schema.contains_key("x-guidance") {
                    return Err(Error::options(
                        self.field(),
                        "`x-guidance` (llguidance's own options) is not accepted",
                    ));
                }
                Value::Object(schema.clone())
            }
            GrammarSpec::JsonSchema(Value::Bool(false)) => {
                return Err(Error::options(self.field(), "`false` admits no value"));
            }
            GrammarSpec::JsonSchema(other) => {
                return Err(Error::options(
                    self.field(),
                    format!("a schema is an object or a boolean, not {other}"),
                ));
            }
        };
        let mut schema = schema;
        json_options().apply_to(&mut schema);
        Ok(TopLevelGrammar::from_json_schema(schema))
    }
}

/// How schemas compile: strict (a keyword llguidance does not implement is an error, and so
/// is `oneOf`, which it could only approximate by `anyOf`), with llama.cpp's whitespace.
fn json_options() -> JsonCompileOptions {
    JsonCompileOptions {
        whitespace_flexible: false,
        whitespace_pattern: Some(JSON_WHITESPACE.to_string()),
        coerce_one_of: false,
        lenient: false,
        ..JsonCompileOptions::default()
    }
}
