//! One generated sequence held to a grammar: which tokens may come next, and the grammar's
//! state moved past each token the sequence keeps.

use std::sync::Arc;

use hearth_model::{Error, Result};
use hearth_models::Tokenizer;
use llguidance::toktrie::SimpleVob;
use llguidance::Matcher;

use super::spec::GrammarSpec;
use super::vocabulary::Vocabulary;

/// A grammar's state for one sequence (llguidance's [`Matcher`]): the mask of the tokens that
/// keep the text valid, and [`commit`](Self::commit) to move past the one drawn.
///
/// Once the grammar is complete (nothing may follow), only end-of-generation tokens are
/// allowed: the model ends the text itself, as under llama.cpp's grammars.
#[derive(Clone)]
pub struct Constraint {
    matcher: Matcher,
    vocabulary: Arc<Vocabulary>,
    /// The tokens allowed now, computed at most once per step.
    allowed: Option<SimpleVob>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("complete", &self.is_complete())
            .finish_non_exhaustive()
    }
}

impl Constraint {
    /// Compiles `spec` over `tokenizer`'s vocabulary, at the start of the text. An error
    /// (under the spec's request field) for a grammar that does not parse or compile, a
    /// schema keyword llguidance does not implement, or a grammar that admits no text at all
    /// (no token may start it, and it does not admit the empty text).
    pub fn new(spec: &GrammarSpec, tokenizer: &Tokenizer) -> Result<Self> {
        let vocabulary = Vocabulary::of(tokenizer)?;
        let grammar = spec.to_llguidance(&vocabulary)?;
        let parser = vocabulary
            .parser(grammar)
            .map_err(|e| Error::options(spec.field(), e))?;
        let mut matcher = Matcher::new(Ok(parser));
        for warning in matcher.grammar_warnings() {
            tracing::debug!("{}: {warning}", spec.field());
        }
        // The first mask proves the grammar admits something: llguidance refuses to compute
        // one that allows no token.
        let allowed = matcher
            .compute_mask()
            .map_err(|e| Error::options(spec.field(), format!("admits no text ({e})")))?;
        Ok(Self {
            matcher,
            vocabulary,
            allowed: Some(allowed),
        })
    }

    /// The tokens allowed next: those that keep the text a prefix of a valid one, and the
    /// end-of-generation tokens where the text is valid as it stands; only those once the
    /// grammar is complete. Should the grammar fail midway (a dead end no token leaves), only
    /// end-of-generation tokens, so that the text ends there.
    pub fn allowed(&mut self) -> &SimpleVob {
        let matcher = &mut self.matcher;
        let vocabulary = &self.vocabulary;
        self.allowed
            .get_or_insert_with(|| match matcher.compute_mask_or_eos() {
                Ok(mask) => mask,
                Err(e) => {
                    let e = e.to_string();
                    let why = e.lines().next().unwrap_or_default();
                    tracing::warn!("the grammar cannot go on, ending the text: {why}");
                    vocabulary.trie().eos_token_set()
                }
            })
    }

    /// `logits` with every token the grammar does not allow at -inf, into `out` (resized to
    /// `logits`' length; a token past the vocabulary is never allowed).
    pub fn mask(&mut self, logits: &[f32], out: &mut Vec<f32>) {
        let allowed = self.allowed();
        out.clear();
        out.extend(logits.iter().enumerate().map(|(id, &logit)| {
            if id < allowed.len() && allowed.get(id) {
                logit
            } else {
                f32::NEG_INFINITY
            }
        }));
    }

    /// Moves past `token`, which the sequence keeps. A token the grammar does not allow (the
    /// sampler had no allowed token with a finite logit) leaves the grammar failed: only
    /// end-of-generation tokens follow. After a complete grammar (whose end-of-generation
    /// token is all that could be drawn) nothing moves.
    pub fn commit(&mut self, token: u32) {
        self.allowed = None;
        if self.matcher.is_stopped() {
            return;
        }
        if let Err(e) = self.matcher.consume_token(token) {
            let e = e.to_string();
            let why = e.lines().next().unwrap_or_default();
            tracing::warn!("token {token} does not fit the grammar: {why}");
        }
    }

    /// Whether the grammar is complete: nothing may follow but the end of the text.
    pub fn is_complete(&self) -> bool {
        self.matcher.is_stopped()
    }
}

#[cfg(test)]
mod tests {
    use hearth_models::{GgufFile, GgufWriter, MetaArray, MetaValue};
    use serde_json::json;

    use super::*;

