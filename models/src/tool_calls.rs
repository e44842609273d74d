//! Tool calls in a model's own words: the format a chat template teaches its model, and the
//! calls parsed out of what the model wrote, as OpenAI's API returns them.
//!
//! - Hermes (Qwen 2.5 and 3, Hermes 2 Pro and 3, SmolLM3): `<tool_call>\n{"name": ...,
//!   "arguments": {...}}\n</tool_call>`, any number of them after some text.
//! - Llama 3.1 to 3.3: the reply is `{"name": ..., "parameters": {...}}` (after the
//!   `<|python_tag|>` control token, which decoding leaves out), several joined by `;`.
//! - Mistral (Nemo, Small): `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`, or the
//!   newer `[TOOL_CALLS]name[ARGS]{...}`; the control tokens themselves decode to nothing, so
//!   the text may begin at the `[` or the name.

use serde_json::{Map, Value};

use crate::chat::ChatMessage;

/// How a model writes its tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolCallFormat {
    Hermes,
    Llama3,
    Mistral,
}

/// What a model wrote, split into its text and its calls.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParsedReply {
    /// The text outside the calls, trimmed.
    pub content: String,
    /// Each call's function name and arguments (a JSON object).
    pub calls: Vec<(String, Value)>,
}

impl ToolCallFormat {
    /// The format a chat template teaches, from the markers its source writes; `None` for a
    /// template that knows no tools.
    pub fn of_template(source: &str) -> Option<Self> {
        if source.contains("<tool_call>") {
            Some(Self::Hermes)
        } else if source.contains("[TOOL_CALLS]") {
            Some(Self::Mistral)
        } else if source.contains("<|python_tag|>")
            || (source.contains("ipython") && source.contains("\"parameters\""))
        {
            Some(Self::Llama3)
        } else {
            None
        }
    }

    /// Where in `text` (so far) a call begins or may be beginning: streaming shows the text
    /// before it and holds the rest back until the reply ends.
    pub fn call_start(self, text: &str) -> Option<usize> {
        match self {
            Self::Hermes => marker_start(text, "<tool_call>"),
            Self::Mistral => marker_start(text, "[TOOL_CALLS]").or_else(|| {
                // The control token decoded to nothing: a reply that opens as a call.
                let trimmed = text.trim_start();
                let at = text.len() - trimmed.len();
                (trimmed.is_empty() || trimmed.starts_with('[')).then_some(at)
            }),
            Self::Llama3 => {
                let trimmed = text.trim_start();
                let at = text.len() - trimmed.len();
                (trimmed.is_empty() || trimmed.starts_with('{')).then_some(at)
            }
        }
    }

    /// Splits a whole reply into text and calls. Text that only looks like a call (JSON that
    /// is not an object with a name) stays text; a call that is cut off or malformed is an
    /// error, as it cannot be returned as one.
    pub fn parse(self, text: &str) -> Result<ParsedReply, String> {
        match self {
            Self::Hermes => parse_hermes(text),
            Self::Llama3 => parse_llama3(text),
            Self::Mistral => parse_mistral(text),
        }
    }
}

