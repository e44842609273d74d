//! The requests `/v1/chat/completions` and `/v1/completions` take. Fields a request may
//! leave out (or set to `null`) take llama.cpp's server defaults for sampling; unknown fields
//! are ignored, as OpenAI's API does; a known field of the wrong type or out of its range is
//! a 400 naming it. What one request may ask for is bounded (see the `MAX_` constants), so
//! that what the server holds for it is bounded too.

use hearth_engine::grammar::GrammarSpec;
use hearth_engine::sample::{GenerateParams, SamplerParams, MAX_TOP_LOGPROBS};
use hearth_engine::sched::RequestParams;
use hearth_engine::speculative::{DraftSource, Speculative};
use serde::Deserialize;
use serde_json::Value;
use utoipa::openapi::schema::{AllOfBuilder, OneOfBuilder, SchemaType, Type};
use utoipa::openapi::{ObjectBuilder, Ref, RefOr, Schema};
use utoipa::ToSchema;

pub use super::bounds::*;
use super::invalid::{from_value, invalid, Invalid};
use super::messages::Message;
use super::prompt::Prompt;
use super::tools::ToolRequest;
use super::whole::{self, whole};

/// `stop`: one string or several.
#[derive(Deserialize, ToSchema, Debug, Clone)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, ToSchema, Debug, Clone, Default)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

/// What both endpoints take: sampling, length and streaming. `null` is the same as left out.
#[derive(Deserialize, ToSchema, Debug, Clone, Default)]
pub struct Sampling {
    pub model: Option<String>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    /// Completions per prompt, 1 to 16 (times the prompts, at most 16).
    #[schema(minimum = 1, maximum = 16)]
    #[serde(default, deserialize_with = "whole::optional")]
    pub n: Option<u64>,
    #[schema(schema_with = token_count)]
    #[serde(default, deserialize_with = "whole::optional")]
    pub max_tokens: Option<u64>,
    #[schema(schema_with = token_count)]
    #[serde(default, deserialize_with = "whole::optional")]
    pub max_completion_tokens: Option<u64>,
    /// At most 4 strings, none empty, each at most 1,024 bytes.
    pub stop: Option<Stop>,
    pub temperature: Option<f32>,
    #[schema(minimum = 0, maximum = 1)]
    pub top_p: Option<f64>,
    /// OpenAI's is an int64; -1 is llama.cpp's "random".
    #[serde(default, deserialize_with = "whole::optional")]
    pub seed: Option<i64>,
    #[schema(minimum = -2, maximum = 2)]
    pub presence_penalty: Option<f64>,
    #[schema(minimum = -2, maximum = 2)]
    pub frequency_penalty: Option<f64>,
    /// Chat: a boolean. Completions: how many alternatives each token comes with, 0 to 20.
    #[schema(schema_with = logprobs_either)]
    pub logprobs: Option<Value>,
    #[schema(maximum = 20)]
    #[serde(default, deserialize_with = "whole::optional")]
    pub top_logprobs: Option<u32>,
    // llama.cpp's server's extensions.
    #[serde(default, deserialize_with = "whole::optional")]
    pub top_k: Option<usize>,
    #[schema(minimum = 0, maximum = 1)]
    pub min_p: Option<f64>,
    #[schema(exclusive_minimum = 0)]
    pub repeat_penalty: Option<f64>,
    /// Locally typical sampling's mass; 1 is off.
    #[schema(minimum = 0, maximum = 1)]
    pub typical_p: Option<f64>,
    /// Tail-free sampling's z; 1 is off.
    #[schema(minimum = 0, maximum = 1)]
    pub tfs_z: Option<f64>,
    /// Mirostat's version: 0 (off), 1 or 2.
    #[schema(minimum = 0, maximum = 2)]
    #[serde(default, deserialize_with = "whole::optional")]
    pub mirostat: Option<u8>,
    /// Mirostat's target surprise, in bits.
    #[schema(minimum = 0)]
    pub mirostat_tau: Option<f64>,
    /// Mirostat's learning rate.
    #[schema(exclusive_minimum = 0)]
    pub mirostat_eta: Option<f64>,
    /// DRY's penalty on extending a repeat; 0 is off.
    #[schema(minimum = 0)]
    pub dry_multiplier: Option<f64>,
    /// DRY's growth per further repeated token.
    #[schema(minimum = 1)]
    pub dry_base: Option<f64>,
    /// The longest repeat DRY lets pass.
    #[schema(minimum = 1)]
    #[serde(default, deserialize_with = "whole::optional")]
    pub dry_allowed_length: Option<usize>,
    /// How many recent tokens DRY looks at: -1 all, 0 off.
    #[schema(minimum = -1)]
    #[serde(default, deserialize_with = "whole::optional")]
    pub dry_penalty_last_n: Option<i64>,
    /// Texts a repeat DRY measures may not reach across (at most 16, none empty).
    pub dry_sequence_breakers: Option<Vec<String>>,
    /// How often XTC excludes the most likely tokens; 0 is off.
    #[schema(minimum = 0, maximum = 1)]
    pub xtc_probability: Option<f64>,
    /// How likely a token XTC excludes is.
    #[schema(minimum = 0, maximum = 1)]
    pub xtc_threshold: Option<f64>,
    // Hearth's own: frustratingly simple decoding.
    /// FSD's weight of the text's own n-gram model against the model; 0 is off.
    #[schema(minimum = 0, maximum = 1)]
    pub fsd_alpha: Option<f64>,
    /// How many of the likeliest tokens FSD chooses among.
    #[schema(minimum = 1)]
    #[serde(default, deserialize_with = "whole::optional")]
    pub fsd_k: Option<usize>,
    /// The order of FSD's n-gram model.
    #[schema(minimum = 2)]
    #[serde(default, deserialize_with = "whole::optional")]
    pub fsd_n: Option<usize>,
    /// Randomized FSD: this many tokens are sampled before FSD decodes.
    #[serde(default, deserialize_with = "whole::optional")]
    pub fsd_sample_steps: Option<usize>,
    /// Token id (as a string) to a bias from -100 to 100, added to its logit before
    /// sampling; at most 1,024 tokens.
    #[schema(value_type = Option<std::collections::HashMap<String, f64>>)]
    pub logit_bias: Option<Value>,
    /// `{"type": "text"}` (the default), `{"type": "json_object"}` (any JSON object) or
    /// `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`: the answer is
    /// held to the format token by token (with `strict` true or false alike, as llama.cpp's
    /// server). A schema keyword the compiler does not implement is refused by name.
    #[schema(schema_with = response_format)]
    pub response_format: Option<Value>,
    /// llama.cpp's server's extension: a GBNF grammar the answer is held to.
    #[schema(schema_with = grammar_text)]
    pub grammar: Option<String>,
    /// llama.cpp's server's extension: a JSON Schema the answer is held to.
    #[schema(schema_with = json_schema)]
    pub json_schema: Option<Value>,
    /// Chat only: functions the model may call (`[{"type": "function", "function": {"name",
    /// "description", "parameters"}}]`), shown to it through its chat template; its calls
    /// come back as the message's `tool_calls`.
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Value>,
    /// Chat only: `"none"`, `"auto"`, `"required"` or `{"type": "function", "function":
    /// {"name"}}`.
    #[schema(value_type = Option<Value>)]
    pub tool_choice: Option<Value>,
    /// Chat only: whether a forced call (`tool_choice` `"required"`) may be several calls;
    /// default true. A named function is always called once.
    pub parallel_tool_calls: Option<bool>,
    /// The older form of `tools`: the functions themselves.
    #[schema(value_type = Option<Vec<Object>>)]
    pub functions: Option<Value>,
    /// The older form of `tool_choice`: `"none"`, `"auto"` or `{"name"}`.
    #[schema(value_type = Option<Value>)]
    pub function_call: Option<Value>,
    /// Speculative decoding (llama.cpp's server's name): most tokens drafted per step; 0
    /// turns it off for this request. The answer is the same; only its speed changes.
    #[serde(
        rename = "speculative.n_max",
        default,
        deserialize_with = "whole::optional"
    )]
    #[schema(maximum = 64)]
    pub speculative_n_max: Option<u64>,
    /// A draft model stops drafting at a token it gives less than this probability.
    #[serde(rename = "speculative.p_min")]
    #[schema(minimum = 0, maximum = 1)]
    pub speculative_p_min: Option<f64>,
    /// Where drafts come from: `lookup` (n-grams of the prompt and the text so far) or
    /// `model` (the draft model the server was started with, `--draft`).
    #[serde(rename = "speculative.source")]
    pub speculative_source: Option<DraftSourceName>,
}