    /// A SentencePiece vocabulary small enough to read: specials, a few pieces of JSON and
    /// words, a user-defined `<think>`, and the newline as a byte token.
    const VOCAB: &[(&str, i32)] = &[
        ("<unk>", 2),
        ("<s>", 3),
        ("</s>", 3),
        ("{", 1),
        ("}", 1),
        ("\"", 1),
        (":", 1),
        ("a", 1),
        ("b", 1),
        ("ab", 1),
        ("\"a\"", 1),
        ("1", 1),
        ("\u{2581}", 1),
        ("<think>", 4),
        ("<0x0A>", 6),
        ("x", 1),
        ("<|im_end|>", 3),
    ];
    const EOS: u32 = 2;
    const OPEN: u32 = 3;
    const CLOSE: u32 = 4;
    const QUOTE: u32 = 5;
    const COLON: u32 = 6;
    const A: u32 = 7;
    const B: u32 = 8;
    const AB: u32 = 9;
    const QUOTED_A: u32 = 10;
    const ONE: u32 = 11;
    const SPACE: u32 = 12;
    const THINK: u32 = 13;
    const NEWLINE: u32 = 14;
    const IM_END: u32 = 16;

    fn tokenizer() -> Tokenizer {
        let mut w = GgufWriter::new();
        let strings = |v: Vec<String>| MetaValue::Array(MetaArray::String(v));
        w.set_metadata("general.architecture", MetaValue::String("llama".into()));
        w.set_metadata("tokenizer.ggml.model", MetaValue::String("llama".into()));
        w.set_metadata(
            "tokenizer.ggml.tokens",
            strings(VOCAB.iter().map(|(p, _)| p.to_string()).collect()),
        );
        w.set_metadata(
            "tokenizer.ggml.token_type",
            MetaValue::Array(MetaArray::I32(VOCAB.iter().map(|&(_, t)| t).collect())),
        );
        w.set_metadata("tokenizer.ggml.eos_token_id", MetaValue::U32(EOS));
        let file = GgufFile::from_bytes("grammar-vocab", w.to_bytes().unwrap()).unwrap();
        Tokenizer::from_gguf(&file).unwrap()
    }

    fn gbnf(text: &str) -> Result<Constraint> {
        Constraint::new(&GrammarSpec::Gbnf(text.into()), &tokenizer())
    }

    fn allowed(c: &mut Constraint) -> Vec<u32> {
        c.allowed().to_list()
    }

    /// The field and reason of an options error.
    fn refusal(r: Result<Constraint>) -> (String, String) {
        match r {
            Err(Error::Options { field, reason }) => (field, reason),
            other => panic!("not an options error: {other:?}"),
        }
    }

    #[test]
    fn masks_follow_the_grammar_token_by_token() {
        let mut c = gbnf("root ::= \"a\" \"b\"+").unwrap();
        assert_eq!(allowed(&mut c), [A, AB]);
        c.commit(A);
        assert_eq!(allowed(&mut c), [B]);
        c.commit(B);
        // Valid as it stands: more, or the end.
        assert_eq!(allowed(&mut c), [EOS, B, IM_END]);
        assert!(!c.is_complete());

        // The mask on logits: allowed tokens keep theirs, the rest (and any past the
        // vocabulary) are -inf.
        let logits: Vec<f32> = (0..VOCAB.len() + 2).map(|i| i as f32).collect();
        let mut out = Vec::new();
        c.mask(&logits, &mut out);
        assert_eq!(out.len(), logits.len());
        for (id, &l) in out.iter().enumerate() {
            let keep = [EOS, B, IM_END].contains(&(id as u32));
            assert_eq!(l, if keep { id as f32 } else { f32::NEG_INFINITY }, "{id}");
        }
    }

    #[test]
    fn a_complete_grammar_allows_only_the_end() {
        let mut c = gbnf("root ::= \"ab\"").unwrap();
        assert_eq!(allowed(&mut c), [A, AB]);
        c.commit(AB);
        assert!(c.is_complete());
        assert_eq!(allowed(&mut c), [EOS, IM_END]);
        c.commit(IM_END);
        assert!(!c.matcher.is_error(), "{:?}", c.matcher.get_error());
        // The end drawn while more could follow ends the grammar too.
        let mut c = gbnf("root ::= \"a\"+").unwrap();
        c.commit(A);
        assert!(!c.is_complete());
        c.commit(EOS);
        assert!(c.is_complete() && !c.matcher.is_error());
        // A grammar of the empty text is complete before it starts.
        let mut c = gbnf("root ::= \"\"").unwrap();
        assert_eq!(allowed(&mut c), [EOS, IM_END]);
    }

