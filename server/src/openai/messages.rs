//! A chat's `messages` as OpenAI's API takes them: a role it knows, and content that is
//! text, an array of parts of which this server reads the text ones, or (for an assistant
//! turn that called tools) `null`. Anything else is a 400 naming the message and field.

use hearth_models::{ChatMessage, ToolCall};
use serde_json::{Map, Value};
use utoipa::openapi::schema::{ArrayBuilder, OneOfBuilder, SchemaType, Type};
use utoipa::openapi::{ObjectBuilder, RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use super::invalid::{invalid, Invalid};

/// The roles OpenAI's chat API knows. `developer` is the newer name of `system`, and the
/// deprecated `function` the older name of `tool`, so templates see only the usual four.
const ROLES: [(&str, &str); 6] = [
    ("system", "system"),
    ("developer", "system"),
    ("user", "user"),
    ("assistant", "assistant"),
    ("tool", "tool"),
    ("function", "tool"),
];

/// One message, as the chat template reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Message(pub ChatMessage);

impl Message {
    /// `messages`: a non-empty array of messages.
    pub fn list(value: &Value) -> Result<Vec<Message>, Invalid> {
        let items = match value {
            Value::Array(items) if items.is_empty() => {
                return Err(invalid("messages", "messages is empty"))
            }
            Value::Array(items) => items,
            _ => return Err(invalid("messages", "messages must be an array of messages")),
        };
        items
            .iter()
            .enumerate()
            .map(|(i, m)| Self::parse(m, i))
            .collect()
    }

    fn parse(value: &Value, i: usize) -> Result<Message, Invalid> {
        let at = format!("messages[{i}]");
        let Value::Object(fields) = value else {
            return Err(invalid(at.clone(), format!("{at} must be an object")));
        };
        let role = match fields.get("role") {
            Some(Value::String(r)) => r.as_str(),
            Some(_) | None => {
                return Err(invalid(
                    format!("{at}.role"),
                    format!("{at}.role must be one of {}", role_names()),
                ))
            }
        };
        let Some(&(_, template_role)) = ROLES.iter().find(|(name, _)| *name == role) else {
            return Err(invalid(
                format!("{at}.role"),
                format!("{at}.role is `{role}`; it must be one of {}", role_names()),
            ));
        };
        let content = content(fields, role, &at)?;
        let mut message = ChatMessage::new(template_role, content);
        if template_role == "assistant" {
            message.tool_calls = tool_calls(fields.get("tool_calls"), &at)?;
        }
        if template_role == "tool" {
            let text = |key: &str| match fields.get(key) {
                Some(Value::String(s)) => Ok(Some(s.clone())),
                None | Some(Value::Null) => Ok(None),
                Some(_) => Err(invalid(
                    format!("{at}.{key}"),
                    format!("{at}.{key} must be a string"),
                )),
            };
            message.tool_call_id = text("tool_call_id")?;
            message.name = text("name")?;
        }
        Ok(Message(message))
    }
}

/// An assistant turn's `tool_calls`: `[{"id", "type": "function", "function": {"name",
/// "arguments"}}]`, the arguments a JSON text (as OpenAI's API writes them) that templates get
/// as the object it holds.
fn tool_calls(value: Option<&Value>, at: &str) -> Result<Vec<ToolCall>, Invalid> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(invalid(
                format!("{at}.tool_calls"),
                format!("{at}.tool_calls must be an array"),
            ))
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(j, call)| {
            let param = format!("{at}.tool_calls[{j}]");
            let field = |path: &[&str]| {
                path.iter()
                    .try_fold(call, |v, key| v.get(key))
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        invalid(
                            format!("{param}.{}", path.join(".")),
                            format!("{param}.{} must be a string", path.join(".")),
                        )
                    })
            };
            let id = field(&["id"])?;
            let name = field(&["function", "name"])?;
            let arguments = match call.get("function").and_then(|f| f.get("arguments")) {
                Some(Value::String(text)) => {
                    serde_json::from_str(text).unwrap_or(Value::String(text.clone()))
                }
                Some(v @ Value::Object(_)) => v.clone(),
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(_) => {
                    return Err(invalid(
                        format!("{param}.function.arguments"),
                        format!("{param}.function.arguments must be a JSON text"),
                    ))
                }
            };
            Ok(ToolCall::function(id, name, arguments))
        })
        .collect()
}

/// A message's text: a string, or its text parts joined.
fn content(fields: &Map<String, Value>, role: &str, at: &str) -> Result<String, Invalid> {
    let param = format!("{at}.content");
    match fields.get("content") {
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, p) in parts.iter().enumerate() {
                text.push_str(part(p, &format!("{param}[{j}]"))?);
            }
            Ok(text)
        }
        // OpenAI's API leaves the content out only where an assistant called tools.
        None | Some(Value::Null)
            if role == "assistant"
                && (fields.contains_key("tool_calls") || fields.contains_key("function_call")) =>
        {
            Ok(String::new())
        }
        None | Some(Value::Null) => Err(invalid(
            param.clone(),
            format!("{param} is missing or null; a {role} message needs its content"),
        )),
        Some(_) => Err(invalid(
            param.clone(),
            format!("{param} must be a string or an array of content parts"),
        )),
    }
}

