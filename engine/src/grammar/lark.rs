//! A GBNF grammar written in llguidance's Lark syntax, meaning what it meant in llama.cpp.
//!
//! llguidance lexes greedily: a terminal of several characters (`"int"`, `/[a-z]+/`) runs as
//! far as it can before the parser sees it, so `/[a-z]+/ "x"` never matches "abx", and the
//! literal `"int"` next to `[a-z]` loses "inx". GBNF matches character by character with no
//! such preference. So every terminal written here is one character (a literal becomes one
//! string per character, a class a one-character regex), and every repetition is a rule's:
//! nothing is left for the lexer to decide, and the Earley parser keeps every reading, as
//! llama.cpp's stacks do. That costs more per mask than whole-word terminals (around a
//! millisecond a step for JSON on a 49k vocabulary, where the JSON Schema compiler's terminals
//! take tens of microseconds), and it is exact.
//!
//! Rule names become `r<index>_<name in lower case>` (GBNF names are case-sensitive and may
//! start with a digit; Lark rules are lower case); `start` names `root`.

use std::fmt::Write;

use super::gbnf::{Expr, Gbnf, GbnfError, TokenRef};

/// How tightly an expression's context binds, to know where parentheses are needed.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Context {
    /// Inside alternatives, or a rule's whole body.
    Alt,
    /// One item of a sequence.
    Seq,
    /// Under a repetition.
    Repeat,
}

/// `grammar` in Lark syntax. `token_id` finds the id of a token a grammar names by its text
/// (`<|im_end|>`); one it does not find is an error at that place.
pub fn to_lark(
    grammar: &Gbnf,
    token_id: &dyn Fn(&str) -> Option<u32>,
) -> Result<String, GbnfError> {
    let mut writer = Writer {
        grammar,
        token_id,
        out: String::new(),
    };
    writer.out.push_str("start: ");
    writer.rule_name("root");
    writer.out.push('\n');
    for rule in &grammar.rules {
        writer.rule_name(&rule.name);
        writer.out.push_str(": ");
        writer.expr(&rule.body, Context::Alt)?;
        writer.out.push('\n');
    }
    Ok(writer.out)
}

struct Writer<'a> {
    grammar: &'a Gbnf,
    token_id: &'a dyn Fn(&str) -> Option<u32>,
    out: String,
}