/// For a template that knows no tools: the conversation with the tools described at the end
/// of its system message (one is added where there is none) and earlier calls and results
/// written out in the Hermes format, in which the reply is then read. Results become user
/// turns, which every template takes.
pub fn hermes_conversation(messages: &[ChatMessage], tools: &Value) -> Vec<ChatMessage> {
    let listed: Vec<String> = tools
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| serde_json::to_string(t).unwrap_or_default())
        .collect();
    let instructions = format!(
        "# Tools\n\nYou may call one or more functions to help with the user's request. Their \
         signatures, in JSON Schema, are within <tools></tools>:\n<tools>\n{}\n</tools>\n\n\
         To call a function, answer with a JSON object holding its name and arguments within \
         <tool_call></tool_call> tags, one per call:\n<tool_call>\n{{\"name\": \
         <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>",
        listed.join("\n")
    );
    let mut out = Vec::with_capacity(messages.len() + 1);
    match messages.first() {
        Some(m) if m.role == "system" => out.push(ChatMessage::new(
            "system",
            format!("{}\n\n{instructions}", m.content),
        )),
        _ => out.push(ChatMessage::new("system", instructions)),
    }
    let rest = match messages.first() {
        Some(m) if m.role == "system" => &messages[1..],
        _ => messages,
    };
    for m in rest {
        let mut written = ChatMessage::new(m.role.clone(), m.content.clone());
        for call in &m.tool_calls {
            let json = serde_json::json!({
                "name": call.function.name,
                "arguments": call.function.arguments,
            });
            if !written.content.is_empty() {
                written.content.push('\n');
            }
            written
                .content
                .push_str(&format!("<tool_call>\n{json}\n</tool_call>"));
        }
        if m.role == "tool" {
            written.role = "user".into();
            written.content = format!("<tool_response>\n{}\n</tool_response>", m.content);
        }
        out.push(written);
    }
    out
}

/// The offset of `marker` in `text`, or of a tail of `text` that may be its beginning.
fn marker_start(text: &str, marker: &str) -> Option<usize> {
    if let Some(at) = text.find(marker) {
        return Some(at);
    }
    (1..marker.len())
        .rev()
        .filter(|&n| n <= text.len())
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && marker.starts_with(&text[text.len() - n..])
        })
        .map(|n| text.len() - n)
}

fn parse_hermes(text: &str) -> Result<ParsedReply, String> {
    let mut reply = ParsedReply::default();
    let mut content = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("<tool_call>") {
        content.push_str(&rest[..at]);
        let body = &rest[at + "<tool_call>".len()..];
        let (json, after) = match body.find("</tool_call>") {
            Some(end) => (&body[..end], &body[end + "</tool_call>".len()..]),
            // A reply that stopped before closing its last call: the call is all there is.
            None => (body, ""),
        };
        reply.calls.push(call_of(json.trim(), "arguments")?);
        rest = after;
    }
    content.push_str(rest);
    reply.content = content.trim().to_string();
    Ok(reply)
}

fn parse_llama3(text: &str) -> Result<ParsedReply, String> {
    let body = text
        .trim()
        .trim_start_matches("<|python_tag|>")
        .trim_start();
    if !body.starts_with('{') {
        return Ok(ParsedReply {
            content: text.trim().to_string(),
            calls: Vec::new(),
        });
    }
    let mut calls = Vec::new();
    for part in json_values(body, ';')? {
        match object_with_name(&part) {
            Some(_) => calls.push(call_from(part, "parameters")?),
            // JSON that is not a call: the model answered in JSON.
            None if calls.is_empty() => {
                return Ok(ParsedReply {
                    content: text.trim().to_string(),
                    calls: Vec::new(),
                })
            }
            None => return Err(format!("a tool call without a name: {part}")),
        }
    }
    Ok(ParsedReply {
        content: String::new(),
        calls,
    })
}

fn parse_mistral(text: &str) -> Result<ParsedReply, String> {
    let (content, body) = match text.find("[TOOL_CALLS]") {
        Some(at) => (&text[..at], &text[at + "[TOOL_CALLS]".len()..]),
        None if text.trim_start().starts_with("[{") => ("", text),
        None => {
            return Ok(ParsedReply {
                content: text.trim().to_string(),
                calls: Vec::new(),
            })
        }
    };
    let body = body.trim();
    let mut calls = Vec::new();
    if body.starts_with('[') {
        let list: Value =
            serde_json::from_str(body).map_err(|e| format!("tool calls are not JSON: {e}"))?;
        let Value::Array(items) = list else {
            unreachable!("a JSON text that starts with [ is an array")
        };
        for item in items {
            calls.push(call_from(item, "arguments")?);
        }
    } else {
        // `name[ARGS]{...}name[ARGS]{...}`
        let mut rest = body;
        while !rest.is_empty() {
            let Some(at) = rest.find("[ARGS]") else {
                return Err(format!("a tool call without [ARGS]: {rest}"));
            };
            let name = rest[..at].trim().to_string();
            let mut values = serde_json::Deserializer::from_str(&rest[at + "[ARGS]".len()..])
                .into_iter::<Value>();
            let args = values
                .next()
                .ok_or_else(|| format!("tool call `{name}` has no arguments"))?
                .map_err(|e| format!("tool call `{name}`'s arguments are not JSON: {e}"))?;
            calls.push((name, arguments(args)?));
            rest = rest[at + "[ARGS]".len() + values.byte_offset()..].trim_start();
        }
    }
    Ok(ParsedReply {
        content: content.trim().to_string(),
        calls,
    })
}

