//! Chat templates: the Jinja template a model file carries (`tokenizer.chat_template`),
//! rendered with minijinja the way Hugging Face's `apply_chat_template` renders it, so that a
//! list of messages becomes exactly the prompt string the model was trained on.
//!
//! Compatibility with Hugging Face (Python Jinja2): `trim_blocks` and `lstrip_blocks` on,
//! `break`/`continue`, Python string and dict methods (`.strip()`, `.startswith()`,
//! `.items()`, ... via minijinja-contrib's pycompat), `raise_exception(msg)`, a `tojson` that
//! does not HTML-escape, and the variables `messages`, `add_generation_prompt`, `bos_token`,
//! `eos_token`.
//!
//! A model without a template gets [`PLAIN_TEMPLATE`]: each message as `Role: content`
//! followed by a blank line, and `Assistant:` when a generation prompt is requested.

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, ErrorKind};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::tokenizer::Tokenizer;

/// The metadata key holding the template.
pub const TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// The format used when a model file has no chat template:
///
/// ```text
/// System: You are terse.
///
/// User: Hi
///
/// Assistant:
/// ```
pub const PLAIN_TEMPLATE: &str = "{% for message in messages %}\
{{ message.role | capitalize }}: {{ message.content }}\n\n\
{% endfor %}\
{% if add_generation_prompt %}Assistant:{% endif %}";

const NAME: &str = "chat_template";

/// Instructions a template may run for one prompt: hundreds of times what a long chat with
/// tools takes, and a few tenths of a second at most.
const TEMPLATE_FUEL: u64 = 5_000_000;

/// The longest prompt a template may write: a prompt is read by a model, whose context is
/// far shorter.
const TEMPLATE_OUTPUT: usize = 64 << 20;

/// A writer that refuses to grow past [`TEMPLATE_OUTPUT`].
struct Capped(Vec<u8>);

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > TEMPLATE_OUTPUT {
            // Filled to the cap, so that the caller can tell why rendering stopped.
            let room = TEMPLATE_OUTPUT - self.0.len();
            self.0.extend_from_slice(&buf[..room]);
            return Err(std::io::Error::other("the template's output is too long"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One message of a conversation, with the fields Hugging Face's templates read for tool use.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool` (or whatever roles the template knows).
    pub role: String,
    pub content: String,
    /// The tools an assistant turn called (absent from the template's view when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// A `tool` message: the call it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A `tool` message: the function that answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }
}

/// A call of a tool, as OpenAI's API and Hugging Face's templates hold it:
/// `{"id", "type": "function", "function": {"name", "arguments"}}`, the arguments a JSON
/// object (templates write them with `tojson`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCall,
}

/// The function a [`ToolCall`] names and its arguments.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: serde_json::Value,
}

impl ToolCall {
    pub fn function(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: serde_json::Value,
    ) -> Self {
        ToolCall {
            id: id.into(),
            kind: "function",
            function: FunctionCall {
                name: name.into(),
                arguments,
            },
        }
    }
}

/// Variables besides `messages` that templates read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatOptions {
    /// End the prompt with the opening of an assistant turn, for generation.
    pub add_generation_prompt: bool,
    pub bos_token: String,
    pub eos_token: String,
    /// The tools the model may call, in OpenAI's shape (`[{"type": "function", "function":
    /// {"name", "description", "parameters"}}]`); `None` as Hugging Face passes it without.
    pub tools: Option<serde_json::Value>,
}

impl ChatOptions {
    /// BOS and EOS texts taken from the tokenizer.
    pub fn for_tokenizer(tokenizer: &Tokenizer, add_generation_prompt: bool) -> Self {
        let text = |id: Option<u32>| {
            id.and_then(|id| tokenizer.piece(id))
                .unwrap_or_default()
                .to_string()
        };
        ChatOptions {
            add_generation_prompt,
            bos_token: text(tokenizer.special().bos),
            eos_token: text(tokenizer.special().eos),
            tools: None,
        }
    }
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    /// True when the model had no template and [`PLAIN_TEMPLATE`] stands in.
    is_fallback: bool,
}

#[derive(Serialize)]
struct Context<'a> {
    messages: &'a [ChatMessage],
    add_generation_prompt: bool,
    bos_token: &'a str,
    eos_token: &'a str,
    /// `none` without tools, as Hugging Face passes it: templates test `tools is not none`.
    tools: Option<&'a serde_json::Value>,
}