impl Writer<'_> {
    fn rule_name(&mut self, name: &str) {
        // Parsing checked that every rule named is defined.
        let index = self
            .grammar
            .rules
            .iter()
            .position(|r| r.name == name)
            .unwrap_or(usize::MAX);
        let _ = write!(self.out, "r{index}_{}", name.to_ascii_lowercase());
    }

    /// Writes `e` so that it reads as one unit in `context`.
    fn expr(&mut self, e: &Expr, context: Context) -> Result<(), GbnfError> {
        match e {
            Expr::Seq(items) => match items.as_slice() {
                [] => self.out.push_str("\"\""),
                [one] => self.expr(one, context)?,
                _ => self.group(context > Context::Seq, |w| {
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            w.out.push(' ');
                        }
                        w.expr(item, Context::Seq)?;
                    }
                    Ok(())
                })?,
            },
            Expr::Alt(alts) => {
                // An empty alternative makes the others optional: `(a | b)?`.
                let empty = |e: &&Expr| matches!(e, Expr::Seq(items) if items.is_empty());
                let rest: Vec<&Expr> = alts.iter().filter(|e| !empty(e)).collect();
                let optional = rest.len() < alts.len();
                if rest.is_empty() {
                    self.out.push_str("\"\"");
                } else if optional {
                    self.group(context == Context::Repeat, |w| {
                        w.group(true, |w| w.alternatives(&rest))?;
                        w.out.push('?');
                        Ok(())
                    })?;
                } else {
                    self.group(context > Context::Alt, |w| w.alternatives(&rest))?;
                }
            }
            Expr::Literal(s) => {
                let mut chars = s.chars();
                match (chars.next(), chars.next()) {
                    (None, _) => self.out.push_str("\"\""),
                    (Some(c), None) => self.char_literal(c),
                    _ => self.group(context > Context::Seq, |w| {
                        for (i, c) in s.chars().enumerate() {
                            if i > 0 {
                                w.out.push(' ');
                            }
                            w.char_literal(c);
                        }
                        Ok(())
                    })?,
                }
            }
            Expr::Class { negated, ranges } => {
                self.out.push_str(if *negated { "/[^" } else { "/[" });
                for &(lo, hi) in ranges {
                    regex_char(&mut self.out, lo);
                    if hi != lo {
                        self.out.push('-');
                        regex_char(&mut self.out, hi);
                    }
                }
                self.out.push_str("]/");
            }
            // GBNF's `.` is any character, a line end included.
            Expr::Any => self.out.push_str("/(?s:.)/"),
            Expr::Token { negated, token, at } => {
                let id = match token {
                    TokenRef::Id(id) => *id,
                    TokenRef::Text(text) => (self.token_id)(text).ok_or_else(|| GbnfError {
                        at: *at,
                        message: format!("no token is spelled {text}"),
                    })?,
                };
                let _ = write!(self.out, "<[{}{id}]>", if *negated { "^" } else { "" });
            }
            Expr::Rule(name) => self.rule_name(name),
            // A repetition of a repetition (`a+?`) is a group of its own.
            Expr::Repeat { inner, min, max } => self.group(context == Context::Repeat, |w| {
                w.expr(inner, Context::Repeat)?;
                let _ = match (min, max) {
                    (0, None) => write!(w.out, "*"),
                    (1, None) => write!(w.out, "+"),
                    (0, Some(1)) => write!(w.out, "?"),
                    (m, None) => write!(w.out, "{{{m},}}"),
                    (m, Some(n)) if m == n => write!(w.out, "{{{m}}}"),
                    (m, Some(n)) => write!(w.out, "{{{m},{n}}}"),
                };
                Ok(())
            })?,
        }
        Ok(())
    }

    fn alternatives(&mut self, alts: &[&Expr]) -> Result<(), GbnfError> {
        for (i, alt) in alts.iter().enumerate() {
            if i > 0 {
                self.out.push_str(" | ");
            }
            self.expr(alt, Context::Alt)?;
        }
        Ok(())
    }

    /// Runs `write`, in parentheses when `parens`.
    fn group(
        &mut self,
        parens: bool,
        write: impl FnOnce(&mut Self) -> Result<(), GbnfError>,
    ) -> Result<(), GbnfError> {
        if parens {
            self.out.push('(');
        }
        write(self)?;
        if parens {
            self.out.push(')');
        }
        Ok(())
    }

    /// One character as a Lark string (JSON's escapes).
    fn char_literal(&mut self, c: char) {
        self.out.push('"');
        match c {
            '"' => self.out.push_str("\\\""),
            '\\' => self.out.push_str("\\\\"),
            c if c < ' ' || c == '\x7f' => {
                let _ = write!(self.out, "\\u{:04x}", c as u32);
            }
            c => self.out.push(c),
        }
        self.out.push('"');
    }
}

/// One character inside a regex's class: letters and digits as themselves, anything else by
/// its code point, so that no character means something to the regex or to Lark's `/.../`.
fn regex_char(out: &mut String, c: char) {
    if c.is_ascii_alphanumeric() {
        out.push(c);
    } else {
        let _ = write!(out, "\\x{{{:x}}}", c as u32);
    }
}

#[cfg(test)]
mod tests {
    use llguidance::api::TopLevelGrammar;
    use llguidance::toktrie::ApproximateTokEnv;
    use llguidance::{Matcher, ParserFactory};

    use super::*;

    fn lark(gbnf: &str) -> String {
        let grammar = Gbnf::parse(gbnf).unwrap();
        to_lark(&grammar, &|text| (text == "<|end|>").then_some(7)).unwrap()
    }

    /// A matcher for `gbnf` over a vocabulary of single bytes, or the compiler's error.
    fn matcher(gbnf: &str) -> Result<Matcher, String> {
        let env = ApproximateTokEnv::single_byte_env();
        let mut factory = ParserFactory::new_simple(&env).unwrap();
        factory.quiet();
        let parser = factory
            .create_parser(TopLevelGrammar::from_lark(lark(gbnf)))
            .map_err(|e| e.to_string())?;
        Ok(Matcher::new(Ok(parser)))
    }

    /// Whether `gbnf` matches all of `text`, fed a byte at a time, each allowed by the mask.
    fn matches(gbnf: &str, text: &str) -> bool {
        let mut m = matcher(gbnf).unwrap();
        for &b in text.as_bytes() {
            match m.compute_mask() {
                Ok(mask) if mask.is_allowed(u32::from(b)) => m.consume_token(u32::from(b)).unwrap(),
                _ => return false,
            }
        }
        m.is_accepting().unwrap()
    }