/// JSON values one after another, separated by whitespace or `separator`.
fn json_values(text: &str, separator: char) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start().trim_start_matches(separator).trim_start();
        if rest.is_empty() {
            return Ok(out);
        }
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        match values.next() {
            Some(Ok(v)) => out.push(v),
            Some(Err(e)) => return Err(format!("a tool call is not JSON: {e}")),
            None => return Ok(out),
        }
        rest = &rest[values.byte_offset()..];
    }
}

fn object_with_name(v: &Value) -> Option<&Map<String, Value>> {
    v.as_object()
        .filter(|o| o.get("name").is_some_and(Value::is_string))
}

fn call_of(json: &str, args_key: &str) -> Result<(String, Value), String> {
    let v: Value =
        serde_json::from_str(json).map_err(|e| format!("a tool call is not JSON: {e}"))?;
    call_from(v, args_key)
}

/// `(name, arguments)` from a call object; the arguments under `args_key`, or under the
/// other usual key, as an object (a JSON string of one is read).
fn call_from(v: Value, args_key: &str) -> Result<(String, Value), String> {
    let Some(object) = object_with_name(&v) else {
        return Err(format!(
            "a tool call must be an object with a \"name\": {v}"
        ));
    };
    let name = object["name"].as_str().unwrap_or_default().to_string();
    let args = object
        .get(args_key)
        .or_else(|| object.get("arguments"))
        .or_else(|| object.get("parameters"))
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    Ok((name, arguments(args)?))
}