impl ChatTemplate {
    /// Compiles `source`; a syntax error names the template line.
    pub fn new(source: &str) -> Result<Self> {
        let mut env = Environment::new();
        // Hugging Face renders with trim_blocks and lstrip_blocks; templates are written for
        // that, and without it they emit stray newlines and indentation.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        // A template comes with the model file, from anyone: it gets a budget of
        // instructions (a loop that never ends runs out) and minijinja's recursion limit.
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, source.to_string())
            .map_err(template_error)?;
        Ok(ChatTemplate {
            env,
            source: source.to_string(),
            is_fallback: false,
        })
    }

    /// The documented plain format, for models without a template.
    pub fn plain() -> Self {
        let mut t = Self::new(PLAIN_TEMPLATE)
            .unwrap_or_else(|e| unreachable!("the built-in template compiles: {e}"));
        t.is_fallback = true;
        t
    }

    /// The file's `tokenizer.chat_template`, or the plain format when it has none.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        match file.get::<&str>(TEMPLATE_KEY)? {
            Some(source) => Self::new(source).map_err(|e| match e {
                Error::Template { line, message } => Error::Template {
                    line,
                    message: format!("{} `{TEMPLATE_KEY}`: {message}", file.path().display()),
                },
                e => e,
            }),
            None => Ok(Self::plain()),
        }
    }

    /// Renders a conversation into a prompt string. Errors (including the template's own
    /// `raise_exception`) name the template line.
    ///
    /// Where a [`sandbox`](crate::chat_sandbox) is set up (the server sets one up), a
    /// template that came with the model renders in its worker process, whose memory is
    /// capped: a template that grows a string without end fails there, not here.
    pub fn render(&self, messages: &[ChatMessage], options: &ChatOptions) -> Result<String> {
        let context = Context {
            messages,
            add_generation_prompt: options.add_generation_prompt,
            bos_token: &options.bos_token,
            eos_token: &options.eos_token,
            tools: options.tools.as_ref(),
        };
        match crate::chat_sandbox::installed() {
            Some(sandbox) if !self.is_fallback => sandbox.render(&self.source, &context),
            _ => self.render_context(context),
        }
    }

    /// Renders with `context` as the template's variables (in this process).
    pub(crate) fn render_context(&self, context: impl Serialize) -> Result<String> {
        let template = self.env.get_template(NAME).map_err(template_error)?;
        let mut out = Capped(Vec::new());
        // A template is the model file's code: should the engine panic on it (minijinja 2.24
        // overflows on a backwards slice that starts before its stop, which a debug build
        // catches), that is this template's error, not the caller's crash.
        let rendered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            template.render_captured_to(context, &mut out)
        }))
        .map_err(|panic| Error::Template {
            line: None,
            message: format!(
                "the template engine failed on this template: {}",
                panic
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("a panic")
            ),
        })?;
        if out.0.len() + 1 > TEMPLATE_OUTPUT {
            return Err(Error::Template {
                line: None,
                message: format!("the template wrote more than {} MiB", TEMPLATE_OUTPUT >> 20),
            });
        }
        rendered.map_err(template_error)?;
        Ok(String::from_utf8_lossy(&out.0).into_owned())
    }

    /// The template text.
    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn is_fallback(&self) -> bool {
        self.is_fallback
    }
}

/// `hearth template-worker`: renders templates for a server in this process, its memory
/// capped (see [`crate::chat_sandbox`]), keeping the last template compiled (a server renders
/// one template for every request).
pub fn serve_template_worker() -> std::io::Result<()> {
    let mut compiled: Option<(String, ChatTemplate)> = None;
    crate::chat_sandbox::serve_worker(move |source, context| {
        if compiled.as_ref().is_none_or(|(s, _)| s != source) {
            compiled = Some((source.to_string(), ChatTemplate::new(source)?));
        }
        let (_, template) = compiled.as_ref().expect("compiled above");
        template.render_context(context)
    })
}

fn template_error(e: minijinja::Error) -> Error {
    let message = match e.detail() {
        Some(detail) => format!("{}: {detail}", e.kind()),
        None => e.kind().to_string(),
    };
    Error::Template {
        line: e.line(),
        message,
    }
}