/// `speculative.source`'s values.
#[derive(Deserialize, ToSchema, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DraftSourceName {
    Lookup,
    Model,
}

/// Most tokens a request may have drafted per step.
const MAX_DRAFT: u64 = 64;

// Read field by field (`from_json`), so that each refusal names its field; the derived
// schema is the API's description of it.
/// `/v1/chat/completions`' body: the messages, and the fields both endpoints share.
#[derive(ToSchema)]
pub struct ChatRequest {
    #[schema(min_items = 1)]
    pub messages: Vec<Message>,
    #[serde(flatten)]
    #[schema(schema_with = chat_sampling)]
    pub sampling: Sampling,
}

/// `/v1/completions`' body: the prompts, and the fields both endpoints share.
#[derive(ToSchema)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    #[serde(flatten)]
    #[schema(schema_with = completion_sampling)]
    pub sampling: Sampling,
}

/// A sampling parameter checked against its range as the client sent it, then narrowed.
fn bounded(
    param: &'static str,
    value: Option<f64>,
    range: std::ops::RangeInclusive<f64>,
) -> Result<Option<f32>, Invalid> {
    match value {
        Some(v) if !range.contains(&v) => Err(invalid(
            param,
            format!(
                "{param} is {v}; it must be in [{}, {}]",
                range.start(),
                range.end()
            ),
        )),
        v => Ok(v.map(|v| v as f32)),
    }
}

// `logprobs` differs by endpoint: the shared fields, narrowed by each endpoint's form.
fn logprobs_either() -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(of_type(Type::Null))
        .item(of_type(Type::Boolean))
        .item(logprobs_count())
        .into()
}

fn of_type(t: Type) -> ObjectBuilder {
    ObjectBuilder::new().schema_type(t)
}

fn logprobs_count() -> ObjectBuilder {
    of_type(Type::Integer)
        .minimum(Some(0))
        .maximum(Some(MAX_TOP_LOGPROBS as u64))
}

fn narrowed(logprobs: impl IntoIterator<Item = ObjectBuilder>) -> RefOr<Schema> {
    let field = logprobs
        .into_iter()
        .fold(OneOfBuilder::new().item(of_type(Type::Null)), |f, form| {
            f.item(form)
        });
    AllOfBuilder::new()
        .item(Ref::from_schema_name("Sampling"))
        .item(ObjectBuilder::new().property("logprobs", field))
        .into()
}