fn arguments(args: Value) -> Result<Value, String> {
    match args {
        Value::Object(_) => Ok(args),
        Value::String(s) => match serde_json::from_str(&s) {
            Ok(v @ Value::Object(_)) => Ok(v),
            _ => Err(format!("tool call arguments must be a JSON object: {s}")),
        },
        Value::Null => Ok(Value::Object(Map::new())),
        other => Err(format!(
            "tool call arguments must be a JSON object: {other}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(name: &str, args: Value) -> (String, Value) {
        (name.to_string(), args)
    }

    #[test]
    fn hermes_calls_are_parsed_after_text() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \
                    {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"time\", \
                    \"arguments\": \"{\\\"tz\\\": \\\"CET\\\"}\"}\n</tool_call>";
        let got = ToolCallFormat::Hermes.parse(text).unwrap();
        assert_eq!(got.content, "Let me check.");
        assert_eq!(
            got.calls,
            vec![
                call("get_weather", json!({"city": "Paris"})),
                call("time", json!({"tz": "CET"}))
            ]
        );
        // No call: all text. An unclosed last call still counts; a broken one is an error.
        assert_eq!(ToolCallFormat::Hermes.parse(" Hi ").unwrap().content, "Hi");
        let open = ToolCallFormat::Hermes
            .parse("<tool_call>{\"name\": \"f\", \"arguments\": {}}")
            .unwrap();
        assert_eq!(open.calls, vec![call("f", json!({}))]);
        assert!(ToolCallFormat::Hermes
            .parse("<tool_call>{\"name\": ")
            .is_err());
        assert!(ToolCallFormat::Hermes
            .parse("<tool_call>[1]</tool_call>")
            .is_err());
    }

    #[test]
    fn llama3_replies_are_calls_when_they_are_named_objects() {
        let f = ToolCallFormat::Llama3;
        let got = f
            .parse("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}")
            .unwrap();
        assert_eq!(
            got.calls,
            vec![call("get_weather", json!({"city": "Oslo"}))]
        );
        assert_eq!(got.content, "");
        let two = f
            .parse("<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}}")
            .unwrap();
        assert_eq!(
            two.calls,
            vec![call("a", json!({})), call("b", json!({"x": 1}))]
        );
        // JSON that is not a call, and plain text, are the answer.
        assert_eq!(f.parse("{\"answer\": 4}").unwrap().calls, vec![]);
        assert_eq!(f.parse("It is 4.").unwrap().content, "It is 4.");
    }

    #[test]
    fn mistral_calls_in_both_of_its_shapes() {
        let f = ToolCallFormat::Mistral;
        let got = f
            .parse("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}, \"id\": \"abcdefghi\"}]")
            .unwrap();
        assert_eq!(
            got.calls,
            vec![call("get_weather", json!({"city": "Rome"}))]
        );
        // The control token decoded to nothing.
        let bare = f.parse("[{\"name\": \"f\", \"arguments\": {}}]").unwrap();
        assert_eq!(bare.calls, vec![call("f", json!({}))]);
        let newer = f
            .parse("[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]f[ARGS]{}")
            .unwrap();
        assert_eq!(newer.calls.len(), 2);
        assert_eq!(f.parse("Ciao.").unwrap().content, "Ciao.");
        assert!(f.parse("[TOOL_CALLS][{\"name\": ").is_err());
    }

    #[test]
    fn streaming_holds_back_from_where_a_call_may_begin() {
        let h = ToolCallFormat::Hermes;
        assert_eq!(h.call_start("Sure. <tool_"), Some(6));
        assert_eq!(h.call_start("Sure. <tool_call>{"), Some(6));
        assert_eq!(h.call_start("a < b"), None);
        assert_eq!(ToolCallFormat::Llama3.call_start("  {\"na"), Some(2));
        assert_eq!(ToolCallFormat::Llama3.call_start("The"), None);
        assert_eq!(ToolCallFormat::Mistral.call_start(""), Some(0));
    }

    #[test]
    fn a_template_without_tools_gets_them_in_the_system_message() {
        let tools = json!([{ "type": "function", "function": { "name": "f" } }]);
        let mut call = ChatMessage::new("assistant", "");
        call.tool_calls
            .push(crate::ToolCall::function("c1", "f", json!({ "x": 1 })));
        let conversation = [
            ChatMessage::new("user", "Go"),
            call,
            ChatMessage::new("tool", "done"),
        ];
        let out = hermes_conversation(&conversation, &tools);
        assert_eq!(out[0].role, "system");
        assert!(out[0]
            .content
            .contains(r#"{"type":"function","function":{"name":"f"}}"#));
        assert_eq!(
            out[2].content,
            "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"x\":1}}\n</tool_call>"
        );
        assert!(out[2].tool_calls.is_empty());
        assert_eq!(
            (out[3].role.as_str(), out[3].content.as_str()),
            ("user", "<tool_response>\ndone\n</tool_response>")
        );
        // An existing system message keeps its text first.
        let out = hermes_conversation(&[ChatMessage::new("system", "Be brief.")], &tools);
        assert!(out[0].content.starts_with("Be brief.\n\n# Tools"));
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn formats_are_told_by_their_templates_markers() {
        assert_eq!(
            ToolCallFormat::of_template("<tool_call>\n{{ x }}"),
            Some(ToolCallFormat::Hermes)
        );
        assert_eq!(
            ToolCallFormat::of_template("[TOOL_CALLS]["),
            Some(ToolCallFormat::Mistral)
        );
        assert_eq!(
            ToolCallFormat::of_template("<|python_tag|>"),
            Some(ToolCallFormat::Llama3)
        );
        assert_eq!(ToolCallFormat::of_template("{{ messages }}"), None);
    }
}
