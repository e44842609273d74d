//! What a request constrains its output to ([`GrammarSpec`]), and llguidance's grammar for it.

use hearth_model::{Error, Result};
use llguidance::api::TopLevelGrammar;
use serde_json::{json, Value};

use super::gbnf::Gbnf;
use super::json::json_options;
use super::lark::to_lark;
use super::tool_call::ToolCalls;
use super::vocabulary::Vocabulary;

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
    /// Tool calls and nothing else (`tool_choice` that forces a call).
    ToolCalls(ToolCalls),
}

impl GrammarSpec {
    /// The request field an error in this constraint is reported under.
    pub fn field(&self) -> &'static str {
        match self {
            GrammarSpec::Gbnf(_) => "grammar",
            GrammarSpec::JsonSchema(_) => "json_schema",
            GrammarSpec::JsonObject => "response_format",
            GrammarSpec::ToolCalls(_) => "tool_choice",
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
            GrammarSpec::ToolCalls(calls) => {
                return Ok(TopLevelGrammar::from_lark(calls.to_lark(vocabulary)?));
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
