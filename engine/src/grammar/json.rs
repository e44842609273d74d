//! How JSON Schemas compile, wherever a grammar holds one (`json_schema`, JSON mode, a forced
//! tool call's arguments).

use llguidance::JsonCompileOptions;

/// The whitespace a JSON Schema allows between tokens (before and after a brace, bracket,
/// comma or colon): none, a space, or one or two line ends and an indent of up to 20 spaces
/// or tabs. This is llama.cpp's choice (`SPACE_RULE` of its JSON Schema converter): a model
/// may lay out its JSON as it was trained to, but cannot spend its tokens on blank lines.
const JSON_WHITESPACE: &str = r"[ ]|\n{1,2}[ \t]{0,20}";

/// How schemas compile: strict (a keyword llguidance does not implement is an error, and so
/// is `oneOf`, which it could only approximate by `anyOf`), with llama.cpp's whitespace.
pub(super) fn json_options() -> JsonCompileOptions {
    JsonCompileOptions {
        whitespace_flexible: false,
        whitespace_pattern: Some(JSON_WHITESPACE.to_string()),
        coerce_one_of: false,
        lenient: false,
        ..JsonCompileOptions::default()
    }
}