/// A content part's text; parts that are not text are refused rather than dropped.
fn part<'a>(p: &'a Value, param: &str) -> Result<&'a str, Invalid> {
    let kind = p.get("type").and_then(Value::as_str);
    match (kind, p.get("text")) {
        (Some("text"), Some(Value::String(text))) => Ok(text),
        (Some("text"), _) => Err(invalid(
            format!("{param}.text"),
            format!("{param}.text must be a string"),
        )),
        (Some(other), _) => Err(invalid(
            format!("{param}.type"),
            format!("{param} is a `{other}` part; this server reads text parts only"),
        )),
        (None, _) => Err(invalid(
            format!("{param}.type"),
            format!("{param} must be an object with a `type`"),
        )),
    }
}

/// A message, for the API's description: read by hand above, so described by hand here.
impl PartialSchema for Message {
    fn schema() -> RefOr<Schema> {
        let string = || ObjectBuilder::new().schema_type(SchemaType::new(Type::String));
        let part = ObjectBuilder::new()
            .property(
                "type",
                ObjectBuilder::new()
                    .schema_type(SchemaType::new(Type::String))
                    .enum_values(Some(["text"])),
            )
            .property("text", string())
            .required("type")
            .required("text");
        // Also `null` in an assistant message with `tool_calls`: a case this schema leaves
        // out rather than describe per role.
        let content = OneOfBuilder::new()
            .item(string())
            .item(ArrayBuilder::new().items(part))
            .description(Some("Text, or parts of which only `text` ones are taken."));
        ObjectBuilder::new()
            .property(
                "role",
                ObjectBuilder::new()
                    .schema_type(SchemaType::new(Type::String))
                    .enum_values(Some(ROLES.map(|(name, _)| name))),
            )
            .property("content", content)
            .required("role")
            .required("content")
            .into()
    }
}

impl ToSchema for Message {}

fn role_names() -> String {
    ROLES.map(|(name, _)| name).join(", ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn roles_and_texts(v: Value) -> Vec<(String, String)> {
        Message::list(&v)
            .unwrap()
            .into_iter()
            .map(|m| (m.0.role, m.0.content))
            .collect()
    }

    #[test]
    fn openais_roles_and_content_forms_are_read() {
        let got = roles_and_texts(json!([
            { "role": "developer", "content": "Be brief." },
            { "role": "user", "content": [{ "type": "text", "text": "a" },
                                          { "type": "text", "text": "b" }] },
            { "role": "assistant", "content": null, "tool_calls": [] },
            { "role": "tool", "content": "42", "tool_call_id": "x" },
        ]));
        let want = [
            ("system", "Be brief."),
            ("user", "ab"),
            ("assistant", ""),
            ("tool", "42"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(r, c)| (r.to_string(), c.to_string()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn tool_calls_and_results_reach_the_template() {
        let list = Message::list(&json!([
            { "role": "assistant", "content": null, "tool_calls": [
                { "id": "call00001", "type": "function",
                  "function": { "name": "get_weather", "arguments": "{\"city\": \"Paris\"}" } }] },
            { "role": "tool", "content": "21 C", "tool_call_id": "call00001", "name": "get_weather" },
        ]))
        .unwrap();
        let call = &list[0].0.tool_calls[0];
        assert_eq!(
            (call.id.as_str(), call.function.name.as_str()),
            ("call00001", "get_weather")
        );
        assert_eq!(call.function.arguments, json!({ "city": "Paris" }));
        assert_eq!(list[1].0.tool_call_id.as_deref(), Some("call00001"));
        assert_eq!(list[1].0.name.as_deref(), Some("get_weather"));
        let bad = json!([{ "role": "assistant", "content": null,
                           "tool_calls": [{ "id": "x", "function": {} }] }]);
        assert_eq!(
            Message::list(&bad).unwrap_err().param,
            "messages[0].tool_calls[0].function.name"
        );
    }

    #[test]
    fn what_openai_refuses_is_refused_by_name() {
        for (v, param, words) in [
            (json!([]), "messages", "empty"),
            (json!("hi"), "messages", "array"),
            (json!([7]), "messages[0]", "object"),
            (
                json!([{ "role": "wizard", "content": "x" }]),
                "messages[0].role",
                "`wizard`",
            ),
            (json!([{ "content": "x" }]), "messages[0].role", "one of"),
            (
                json!([{ "role": "user", "content": null }]),
                "messages[0].content",
                "null",
            ),
            (
                json!([{ "role": "user" }]),
                "messages[0].content",
                "missing",
            ),
            (
                json!([{ "role": "assistant", "content": null }]),
                "messages[0].content",
                "null",
            ),
            (
                json!([{ "role": "user", "content": 5 }]),
                "messages[0].content",
                "string",
            ),
            (
                json!([{ "role": "user", "content": "a" },
                       { "role": "user", "content": [{ "type": "image_url" }] }]),
                "messages[1].content[0].type",
                "text parts only",
            ),
            (
                json!([{ "role": "user", "content": [{ "type": "text" }] }]),
                "messages[0].content[0].text",
                "string",
            ),
        ] {
            let e = Message::list(&v).unwrap_err();
            assert_eq!(e.param, param, "{v}");
            assert!(e.message.contains(words), "{v}: {}", e.message);
        }
    }
}