    #[test]
    fn every_terminal_is_one_character() {
        assert_eq!(
            lark("root ::= \"ab\" [a-z_]* x? (\"\\\"\" | )\nx ::= [^\"\\\\\\n] . <|end|> !<[3]>"),
            "start: r0_root\n\
             r0_root: \"a\" \"b\" /[a-z\\x{5f}]/* r1_x? (\"\\\"\")?\n\
             r1_x: /[^\\x{22}\\x{5c}\\x{a}]/ /(?s:.)/ <[7]> <[^3]>\n"
        );
        // Repetitions of groups, counted ones, and of repetitions; names keep their case apart.
        assert_eq!(
            lark("root ::= (\"ab\" | Root){2,5} \"x\"{3} \"y\"{2,} (\"z\"+)?\nRoot ::= \"\\x00\""),
            "start: r0_root\n\
             r0_root: (\"a\" \"b\" | r1_root){2,5} \"x\"{3} \"y\"{2,} (\"z\"+)?\n\
             r1_root: \"\\u0000\"\n"
        );
    }

    #[test]
    fn a_token_named_by_text_must_exist() {
        let grammar = Gbnf::parse("root ::= \"a\"\n  <|nope|>").unwrap_err();
        assert!(grammar.message.contains("expected a rule name"));
        let grammar = Gbnf::parse("root ::= \"a\" <|nope|>").unwrap();
        let e = to_lark(&grammar, &|_| None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 1, column 14: no token is spelled <|nope|>"
        );
    }

    /// What llguidance's greedy lexer would get wrong with whole-word terminals, the
    /// translation gets right: GBNF's meaning, character by character.
    #[test]
    fn the_meaning_is_gbnf_s_not_a_greedy_lexer_s() {
        assert!(matches("root ::= [a-z]+ \"x\"", "abx"));
        assert!(!matches("root ::= [a-z]+ \"x\"", "ab"));
        assert!(matches("root ::= (\"a\" | \"ab\") \"b\"", "ab"));
        assert!(matches("root ::= (\"a\" | \"ab\") \"b\"", "abb"));
        assert!(matches("root ::= \"int\" | [a-z] [a-z] [a-z]", "inx"));
        assert!(matches("root ::= \"int\" | [a-z] [a-z] [a-z]", "int"));
        assert!(matches("root ::= \"a\"{2,3}", "aaa"));
        assert!(!matches("root ::= \"a\"{2,3}", "aaaa"));
        assert!(matches("root ::= | \"x\"", ""));
        assert!(matches("root ::= [^\"]* \"\\\"\"", "日本\""));
        assert!(matches("root ::= . .", "\n\t"));
    }

    /// llama.cpp's own example grammars translate, compile and read what they describe.
    #[test]
    fn llama_cpp_s_grammars_compile() {
        let Some(dir) = hearth_testkit::llama_cpp_grammars() else {
            return;
        };
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "gbnf"))
            .collect();
        files.sort();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            let mut m = matcher(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(m.compute_mask().is_ok(), "{name}");
        }
        let names: Vec<_> = files
            .iter()
            .filter_map(|f| f.file_stem()?.to_str())
            .collect();
        for want in ["json", "arithmetic", "list", "chess", "japanese", "c"] {
            assert!(names.contains(&want), "{want}.gbnf missing from {names:?}");
        }
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
        let json = read("json.gbnf");
        assert!(matches(
            &json,
            "{\"a\": [1, 2.5e3, \"x\\\"y\", true], \"b\": {}}"
        ));
        assert!(!matches(&json, "{\"a\" 1}"));
        assert!(!matches(&json, "[1]"));
        assert!(matches(&read("arithmetic.gbnf"), "(1+2)*x = 3\n"));
        assert!(matches(&read("chess.gbnf"), "1. e4 e5\n2. Nf3 Nc6\n"));
        assert!(!matches(&read("chess.gbnf"), "1. e9 e5\n"));
        assert!(matches(&read("list.gbnf"), "- milk\n- two eggs\n"));
        assert!(matches(&read("japanese.gbnf"), "こんにちは 世界"));
        assert!(matches(&read("c.gbnf"), "int main(){return 0;}"));
    }
}