fn chat_sampling() -> RefOr<Schema> {
    narrowed([of_type(Type::Boolean)])
}

/// Completions take `false` as no log probabilities, as `null` (`Sampling::logprobs`).
fn completion_sampling() -> RefOr<Schema> {
    narrowed([
        of_type(Type::Boolean).enum_values(Some([false])),
        logprobs_count(),
    ])
}

/// `max_tokens`: any whole number from 1, without an int64 format: larger ones are read
/// (saturated) and refused by the context check, not by their type.
fn token_count() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Integer, Type::Null]))
        .minimum(Some(1))
}

/// `response_format`: null, or one of its three forms (`json_object` may carry a `schema`,
/// as llama.cpp's server allows).
fn response_format() -> RefOr<Schema> {
    let kind = |t: &str| {
        of_type(Type::Object)
            .property("type", of_type(Type::String).enum_values(Some([t])))
            .required("type")
    };
    let or_null =
        |t: Type| ObjectBuilder::new().schema_type(SchemaType::from_iter([t, Type::Null]));
    let json_schema = of_type(Type::Object)
        .property("name", or_null(Type::String))
        .property("description", or_null(Type::String))
        .property("schema", or_null(Type::Object))
        .property("strict", or_null(Type::Boolean));
    OneOfBuilder::new()
        .description(Some(
            "`text` (the default), `json_object` (any JSON object) or `json_schema` (JSON valid \
             under `json_schema.schema`, with `strict` true or false alike): the answer is held \
             to the format token by token. A schema keyword the compiler does not implement is \
             a 400 naming it.",
        ))
        .item(of_type(Type::Null))
        .item(kind("text"))
        .item(kind("json_object").property("schema", or_null(Type::Object)))
        .item(
            kind("json_schema")
                .property("json_schema", json_schema)
                .required("json_schema"),
        )
        .into()
}

fn grammar_text() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .description(Some(
            "llama.cpp's extension: a GBNF grammar the answer is held to.",
        ))
}

fn json_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .description(Some(
            "llama.cpp's extension: a JSON Schema the answer is held to.",
        ))
}

/// The constraint `response_format` asks for; `None` for text. Each field is checked as the
/// OpenAPI description says; `name` and `description` are read and not used.
fn response_format_spec(value: Option<&Value>) -> Result<Option<GrammarSpec>, Invalid> {
    let f = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(f)) => f,
        Some(other) => {
            return Err(invalid(
                "response_format",
                format!("response_format is {other}; it must be an object with a `type`"),
            ))
        }
    };
    // A field that may be left out or null, else of one JSON type.
    let optional = |f: &serde_json::Map<String, Value>,
                    key: &str,
                    param: &str,
                    is: fn(&Value) -> bool,
                    what: &str| {
        match f.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) if is(v) => Ok(Some(v.clone())),
            Some(v) => Err(invalid(param, format!("{param} is {v}; it must be {what}"))),
        }
    };
    let kind = match f.get("type") {
        Some(Value::String(t)) => t.as_str(),
        None => {
            return Err(invalid(
                "response_format.type",
                "response_format.type is missing",
            ))
        }
        Some(other) => {
            return Err(invalid(
                "response_format.type",
                format!("response_format.type is {other}; it must be a string"),
            ))
        }
    };
    match kind {
        "text" => Ok(None),
        "json_object" => {
            let schema = optional(
                f,
                "schema",
                "response_format.schema",
                Value::is_object,
                "an object",
            )?;
            Ok(Some(
                schema.map_or(GrammarSpec::JsonObject, GrammarSpec::JsonSchema),
            ))
        }
        "json_schema" => {
            let param = "response_format.json_schema";
            let js = match f.get("json_schema") {
                Some(Value::Object(js)) => js,
                None | Some(Value::Null) => {
                    return Err(invalid(param, format!("{param} is missing")))
                }
                Some(other) => {
                    return Err(invalid(
                        param,
                        format!("{param} is {other}; it must be an object"),
                    ))
                }
            };
            optional(
                js,
                "name",
                "response_format.json_schema.name",
                Value::is_string,
                "a string",
            )?;
            optional(
                js,
                "description",
                "response_format.json_schema.description",
                Value::is_string,
                "a string",
            )?;
            optional(
                js,
                "strict",
                "response_format.json_schema.strict",
                Value::is_boolean,
                "a boolean",
            )?;
            let schema = optional(
                js,
                "schema",
                "response_format.json_schema.schema",
                Value::is_object,
                "an object",
            )?;
            // No schema: any JSON value, as llama.cpp's server reads it.
            Ok(Some(GrammarSpec::JsonSchema(
                schema.unwrap_or_else(|| Value::Object(Default::default())),
            )))
        }
        other => Err(invalid(
            "response_format.type",
            format!(
                "response_format type `{other}` is not supported; text, json_object and \
                 json_schema are"
            ),
        )),
    }
}

fn required(value: Option<Value>, param: &str) -> Result<Value, Invalid> {
    value.ok_or_else(|| invalid(param, format!("{param} is missing")))
}

impl ChatRequest {
    pub fn from_json(body: &Value) -> Result<Self, Invalid> {
        #[derive(Deserialize)]
        struct Fields {
            messages: Option<Value>,
        }
        let sampling = from_value(body)?;
        let fields: Fields = from_value(body)?;
        Ok(Self {
            messages: Message::list(&required(fields.messages, "messages")?)?,
            sampling,
        })
    }
}

