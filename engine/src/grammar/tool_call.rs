//! A tool call the model must make (OpenAI's `tool_choice: "required"`, or one function named):
//! a grammar that admits only calls written in the format the chat template taught the model,
//! each to an offered function, with arguments valid under that function's `parameters`.
//!
//! The call's frame (`<tool_call>\n{"name": "f", "arguments": ` ... `}\n</tool_call>` for
//! Hermes) is literal text, so the model spends no choice on it; the arguments are llguidance's
//! JSON Schema grammar (`%json`), with the whitespace any other schema gets.

use hearth_model::{Error, Result};
use hearth_models::ToolCallFormat;
use serde_json::{json, Value};

use super::json::json_options;
use super::vocabulary::Vocabulary;

/// Calls the answer must consist of.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCalls {
    /// How the model writes a call.
    pub format: ToolCallFormat,
    /// The functions it may call: name, `parameters` (a JSON Schema; `null` for none) and
    /// whether the tool asked for `strict` adherence.
    pub functions: Vec<Function>,
    /// Several calls allowed (`parallel_tool_calls`), or exactly one.
    pub parallel: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    pub name: String,
    pub parameters: Value,
    /// A keyword the schema compiler does not implement is an error (as for `json_schema`);
    /// otherwise it is left out, as OpenAI's non-strict tools promise no more than that.
    pub strict: bool,
}

impl ToolCalls {
    /// The grammar in llguidance's Lark syntax; `vocabulary` supplies the control token a
    /// format may open with (Mistral's `[TOOL_CALLS]`).
    pub(crate) fn to_lark(&self, vocabulary: &Vocabulary) -> Result<String> {
        if self.functions.is_empty() {
            return Err(Error::options("tool_choice", "no function to call"));
        }
        let (open, separator, close) = match self.format {
            ToolCallFormat::Hermes => ("", "\n", ""),
            ToolCallFormat::Llama3 => ("", ";", ""),
            ToolCallFormat::Mistral => ("[", ", ", "]"),
        };
        let mut start = Vec::new();
        if self.format == ToolCallFormat::Mistral {
            if let Some(id) = vocabulary.token_id("[TOOL_CALLS]") {
                start.push(format!("<[{id}]>?"));
            }
        }
        start.extend(literal(open));
        start.push("call".to_string());
        if self.parallel {
            start.push(format!(
                "({} call)*",
                literal(separator).unwrap_or_default()
            ));
        }
        start.extend(literal(close));
        let mut lark = format!("start: {}\n", start.join(" "));
        let names: Vec<String> = (0..self.functions.len()).map(|i| format!("f{i}")).collect();
        lark.push_str(&format!("call: {}\n", names.join(" | ")));
        for (i, function) in self.functions.iter().enumerate() {
            let (before, after) = self.frame(&function.name);
            let (before, after) = (literal(&before), literal(&after));
            lark.push_str(&format!(
                "f{i}: {} a{i} {}\n",
                before.unwrap_or_default(),
                after.unwrap_or_default()
            ));
            lark.push_str(&format!("a{i}: %json {}\n", arguments_schema(function)?));
        }
        Ok(lark)
    }

    /// The text around one call's arguments.
    fn frame(&self, name: &str) -> (String, String) {
        let name = Value::String(name.to_string());
        match self.format {
            ToolCallFormat::Hermes => (
                format!("<tool_call>\n{{\"name\": {name}, \"arguments\": "),
                "}\n</tool_call>".to_string(),
            ),
            ToolCallFormat::Llama3 => (
                format!("{{\"name\": {name}, \"parameters\": "),
                "}".to_string(),
            ),
            ToolCallFormat::Mistral => (
                format!("{{\"name\": {name}, \"arguments\": "),
                "}".to_string(),
            ),
        }
    }
}

/// A function's `parameters` as the schema of its arguments: always an object.
fn arguments_schema(function: &Function) -> Result<String> {
    let mut schema = match &function.parameters {
        Value::Null => json!({ "type": "object" }),
        Value::Object(o) if o.contains_key("x-guidance") => {
            return Err(Error::options(
                "tool_choice",
                format!(
                    "function `{}`: `x-guidance` (llguidance's own options) is not accepted",
                    function.name
                ),
            ))
        }
        v @ Value::Object(_) => v.clone(),
        other => {
            return Err(Error::options(
                "tool_choice",
                format!(
                    "function `{}`: parameters are a JSON Schema object, not {other}",
                    function.name
                ),
            ))
        }
    };
    let mut options = json_options();
    options.lenient = !function.strict;
    options.apply_to(&mut schema);
    Ok(schema.to_string())
}

/// `text` as a Lark string literal (JSON's escapes are Lark's); none for no text.
fn literal(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| Value::String(text.to_string()).to_string())
}