/// `raise_exception(msg)`: templates use it to reject conversations they cannot format.
fn raise_exception(message: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

/// Python's `json.dumps` as Jinja2's HF environment uses it: `", "` and `": "` between items
/// (`","` and a new line when indented), keys in the order given, no HTML escaping
/// (minijinja's built-in escapes `<`, `>`, `&` and `'`), optional indentation.
fn tojson(
    value: Value,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> std::result::Result<Value, minijinja::Error> {
    // `tojson(4)` or `tojson(indent=4)`, as Jinja2 takes it.
    let indent: Option<usize> = match (indent, kwargs.get::<Option<usize>>("indent")?) {
        (_, Some(n)) => Some(n),
        (Some(v), None) if !v.is_none() => Some(usize::try_from(v)?),
        _ => None,
    };
    kwargs.assert_all_used()?;
    let mut out = Vec::new();
    let written = match indent {
        None => value.serialize(&mut serde_json::Serializer::with_formatter(
            &mut out, PythonJson,
        )),
        Some(n) => {
            let pad = vec![b' '; n];
            let fmt = serde_json::ser::PrettyFormatter::with_indent(&pad);
            value.serialize(&mut serde_json::Serializer::with_formatter(&mut out, fmt))
        }
    };
    written
        .map(|()| Value::from_safe_string(String::from_utf8_lossy(&out).into_owned()))
        .map_err(|e| {
            minijinja::Error::new(ErrorKind::InvalidOperation, "cannot convert to JSON")
                .with_source(e)
        })
}

/// `json.dumps`'s default separators, `", "` and `": "`.
struct PythonJson;

/// `", "` before every item of an array or object but the first.
fn item_separator<W: ?Sized + std::io::Write>(writer: &mut W, first: bool) -> std::io::Result<()> {
    if first {
        Ok(())
    } else {
        writer.write_all(b", ")
    }
}

impl serde_json::ser::Formatter for PythonJson {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        item_separator(writer, first)
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        item_separator(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(source: &str, messages: &[ChatMessage]) -> Result<String> {
        ChatTemplate::new(source)?.render(
            messages,
            &ChatOptions {
                add_generation_prompt: true,
                bos_token: "<s>".into(),
                eos_token: "</s>".into(),
                tools: None,
            },
        )
    }

    #[test]
    fn plain_fallback_format() {
        let messages = [
            ChatMessage::new("system", "Be terse."),
            ChatMessage::new("user", "Hi"),
        ];
        let out = ChatTemplate::plain()
            .render(
                &messages,
                &ChatOptions {
                    add_generation_prompt: true,
                    ..ChatOptions::default()
                },
            )
            .unwrap();
        assert_eq!(out, "System: Be terse.\n\nUser: Hi\n\nAssistant:");
        assert!(ChatTemplate::plain().is_fallback());
    }

    #[test]
    fn python_methods_and_whitespace_control_behave_like_hugging_face() {
        // A Llama-2 style template: bos_token, .strip(), raise_exception, loop.index0.
        let llama2 = "{% if messages[0]['role'] == 'system' %}\
            {% set sys = '<<SYS>>\\n' + messages[0]['content'].strip() + '\\n<</SYS>>\\n\\n' %}\
            {% set messages = messages[1:] %}{% else %}{% set sys = '' %}{% endif %}\
            {% for m in messages %}\
            {% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}\
            {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\
            {% endif %}\
            {% if m['role'] == 'user' %}{{ bos_token + '[INST] ' + (sys if loop.first else '') + m['content'].strip() + ' [/INST]' }}\
            {% else %}{{ ' ' + m['content'].strip() + ' ' + eos_token }}{% endif %}\
            {% endfor %}";
        let out = render(
            llama2,
            &[
                ChatMessage::new("system", " Be terse. "),
                ChatMessage::new("user", "Hi "),
            ],
        )
        .unwrap();
        assert_eq!(out, "<s>[INST] <<SYS>>\nBe terse.\n<</SYS>>\n\nHi [/INST]");
        let err = render(llama2, &[ChatMessage::new("assistant", "x")]).unwrap_err();
        assert!(err.to_string().contains("must alternate"), "{err}");

        // trim_blocks + lstrip_blocks: block tags on their own lines leave no blank lines.
        let multi = "{% for m in messages %}\n    {% if m.role == 'user' %}\nU:{{ m.content }}\n    {% endif %}\n{% endfor %}";
        assert_eq!(
            render(multi, &[ChatMessage::new("user", "a")]).unwrap(),
            "U:a\n"
        );

        let json = render(
            "{{ messages[0] | tojson }}",
            &[ChatMessage::new("user", "<b>&")],
        );
        // Python's json.dumps: ", " and ": " between items, nothing escaped for HTML.
        assert_eq!(json.unwrap(), r#"{"role": "user", "content": "<b>&"}"#);
        let loops = "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.content }}{% endfor %}";
        let two = [ChatMessage::new("user", "a"), ChatMessage::new("user", "b")];
        assert_eq!(render(loops, &two).unwrap(), "a");
    }

    /// A template from a hostile file cannot loop forever or fill memory: it runs out of
    /// instructions, or of room for its output, and says so.
    #[test]
    fn hostile_templates_stop() {
        for source in [
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
            "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}",
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        ] {
            let err = render(source, &[ChatMessage::new("user", "Hi")]).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains("fuel")
                    || text.contains("MiB")
                    || text.contains("recursion")
                    || text.contains("too large"),
                "{source}: {text}"
            );
        }
    }

    /// A panic inside the template engine (found by the `chat_template` fuzz target: a
    /// backwards slice whose start is before its stop overflows in minijinja 2.24 where
    /// overflow is checked) is the template's error; elsewhere the slice is empty.
    #[test]
    fn a_panic_in_the_engine_is_the_template_s_error() {
        let messages = [ChatMessage::new("user", "a"), ChatMessage::new("user", "b")];
        match render(
            "{% for m in messages[:2:-1] %}{{ m.content }}{% endfor %}.",
            &messages,
        ) {
            Ok(text) => assert_eq!(text, "."),
            Err(e) => assert!(e.to_string().contains("template engine failed"), "{e}"),
        }
    }

    #[test]
    fn errors_name_the_line() {
        let err = ChatTemplate::new("line one\n{% if %}\n").err().unwrap();
        match &err {
            Error::Template { line, .. } => assert_eq!(*line, Some(2)),
            e => panic!("unexpected {e}"),
        }
        assert!(
            err.to_string()
                .starts_with("chat template line 2: syntax error"),
            "{err}"
        );

        let err = render("ok\n\n{{ messages | nosuchfilter }}", &[]).unwrap_err();
        assert!(err.to_string().contains("line 3"), "{err}");
    }
}