impl CompletionRequest {
    pub fn from_json(body: &Value) -> Result<Self, Invalid> {
        #[derive(Deserialize)]
        struct Fields {
            prompt: Option<Value>,
        }
        let sampling = from_value(body)?;
        let fields: Fields = from_value(body)?;
        Ok(Self {
            prompt: Prompt::parse(&required(fields.prompt, "prompt")?)?,
            sampling,
        })
    }
}

impl Sampling {
    /// The scheduler's request; `default_max` when the request gives no length (OpenAI's
    /// completions default to 16 tokens, chat to the context's end). `chat` tells which
    /// shape `logprobs` has: chat's flag with `top_logprobs` beside it, or the completions'
    /// count of alternatives. `prompts` is how many prompts the request's completions share
    /// the bound on completions with.
    pub fn params(
        &self,
        default_max: Option<usize>,
        chat: bool,
        prompts: usize,
    ) -> Result<RequestParams, Invalid> {
        // Bounds are checked on the number as sent: a value just outside them must not be
        // rounded into them by the narrowing to f32.
        let presence_penalty = bounded("presence_penalty", self.presence_penalty, -2.0..=2.0)?;
        let frequency_penalty = bounded("frequency_penalty", self.frequency_penalty, -2.0..=2.0)?;
        let top_p = bounded("top_p", self.top_p, 0.0..=1.0)?;
        let min_p = bounded("min_p", self.min_p, 0.0..=1.0)?;
        let repeat_penalty = match self.repeat_penalty {
            Some(r) if !(r > 0.0 && r.is_finite()) => {
                return Err(invalid(
                    "repeat_penalty",
                    format!("repeat_penalty is {r}; it must be a finite number above 0"),
                ))
            }
            // A positive penalty too small for f32 stays positive.
            r => r.map(|r| (r as f32).max(f32::MIN_POSITIVE)),
        };
        self.refuse_unserved(chat)?;
        let logprobs = self.logprobs(chat)?;
        let n = self.n.unwrap_or(1);
        if n == 0 || n > MAX_COMPLETIONS as u64 {
            return Err(invalid(
                "n",
                format!("n is {n}; it must be 1 to {MAX_COMPLETIONS}"),
            ));
        }
        let n = n as usize;
        if n * prompts > MAX_COMPLETIONS {
            return Err(invalid(
                "n",
                format!(
                    "n is {n} for each of {prompts} prompts; at most {MAX_COMPLETIONS} \
                     completions per request"
                ),
            ));
        }
        let base = SamplerParams::default();
        let sampler = SamplerParams {
            temperature: self.temperature.unwrap_or(base.temperature),
            top_p: top_p.unwrap_or(base.top_p),
            top_k: self.top_k.unwrap_or(base.top_k),
            min_p: min_p.unwrap_or(base.min_p),
            repeat_penalty: repeat_penalty.unwrap_or(base.repeat_penalty),
            presence_penalty: presence_penalty.unwrap_or(0.0),
            frequency_penalty: frequency_penalty.unwrap_or(0.0),
            // Any int64 is a seed (its bits); -1 asks for a random one.
            seed: match self.seed {
                None | Some(-1) => rand::random(),
                Some(s) => s as u64,
            },
            logit_bias: self.logit_bias()?,
            ..base
        };
        let sampler = self.shaping(sampler)?;
        sampler
            .validate()
            .map_err(|e| invalid(e.field, e.to_string()))?;
        Ok(RequestParams {
            generate: GenerateParams {
                max_tokens: self.max_tokens()?.or(default_max),
                sampler,
                stop: self.stop()?,
                ignore_eos: false,
                logprobs,
                speculative: None,
                grammar: self.grammar()?.map(|(_, spec)| spec),
            },
            n,
        })
    }

    /// llama.cpp's further samplers (typical, tail-free, Mirostat, DRY, XTC) and Hearth's
    /// FSD over `base`, each bounded on the number as sent.
    fn shaping(&self, base: SamplerParams) -> Result<SamplerParams, Invalid> {
        let unit = |param, v| bounded(param, v, 0.0..=1.0);
        let at_least = |param, v: Option<f64>, low: f64| match v {
            Some(x) if !(x >= low && x.is_finite()) => Err(invalid(
                param,
                format!("{param} is {x}; it must be a finite number, {low} or more"),
            )),
            v => Ok(v.map(|v| v as f32)),
        };
        let breakers = match &self.dry_sequence_breakers {
            None => base.dry_sequence_breakers.clone(),
            Some(list) if list.len() > MAX_DRY_BREAKERS => {
                return Err(invalid(
                    "dry_sequence_breakers",
                    format!(
                        "dry_sequence_breakers has {} texts; at most {MAX_DRY_BREAKERS}",
                        list.len()
                    ),
                ))
            }
            Some(list) => {
                if list
                    .iter()
                    .any(|t| t.is_empty() || t.len() > MAX_STOP_BYTES)
                {
                    return Err(invalid(
                        "dry_sequence_breakers",
                        format!("a sequence breaker is empty or over {MAX_STOP_BYTES} bytes"),
                    ));
                }
                list.clone()
            }
        };
        let dry_penalty_last_n = match self.dry_penalty_last_n {
            None | Some(-1) => base.dry_penalty_last_n,
            Some(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX),
            Some(n) => {
                return Err(invalid(
                    "dry_penalty_last_n",
                    format!("dry_penalty_last_n is {n}; it must be -1 (all), 0 (off) or more"),
                ))
            }
        };
        Ok(SamplerParams {
            typical_p: unit("typical_p", self.typical_p)?.unwrap_or(base.typical_p),
            tfs_z: unit("tfs_z", self.tfs_z)?.unwrap_or(base.tfs_z),
            mirostat: self.mirostat.unwrap_or(base.mirostat),
            mirostat_tau: at_least("mirostat_tau", self.mirostat_tau, 0.0)?
                .unwrap_or(base.mirostat_tau),
            mirostat_eta: at_least("mirostat_eta", self.mirostat_eta, f64::MIN_POSITIVE)?
                .unwrap_or(base.mirostat_eta),
            dry_multiplier: at_least("dry_multiplier", self.dry_multiplier, 0.0)?
                .unwrap_or(base.dry_multiplier),
            dry_base: at_least("dry_base", self.dry_base, 1.0)?.unwrap_or(base.dry_base),
            dry_allowed_length: self.dry_allowed_length.unwrap_or(base.dry_allowed_length),
            dry_penalty_last_n,
            dry_sequence_breakers: breakers,
            xtc_probability: unit("xtc_probability", self.xtc_probability)?
                .unwrap_or(base.xtc_probability),
            xtc_threshold: unit("xtc_threshold", self.xtc_threshold)?.unwrap_or(base.xtc_threshold),
            fsd_alpha: unit("fsd_alpha", self.fsd_alpha)?.unwrap_or(base.fsd_alpha),
            fsd_k: self.fsd_k.unwrap_or(base.fsd_k),
            fsd_n: self.fsd_n.unwrap_or(base.fsd_n),
            fsd_sample_steps: self.fsd_sample_steps.unwrap_or(base.fsd_sample_steps),
            ..base
        })
    }

