//! A chat's `tools` and `tool_choice` (and the older `functions` and `function_call`): which
//! functions the model is offered, and whether it may, must or must not call one.

use hearth_engine::grammar::{Function, GrammarSpec, ToolCalls};
use hearth_models::ToolCallFormat;
use serde_json::{json, Value};

use super::invalid::{invalid, Invalid};

/// What a request offers and asks.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolRequest {
    /// The tools in OpenAI's shape, `[{"type": "function", "function": {...}}]`, as templates
    /// take them.
    pub tools: Vec<Value>,
    pub choice: ToolChoice,
    /// `parallel_tool_calls`: a required call may be several.
    pub parallel: bool,
}

impl Default for ToolRequest {
    fn default() -> Self {
        Self {
            tools: Vec::new(),
            choice: ToolChoice::Auto,
            parallel: true,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model is not to call a tool (and is not shown them).
    None,
    /// The model calls a tool if it decides to.
    #[default]
    Auto,
    /// The model must call one of the tools.
    Required,
    /// The model must call this function.
    Named(String),
}

/// A field that is there and not `null`.
fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

impl ToolRequest {
    /// Reads `tools` (or `functions`) and `tool_choice` (or `function_call`).
    pub fn read(
        tools: Option<&Value>,
        functions: Option<&Value>,
        tool_choice: Option<&Value>,
        function_call: Option<&Value>,
    ) -> Result<Self, Invalid> {
        let tools = match (present(tools), present(functions)) {
            (Some(t), _) => read_tools(t, "tools", false)?,
            (None, Some(f)) => read_tools(f, "functions", true)?,
            (None, None) => Vec::new(),
        };
        let (choice, param) = match (present(tool_choice), present(function_call)) {
            (Some(c), _) => (Some(c), "tool_choice"),
            (None, Some(c)) => (Some(c), "function_call"),
            (None, None) => (None, "tool_choice"),
        };
        let choice = match choice {
            None => ToolChoice::Auto,
            Some(Value::String(s)) => match s.as_str() {
                "none" => ToolChoice::None,
                "auto" => ToolChoice::Auto,
                "required" if param == "tool_choice" => ToolChoice::Required,
                other => {
                    return Err(invalid(
                        param,
                        format!(
                            "{param} is `{other}`; it must be none, auto, required or a function"
                        ),
                    ))
                }
            },
            Some(Value::Object(o)) => {
                // `{"type": "function", "function": {"name"}}`, or the older `{"name"}`.
                let name = o
                    .get("function")
                    .and_then(|f| f.get("name"))
                    .or_else(|| o.get("name"))
                    .and_then(Value::as_str);
                match name {
                    Some(name) => ToolChoice::Named(name.to_string()),
                    None => {
                        return Err(invalid(
                            param,
                            format!("{param} must name a function: {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}"),
                        ))
                    }
                }
            }
            Some(_) => {
                return Err(invalid(
                    param,
                    format!("{param} must be a string or an object"),
                ))
            }
        };
        if matches!(choice, ToolChoice::Required | ToolChoice::Named(_)) && tools.is_empty() {
            return Err(invalid(
                param,
                format!("{param} asks for a tool call, and no tools are given"),
            ));
        }
        if let ToolChoice::Named(name) = &choice {
            if !tools.iter().any(|t| t["function"]["name"] == name.as_str()) {
                return Err(invalid(
                    param,
                    format!("{param} names `{name}`, which is not among the tools"),
                ));
            }
        }
        Ok(Self {
            tools,
            choice,
            ..Self::default()
        })
    }

    /// The tools the model is shown: none where it is not to call one.
    pub fn offered(&self) -> Option<Value> {
        (!self.tools.is_empty() && self.choice != ToolChoice::None)
            .then(|| Value::Array(self.tools.clone()))
    }

    /// The grammar a forced call is held to, written in `format`: calls to any tool (one, or
    /// several where parallel calls are allowed) for `required`, one call to the function
    /// named; none where the model chooses.
    pub fn forced(&self, format: ToolCallFormat) -> Option<GrammarSpec> {
        let (named, parallel) = match &self.choice {
            ToolChoice::None | ToolChoice::Auto => return None,
            ToolChoice::Required => (None, self.parallel),
            ToolChoice::Named(name) => (Some(name.as_str()), false),
        };
        let functions = self
            .tools
            .iter()
            .map(|t| &t["function"])
            .filter(|f| named.is_none_or(|n| f["name"] == n))
            .map(|f| Function {
                name: f["name"].as_str().unwrap_or_default().to_string(),
                parameters: f.get("parameters").cloned().unwrap_or(Value::Null),
                strict: f.get("strict").and_then(Value::as_bool).unwrap_or(false),
            })
            .collect();
        Some(GrammarSpec::ToolCalls(ToolCalls {
            format,
            functions,
            parallel,
        }))
    }
}

/// `tools`, each `{"type": "function", "function": {"name", "description"?, "parameters"?,
/// "strict"?}}`; `functions` (`legacy`) lists the inner objects.
fn read_tools(value: &Value, param: &str, legacy: bool) -> Result<Vec<Value>, Invalid> {
    let Value::Array(items) = value else {
        return Err(invalid(param, format!("{param} must be an array")));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{param}[{i}]");
        let function = if legacy {
            item
        } else {
            if item.get("type").and_then(Value::as_str) != Some("function") {
                return Err(invalid(
                    format!("{at}.type"),
                    format!("{at}.type must be `function`"),
                ));
            }
            item.get("function").ok_or_else(|| {
                invalid(
                    format!("{at}.function"),
                    format!("{at}.function is missing"),
                )
            })?
        };
        let fat = if legacy {
            at.clone()
        } else {
            format!("{at}.function")
        };
        let Some(name) = function.get("name").and_then(Value::as_str) else {
            return Err(invalid(
                format!("{fat}.name"),
                format!("{fat}.name must be a string"),
            ));
        };
        // OpenAI's rule for function names.
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(invalid(
                format!("{fat}.name"),
                format!("{fat}.name `{name}` must be 1 to 64 letters, digits, _ or -"),
            ));
        }
        match function.get("parameters") {
            None | Some(Value::Null) | Some(Value::Object(_)) => {}
            Some(_) => {
                return Err(invalid(
                    format!("{fat}.parameters"),
                    format!("{fat}.parameters must be a JSON Schema object"),
                ))
            }
        }
        out.push(json!({ "type": "function", "function": function }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn weather() -> Value {
        json!([{ "type": "function", "function": { "name": "get_weather",
                 "parameters": { "type": "object", "properties": { "city": { "type": "string" } } } } }])
    }

    #[test]
    fn choices_are_read_in_both_forms() {
        let tools = weather();
        let read = |choice: Value| ToolRequest::read(Some(&tools), None, Some(&choice), None);
        assert_eq!(read(json!("auto")).unwrap().choice, ToolChoice::Auto);
        assert_eq!(read(json!("none")).unwrap().offered(), None);
        assert_eq!(
            read(json!("required")).unwrap().choice,
            ToolChoice::Required
        );
        let named = json!({ "type": "function", "function": { "name": "get_weather" } });
        assert_eq!(
            read(named).unwrap().choice,
            ToolChoice::Named("get_weather".into())
        );
        // The older fields.
        let functions = json!([{ "name": "get_weather" }]);
        let old = ToolRequest::read(
            None,
            Some(&functions),
            None,
            Some(&json!({ "name": "get_weather" })),
        )
        .unwrap();
        assert_eq!(old.choice, ToolChoice::Named("get_weather".into()));
        assert_eq!(old.tools[0]["function"]["name"], "get_weather");
        // No tools: nothing offered, and auto.
        let none = ToolRequest::read(None, None, None, None).unwrap();
        assert_eq!((none.offered(), none.choice), (None, ToolChoice::Auto));
    }

    #[test]
    fn bad_tools_and_choices_are_refused_by_name() {
        let tools = weather();
        for (tools, choice, param) in [
            (json!({}), json!("auto"), "tools"),
            (
                json!([{ "type": "retrieval" }]),
                json!("auto"),
                "tools[0].type",
            ),
            (
                json!([{ "type": "function", "function": { "name": "a b" } }]),
                json!("auto"),
                "tools[0].function.name",
            ),
            (
                json!([{ "type": "function", "function": { "name": "f", "parameters": 3 } }]),
                json!("auto"),
                "tools[0].function.parameters",
            ),
            (tools.clone(), json!("sometimes"), "tool_choice"),
            (
                tools.clone(),
                json!({ "type": "function", "function": { "name": "other" } }),
                "tool_choice",
            ),
            (json!([]), json!("required"), "tool_choice"),
        ] {
            let err = ToolRequest::read(Some(&tools), None, Some(&choice), None).unwrap_err();
            assert_eq!(err.param, param, "{tools} {choice}");
        }
    }
}