    #[test]
    fn markup_tokens_are_never_text() {
        // `<s>`, `<unk>` and `<|im_end|>` spell text `.` would match, but they are markup:
        // left out of the shown text, so never drawn as text.
        let mut c = gbnf("root ::= .*").unwrap();
        let got = allowed(&mut c);
        for markup in [0, 1] {
            assert!(!got.contains(&markup), "{markup} in {got:?}");
        }
        // A user-defined token is text the model writes.
        for text in [OPEN, QUOTED_A, SPACE, NEWLINE, THINK] {
            assert!(got.contains(&text), "{text} not in {got:?}");
        }
        // End-of-generation tokens only as the end.
        assert!(got.contains(&EOS) && got.contains(&IM_END));
        // Text starting with `<` has no token here but the markup and `<think>`.
        let mut c = gbnf("root ::= \"<\" .*").unwrap();
        assert_eq!(allowed(&mut c), [THINK]);
    }

    #[test]
    fn a_grammar_that_admits_nothing_is_refused() {
        for grammar in ["root ::= \"q\"", "root ::= root \"a\""] {
            let (field, reason) = refusal(gbnf(grammar));
            assert_eq!(field, "grammar");
            assert!(reason.starts_with("admits no text"), "{grammar}: {reason}");
        }
        let (field, reason) = refusal(gbnf("root ::= \"a\" | [b-"));
        assert_eq!(field, "grammar");
        assert_eq!(reason, "line 1, column 19: unexpected end of the grammar");
    }

    #[test]
    fn json_object_and_schema() {
        let tok = tokenizer();
        let mut c = Constraint::new(&GrammarSpec::JsonObject, &tok).unwrap();
        assert_eq!(allowed(&mut c), [OPEN]);
        for t in [OPEN, QUOTED_A, COLON, SPACE, ONE] {
            assert!(c.allowed().is_allowed(t), "{t}");
            c.commit(t);
        }
        assert!(!c.allowed().is_allowed(A));
        c.commit(CLOSE);
        assert!(c.is_complete());
        assert_eq!(allowed(&mut c), [EOS, IM_END]);

        let schema = json!({
            "type": "object",
            "properties": {"a": {"enum": ["b", "ab"]}},
            "required": ["a"],
            "additionalProperties": false
        });
        let mut c = Constraint::new(&GrammarSpec::JsonSchema(schema), &tok).unwrap();
        for t in [OPEN, QUOTED_A, COLON, QUOTE] {
            c.commit(t);
        }
        assert_eq!(allowed(&mut c), [A, B, AB]);
        c.commit(A);
        assert_eq!(allowed(&mut c), [B]);
        for t in [B, QUOTE, CLOSE] {
            c.commit(t);
        }
        assert!(c.is_complete());
    }

    /// A keyword llguidance does not implement is an error naming it, never a looser grammar.
    #[test]
    fn unsupported_schema_keywords_are_named() {
        let tok = tokenizer();
        let schema = |s| Constraint::new(&GrammarSpec::JsonSchema(s), &tok);
        for (s, keyword) in [
            (
                json!({"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}}),
                "\"if\"",
            ),
            (
                json!({"type": "object", "dependentSchemas": {"a": {"required": ["b"]}}}),
                "dependentSchemas",
            ),
            // `oneOf` whose branches may overlap (disjoint ones are read as `anyOf`, exactly).
            (
                json!({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 2}]}),
                "oneOf",
            ),
            (json!({"type": "array", "uniqueItems": true}), "uniqueItems"),
            (json!({"not": {"type": "string"}}), "not"),
        ] {
            let r = schema(s.clone());
            assert!(r.is_err(), "{s} accepted");
            let (field, reason) = refusal(r);
            assert_eq!(field, "json_schema");
            assert!(reason.contains(keyword), "{s}: {reason}");
        }
        let (_, reason) = refusal(schema(
            json!({"type": "object", "x-guidance": {"lenient": true}}),
        ));
        assert!(reason.contains("x-guidance"), "{reason}");
        let (_, reason) = refusal(schema(json!(false)));
        assert!(reason.contains("admits no value"), "{reason}");
        let (_, reason) = refusal(schema(json!([1])));
        assert!(reason.contains("object or a boolean"), "{reason}");
        // Unknown keywords are annotations, as JSON Schema says; `true` is any value.
        assert!(schema(json!({"type": "string", "x-note": 1})).is_ok());
        assert!(schema(json!(true)).is_ok());
    }

    #[test]
    fn the_vocabulary_is_built_once_per_tokenizer() {
        let tok = tokenizer();
        let a = Vocabulary::of(&tok).unwrap();
        let b = Vocabulary::of(&tok).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.len(), VOCAB.len());
        assert_eq!(a.end_of_generation(), [EOS, IM_END]);
        assert_eq!(a.token_id("<|im_end|>"), Some(IM_END));
        assert_eq!(a.token_id("ab"), Some(AB));
        assert_eq!(a.token_id("zz"), None);
        let other = tokenizer();
        assert!(!Arc::ptr_eq(&a, &Vocabulary::of(&other).unwrap()));
    }
}