    /// `max_completion_tokens` (or the older `max_tokens`): at least 1, as OpenAI requires.
    /// Past the context it is refused once the prompt's length is known.
    fn max_tokens(&self) -> Result<Option<usize>, Invalid> {
        let (param, value) = match (self.max_completion_tokens, self.max_tokens) {
            (Some(v), _) => ("max_completion_tokens", v),
            (None, Some(v)) => ("max_tokens", v),
            (None, None) => return Ok(None),
        };
        if value == 0 {
            return Err(invalid(
                param,
                format!("{param} is 0; it must be at least 1"),
            ));
        }
        // Larger than any context: saturates, and the context check refuses it.
        Ok(Some(usize::try_from(value).unwrap_or(usize::MAX)))
    }

    /// `logit_bias`: token ids (strings of digits) to biases in [-100, 100]. Ids past the
    /// model's vocabulary are refused once it is known.
    fn logit_bias(&self) -> Result<Vec<(u32, f32)>, Invalid> {
        let map = match &self.logit_bias {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::Object(map)) => map,
            Some(_) => {
                return Err(invalid(
                    "logit_bias",
                    "logit_bias must be an object of token ids to biases",
                ))
            }
        };
        if map.len() > MAX_LOGIT_BIAS {
            return Err(invalid(
                "logit_bias",
                format!("{} tokens; at most {MAX_LOGIT_BIAS}", map.len()),
            ));
        }
        map.iter()
            .map(|(id, bias)| {
                let param = format!("logit_bias.{id}");
                let id: u32 = id
                    .parse()
                    .map_err(|_| invalid(&param, format!("{id:?} is not a token id")))?;
                match bias.as_f64() {
                    Some(b) if (-f64::from(MAX_BIAS)..=f64::from(MAX_BIAS)).contains(&b) => {
                        Ok((id, b as f32))
                    }
                    _ => Err(invalid(
                        &param,
                        format!("{bias} is not a bias from -{MAX_BIAS} to {MAX_BIAS}"),
                    )),
                }
            })
            .collect()
    }

    /// Speculative decoding for this request: the server's `default` (`--draft`) as the
    /// request's `speculative.*` fields change it.
    pub fn speculative(
        &self,
        default: Option<Speculative>,
    ) -> Result<Option<Speculative>, Invalid> {
        let p_min = bounded("speculative.p_min", self.speculative_p_min, 0.0..=1.0)?;
        let base = match (self.speculative_source, default) {
            (Some(DraftSourceName::Lookup), _) => Speculative::lookup(),
            (Some(DraftSourceName::Model), Some(d)) if d.source == DraftSource::Model => d,
            (Some(DraftSourceName::Model), _) => Speculative::model(),
            (None, Some(d)) => d,
            // Only a length or a probability: they tune drafting, and there is none.
            (None, None) => return Ok(None),
        };
        let max = match self.speculative_n_max {
            Some(0) => return Ok(None),
            Some(n) if n > MAX_DRAFT => {
                return Err(invalid(
                    "speculative.n_max",
                    format!("speculative.n_max is {n}; at most {MAX_DRAFT}"),
                ))
            }
            Some(n) => n as usize,
            None => base.max,
        };
        Ok(Some(Speculative {
            max,
            p_min: p_min.unwrap_or(base.p_min),
            ..base
        }))
    }

    /// The constraint on the answer and the field that asked for it: `response_format`
    /// (`json_object`, or `json_schema` with its `schema`; `text` is none), llama.cpp's
    /// `grammar` (GBNF) or its `json_schema`. At most one of them may constrain a request.
    /// Whether the grammar compiles is the engine's check, before any work.
    pub fn grammar(&self) -> Result<Option<(&'static str, GrammarSpec)>, Invalid> {
        let mut asked = Vec::new();
        if let Some(spec) = response_format_spec(self.response_format.as_ref())? {
            asked.push(("response_format", spec));
        }
        if let Some(text) = &self.grammar {
            asked.push(("grammar", GrammarSpec::Gbnf(text.clone())));
        }
        match &self.json_schema {
            None | Some(Value::Null) => {}
            Some(schema @ Value::Object(_)) => {
                asked.push(("json_schema", GrammarSpec::JsonSchema(schema.clone())))
            }
            Some(other) => {
                return Err(invalid(
                    "json_schema",
                    format!("json_schema is {other}; it must be a JSON Schema (an object)"),
                ))
            }
        }
        if let [(first, _), (second, _), ..] = asked.as_slice() {
            return Err(invalid(
                *second,
                format!("{first} and {second} both constrain the answer; give one of them"),
            ));
        }
        Ok(asked.pop())
    }

    /// Refuses what would change the answer but is not served: tool calls outside chat.
    /// Their neutral values (no tools, `tool_choice: "none"`) pass.
    fn refuse_unserved(&self, chat: bool) -> Result<(), Invalid> {
        let null = |v: &Option<Value>| matches!(v, None | Some(Value::Null));
        if chat {
            // Read (and refused where malformed) here, used where the prompt is rendered.
            self.tool_request()?;
            return Ok(());
        }
        // The completions endpoint has no tools; a request that offers them is refused rather
        // than answered as if it had not.
        for param in ["tools", "functions", "tool_choice", "function_call"] {
            let value = match param {
                "tools" => &self.tools,
                "functions" => &self.functions,
                "tool_choice" => &self.tool_choice,
                _ => &self.function_call,
            };
            let empty = matches!(value, Some(Value::Array(a)) if a.is_empty());
            // "none", and "auto" (tools themselves are refused here), change nothing.
            let neutral = matches!(value, Some(Value::String(s)) if s == "none" || s == "auto");
            if !null(value) && !empty && !neutral {
                return Err(invalid(
                    param,
                    format!("{param}: tool calls are served on /v1/chat/completions only"),
                ));
            }
        }
        Ok(())
    }

    /// A chat's tools and tool choice.
    pub fn tool_request(&self) -> Result<ToolRequest, Invalid> {
        let read = ToolRequest::read(
            self.tools.as_ref(),
            self.functions.as_ref(),
            self.tool_choice.as_ref(),
            self.function_call.as_ref(),
        )?;
        Ok(ToolRequest {
            parallel: self.parallel_tool_calls.unwrap_or(true),
            ..read
        })
    }

    fn stop(&self) -> Result<Vec<String>, Invalid> {
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stop.len() > MAX_STOP {
            return Err(invalid(
                "stop",
                format!("{} stop strings; at most {MAX_STOP}", stop.len()),
            ));
        }
        if stop.iter().any(String::is_empty) {
            return Err(invalid("stop", "a stop string is empty"));
        }
        if let Some(long) = stop.iter().find(|s| s.len() > MAX_STOP_BYTES) {
            return Err(invalid(
                "stop",
                format!(
                    "a stop string is {} bytes; at most {MAX_STOP_BYTES}",
                    long.len()
                ),
            ));
        }
        Ok(stop)
    }

    /// How many alternatives each token's log probability comes with, or `None` when none
    /// are asked for. Chat: `logprobs: true` and `top_logprobs` (0 to 20). Completions:
    /// `logprobs: N` (0 to 20; OpenAI allows 5, vLLM 20).
    fn logprobs(&self, chat: bool) -> Result<Option<usize>, Invalid> {
        let max = MAX_TOP_LOGPROBS;
        let top = self.top_logprobs.map(|n| n as usize);
        if top.is_some_and(|n| n > max) {
            return Err(invalid(
                "top_logprobs",
                format!("top_logprobs is {}; at most {max}", top.unwrap_or(0)),
            ));
        }
        match (&self.logprobs, chat) {
            (None | Some(Value::Null) | Some(Value::Bool(false)), _) => {
                if top.is_some_and(|n| n > 0) {
                    return Err(invalid("top_logprobs", "top_logprobs needs logprobs: true"));
                }
                Ok(None)
            }
            (Some(Value::Bool(true)), true) => Ok(Some(top.unwrap_or(0))),
            (Some(v @ Value::Number(n)), false) => match whole::<usize>(v) {
                Some(n) if n <= max => Ok(Some(n)),
                _ => Err(invalid(
                    "logprobs",
                    format!("logprobs is {n}; it must be 0 to {max}"),
                )),
            },
            (Some(v), true) => Err(invalid(
                "logprobs",
                format!("logprobs is {v}; it must be a boolean"),
            )),
            (Some(v), false) => Err(invalid(
                "logprobs",
                format!("logprobs is {v}; it must be a number of alternatives, 0 to {max}"),
            )),
        }
    }

    pub fn stream(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn sampling(body: Value) -> Result<RequestParams, Invalid> {
        from_value::<Sampling>(&body)?.params(Some(16), true, 1)
    }

    fn refused(body: Value) -> Invalid {
        match sampling(body.clone()) {
            Err(e) => e,
            Ok(_) => panic!("{body} was taken"),
        }
    }

    /// llama.cpp's names for its further samplers reach the sampler; values outside their
    /// ranges are refused by name, on the number as sent.
    #[test]
    fn further_samplers_take_llama_cpp_s_fields() {
        let p = sampling(json!({
            "typical_p": 0.9, "tfs_z": 0.95, "mirostat": 2, "mirostat_tau": 4, "mirostat_eta": 0.2,
            "dry_multiplier": 0.8, "dry_base": 2, "dry_allowed_length": 3,
            "dry_penalty_last_n": 128, "dry_sequence_breakers": ["\n", "##"],
            "xtc_probability": 0.5, "xtc_threshold": 0.15, "fsd_alpha": 0.3, "fsd_k": 4
        }))
        .unwrap()
        .generate
        .sampler;
        assert_eq!((p.typical_p, p.tfs_z), (0.9, 0.95));
        assert_eq!((p.mirostat, p.mirostat_tau, p.mirostat_eta), (2, 4.0, 0.2));
        assert_eq!(
            (p.dry_multiplier, p.dry_base, p.dry_allowed_length),
            (0.8, 2.0, 3)
        );
        assert_eq!(p.dry_penalty_last_n, 128);
        assert_eq!(p.dry_sequence_breakers, ["\n", "##"]);
        assert_eq!((p.xtc_probability, p.xtc_threshold), (0.5, 0.15));
        assert_eq!((p.fsd_alpha, p.fsd_k), (0.3, 4));
        let all = sampling(json!({ "dry_penalty_last_n": -1 })).unwrap();
        assert_eq!(all.generate.sampler.dry_penalty_last_n, usize::MAX);
        for (body, param) in [
            (json!({ "typical_p": 1.0000000000000002 }), "typical_p"),
            (json!({ "mirostat": 3 }), "mirostat"),
            (json!({ "mirostat": 1.5 }), "mirostat"),
            (json!({ "mirostat_eta": 0 }), "mirostat_eta"),
            (json!({ "dry_base": 0.5 }), "dry_base"),
            (json!({ "dry_allowed_length": 0 }), "dry_allowed_length"),
            (json!({ "dry_penalty_last_n": -2 }), "dry_penalty_last_n"),
            (
                json!({ "dry_sequence_breakers": [""] }),
                "dry_sequence_breakers",
            ),
            (
                json!({ "dry_sequence_breakers": vec!["a"; 17] }),
                "dry_sequence_breakers",
            ),
            (json!({ "xtc_threshold": -0.1 }), "xtc_threshold"),
            (json!({ "fsd_alpha": 2 }), "fsd_alpha"),
            (json!({ "fsd_n": 1 }), "fsd_n"),
        ] {
            assert_eq!(refused(body.clone()).param, param, "{body}");
        }
    }

    /// The server's default drafts unless a request turns it off or changes it; a request
    /// may draft by lookup on a server that does not; bad values are refused by name.
    #[test]
    fn speculative_fields_tune_or_turn_off_the_server_s_default() {
        let spec =
            |body: Value, default| from_value::<Sampling>(&body).unwrap().speculative(default);
        let lookup = Some(Speculative::lookup());
        assert_eq!(spec(json!({}), None).unwrap(), None);
        assert_eq!(spec(json!({}), lookup).unwrap(), lookup);
        assert_eq!(
            spec(json!({ "speculative.n_max": 0 }), lookup).unwrap(),
            None
        );
        let got = spec(
            json!({ "speculative.source": "lookup", "speculative.n_max": 3 }),
            None,
        );
        let got = got.unwrap().unwrap();
        assert_eq!((got.source, got.max), (DraftSource::Lookup, 3));
        let model = Some(Speculative::model());
        let got = spec(json!({ "speculative.p_min": 0.5 }), model)
            .unwrap()
            .unwrap();
        assert_eq!((got.source, got.p_min), (DraftSource::Model, 0.5));
        for (body, param) in [
            (json!({ "speculative.p_min": 1.5 }), "speculative.p_min"),
            (json!({ "speculative.n_max": 65 }), "speculative.n_max"),
        ] {
            assert_eq!(spec(body, lookup).unwrap_err().param, param);
        }
        let err = from_value::<Sampling>(&json!({ "speculative.source": "oracle" })).unwrap_err();
        assert_eq!(err.param, "speculative.source");
    }

    #[test]
    fn nulls_are_absent_and_seeds_are_int64() {
        let p = sampling(
            json!({ "stream": null, "n": null, "stop": null, "seed": null,
                                 "stream_options": { "include_usage": null } }),
        )
        .unwrap();
        assert_eq!(p.n, 1);
        let s: Sampling = from_value(&json!({ "stream": null })).unwrap();
        assert!(!s.stream());
        assert!(sampling(json!({ "seed": -1 })).is_ok());
        let p = sampling(json!({ "seed": -2 })).unwrap();
        assert_eq!(p.generate.sampler.seed, u64::MAX - 1);
        let p = sampling(json!({ "seed": 42 })).unwrap();
        assert_eq!(p.generate.sampler.seed, 42);
    }

    #[test]
    fn lengths_are_at_least_one_and_never_overflow() {
        let e = refused(json!({ "max_tokens": 0 }));
        assert_eq!(e.param, "max_tokens");
        let e = refused(json!({ "max_completion_tokens": 0, "max_tokens": 5 }));
        assert_eq!(e.param, "max_completion_tokens");
        let p = sampling(json!({ "max_tokens": 18446744073709551615u64 })).unwrap();
        assert_eq!(p.generate.max_tokens, Some(usize::MAX));
        // Past u64 it is a type error, named.
        let e = refused(json!({ "max_tokens": 1e30 }));
        assert_eq!(e.param, "max_tokens");
        let e = refused(json!({ "max_tokens": -3 }));
        assert_eq!(e.param, "max_tokens");
    }

    #[test]
    fn every_refusal_names_its_field() {
        for (body, param) in [
            (json!({ "temperature": 1e39 }), "temperature"),
            (json!({ "temperature": "hot" }), "temperature"),
            (json!({ "top_p": 2.0 }), "top_p"),
            (json!({ "min_p": -1.0 }), "min_p"),
            (json!({ "repeat_penalty": 0.0 }), "repeat_penalty"),
            (json!({ "presence_penalty": 3.0 }), "presence_penalty"),
            // Outside by less than f32 can tell: refused all the same.
            (
                json!({ "presence_penalty": -2.0000000000000004 }),
                "presence_penalty",
            ),
            (json!({ "top_p": 1.0000000000000002 }), "top_p"),
            (json!({ "n": 17 }), "n"),
            (json!({ "n": 0 }), "n"),
            (json!({ "stop": ["a", "b", "c", "d", "e"] }), "stop"),
            (json!({ "stop": [""] }), "stop"),
            (json!({ "stop": "x".repeat(MAX_STOP_BYTES + 1) }), "stop"),
            (json!({ "stop": 5 }), "stop"),
            (
                json!({ "top_logprobs": 21, "logprobs": true }),
                "top_logprobs",
            ),
            (json!({ "logprobs": 3 }), "logprobs"),
            (json!({ "stream": "yes" }), "stream"),
            (
                json!({ "stream_options": { "include_usage": 1 } }),
                "stream_options.include_usage",
            ),
            (json!({ "seed": 1.5 }), "seed"),
        ] {
            let e = refused(body.clone());
            assert_eq!(e.param, param, "{body}: {}", e.message);
            assert!(e.message.contains(param), "{body}: {}", e.message);
        }
        let e = refused(json!("not an object"));
        assert_eq!(e.param, "");
        // The bound on completions counts every prompt of a batch.
        let s: Sampling = from_value(&json!({ "n": 8 })).unwrap();
        assert!(s.params(None, false, 2).is_ok());
        assert_eq!(s.params(None, false, 3).unwrap_err().param, "n");
    }

    /// `response_format`, `grammar` and `json_schema` become the answer's constraint;
    /// malformed ones and unknown types are refused by name, and only one may be given.
    #[test]
    fn constrained_output_comes_from_any_of_three_fields() {
        let grammar = |body: Value| sampling(body).unwrap().generate.grammar;
        let schema = json!({ "type": "object", "properties": { "a": { "type": "integer" } } });
        let spec = Some(GrammarSpec::JsonSchema(schema.clone()));
        assert_eq!(grammar(json!({})), None);
        assert_eq!(grammar(json!({ "response_format": null })), None);
        assert_eq!(
            grammar(json!({ "response_format": { "type": "text" } })),
            None
        );
        assert_eq!(
            grammar(json!({ "response_format": { "type": "json_object" } })),
            Some(GrammarSpec::JsonObject)
        );
        assert_eq!(
            grammar(json!({ "response_format": { "type": "json_object", "schema": schema } })),
            spec
        );
        for strict in [json!(true), json!(false), Value::Null] {
            let format = json!({ "type": "json_schema", "json_schema":
                { "name": "a", "description": "d", "schema": schema, "strict": strict } });
            assert_eq!(grammar(json!({ "response_format": format })), spec);
        }
        // Without a schema, any JSON value (llama.cpp's reading).
        assert_eq!(
            grammar(json!({ "response_format": { "type": "json_schema", "json_schema": {} } })),
            Some(GrammarSpec::JsonSchema(json!({})))
        );
        assert_eq!(
            grammar(json!({ "grammar": "root ::= \"a\"" })),
            Some(GrammarSpec::Gbnf("root ::= \"a\"".into()))
        );
        assert_eq!(grammar(json!({ "json_schema": schema })), spec);
        assert_eq!(
            grammar(json!({ "grammar": null, "json_schema": null })),
            None
        );

        let format = |f: Value| json!({ "response_format": f });
        let js = |j: Value| format(json!({ "type": "json_schema", "json_schema": j }));
        for (body, param) in [
            (format(json!("json")), "response_format"),
            (format(json!({})), "response_format.type"),
            (format(json!({ "type": 1 })), "response_format.type"),
            (
                format(json!({ "type": "json_schema" })),
                "response_format.json_schema",
            ),
            (
                format(json!({ "type": "json_object", "schema": 1 })),
                "response_format.schema",
            ),
            (js(json!({ "name": 5 })), "response_format.json_schema.name"),
            (
                js(json!({ "description": [] })),
                "response_format.json_schema.description",
            ),
            (
                js(json!({ "strict": "yes" })),
                "response_format.json_schema.strict",
            ),
            (
                js(json!({ "schema": [1] })),
                "response_format.json_schema.schema",
            ),
            (json!({ "grammar": 5 }), "grammar"),
            (json!({ "json_schema": "{}" }), "json_schema"),
            (
                json!({ "grammar": "root ::= \"a\"", "json_schema": {} }),
                "json_schema",
            ),
            (
                json!({ "response_format": { "type": "json_object" }, "grammar": "x" }),
                "grammar",
            ),
        ] {
            let e = refused(body.clone());
            assert_eq!(e.param, param, "{body}: {}", e.message);
            assert!(e.message.contains(param), "{body}: {}", e.message);
        }
        // An unknown type is refused by its name.
        let e = refused(format(json!({ "type": "xml" })));
        assert_eq!(e.param, "response_format.type");
        assert!(e.message.contains("`xml`"), "{}", e.message);
    }
}
