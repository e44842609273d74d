//! `/v1/completions`' `prompt` in every form OpenAI's API takes: a string, an array of
//! strings, an array of token ids, or an array of such arrays. Each string or array is one
//! prompt, answered by its own `n` completions.

use serde_json::Value;
use utoipa::openapi::schema::{ArrayBuilder, OneOfBuilder, SchemaType, Type};
use utoipa::openapi::{ObjectBuilder, RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use super::bounds::MAX_COMPLETIONS;
use super::invalid::{invalid, Invalid};
use super::whole::whole;

/// One prompt: text to tokenize, or the token ids themselves.
#[derive(Clone, Debug, PartialEq)]
pub enum PromptPart {
    Text(String),
    Tokens(Vec<u32>),
}

/// The request's prompts, at least one.
#[derive(Clone, Debug, PartialEq)]
pub struct Prompt(pub Vec<PromptPart>);

const FORMS: &str =
    "a string, an array of strings, an array of token ids, or an array of arrays of token ids";

impl Prompt {
    pub fn parse(value: &Value) -> Result<Self, Invalid> {
        Self::parse_field(value, "prompt", MAX_COMPLETIONS)
    }

    /// The same forms in field `field` (`/v1/embeddings`' `input`), at most `max` of them.
    pub fn parse_field(value: &Value, field: &str, max: usize) -> Result<Self, Invalid> {
        let parts = match value {
            Value::String(s) => vec![PromptPart::Text(s.clone())],
            Value::Array(items) if items.is_empty() => {
                return Err(invalid(
                    field,
                    format!("{field} is an empty array; give at least one {field}"),
                ))
            }
            // An array of numbers is one prompt of token ids.
            Value::Array(items) if items[0].is_number() => {
                vec![PromptPart::Tokens(tokens(items, field)?)]
            }
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| part(item, field, i))
                .collect::<Result<_, _>>()?,
            other => {
                return Err(invalid(
                    field,
                    format!("{field} is {}; it must be {FORMS}", kind(other)),
                ))
            }
        };
        if parts.len() > max {
            return Err(invalid(
                field,
                format!("{} {field}s; at most {max} per request", parts.len()),
            ));
        }
        Ok(Self(parts))
    }
}

/// Item `i` of an array of prompts.
fn part(item: &Value, field: &str, i: usize) -> Result<PromptPart, Invalid> {
    let param = format!("{field}[{i}]");
    match item {
        Value::String(s) => Ok(PromptPart::Text(s.clone())),
        Value::Array(ids) if ids.is_empty() => Err(invalid(
            param.clone(),
            format!("{param} is an empty array of token ids"),
        )),
        Value::Array(ids) => Ok(PromptPart::Tokens(tokens(ids, &param)?)),
        other => Err(invalid(
            param.clone(),
            format!(
                "{param} is {}; in an array each must be a string or an array of token ids",
                kind(other)
            ),
        )),
    }
}

/// An array of token ids, each a whole number from 0 to 2^32 - 1.
fn tokens(ids: &[Value], param: &str) -> Result<Vec<u32>, Invalid> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            whole::<u32>(id).ok_or_else(|| {
                invalid(
                    format!("{param}[{i}]"),
                    format!(
                        "{param}[{i}] is {}; a token id is a whole number from 0 to \
                             4294967295 (each is {FORMS})",
                        id
                    ),
                )
            })
        })
        .collect()
}

/// The forms, for the API's description: read by hand above, so described by hand here.
impl PartialSchema for Prompt {
    fn schema() -> RefOr<Schema> {
        // Empty text is refused where the model adds no BOS: there is nothing to continue.
        let string = || {
            ObjectBuilder::new()
                .schema_type(SchemaType::new(Type::String))
                .min_length(Some(1))
        };
        let tokens = || {
            ArrayBuilder::new()
                .items(
                    ObjectBuilder::new()
                        .schema_type(SchemaType::new(Type::Integer))
                        .minimum(Some(0))
                        .maximum(Some(u32::MAX)),
                )
                .min_items(Some(1))
        };
        OneOfBuilder::new()
            .item(string())
            .item(ArrayBuilder::new().items(string()).min_items(Some(1)))
            .item(tokens())
            .item(ArrayBuilder::new().items(tokens()).min_items(Some(1)))
            .description(Some(format!("One prompt or several: {FORMS}.")))
            .into()
    }
}

impl ToSchema for Prompt {}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_form_openai_takes_is_taken() {
        use PromptPart::{Text, Tokens};
        let parse = |v: Value| Prompt::parse(&v).unwrap().0;
        assert_eq!(parse(json!("hi")), vec![Text("hi".into())]);
        assert_eq!(parse(json!([1, 2, 3])), vec![Tokens(vec![1, 2, 3])]);
        assert_eq!(
            parse(json!(["a", "b"])),
            vec![Text("a".into()), Text("b".into())]
        );
        assert_eq!(
            parse(json!([[1, 2], [3]])),
            vec![Tokens(vec![1, 2]), Tokens(vec![3])]
        );
        assert_eq!(
            parse(json!(["a", [3]])),
            vec![Text("a".into()), Tokens(vec![3])]
        );
    }

    #[test]
    fn other_forms_are_refused_by_name() {
        for (v, param, words) in [
            (json!([]), "prompt", "empty array"),
            (json!(null), "prompt", "null"),
            (json!({ "text": "x" }), "prompt", "an object"),
            (json!(7), "prompt", "a number"),
            (json!([1, -2]), "prompt[1]", "token id"),
            (json!([1, 2.5]), "prompt[1]", "token id"),
            (json!([1, "a"]), "prompt[1]", "token id"),
            (json!([[1], [4294967296u64]]), "prompt[1][0]", "token id"),
            (json!([[1], []]), "prompt[1]", "empty array"),
            (json!(["a", 3]), "prompt[1]", "a number"),
            (json!(["a", null]), "prompt[1]", "null"),
        ] {
            let e = Prompt::parse(&v).unwrap_err();
            assert_eq!(e.param, param, "{v}");
            assert!(e.message.contains(words), "{v}: {}", e.message);
        }
        let many: Vec<Value> = (0..17).map(|_| json!("x")).collect();
        assert_eq!(
            Prompt::parse(&Value::Array(many)).unwrap_err().param,
            "prompt"
        );
    }
}
