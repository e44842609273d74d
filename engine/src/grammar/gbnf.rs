//! GBNF, llama.cpp's grammar format, read into rules: a small tokenizer and a recursive-descent
//! parser that follow llama.cpp's `llama_grammar_parser` (what it accepts, this accepts), with
//! errors that give a line and a column.
//!
//! ```text
//! root   ::= object                      # `root` is where the text starts
//! object ::= "{" ws ( pair ("," ws pair)* )? "}"
//! pair   ::= string ":" ws [0-9]+
//! string ::= "\"" [^"\\]* "\""
//! ws     ::= | " " | "\n" [ \t]{0,20}     # an empty alternative matches nothing
//! ```
//!
//! A rule is `name ::= alternatives`, on one line unless a newline follows `::=` or a `|`, the
//! next line starts with a `|`, or a parenthesis is open (inside one, newlines are spaces). Items: literals (`"..."`, with
//! `\n \t \r \" \\ \xHH \uHHHH \UHHHHHHHH` and `\[ \] \-`), character classes (`[a-z]`,
//! `[^"\\]`), `.` (any character), groups, rule names (letters, digits, dashes), tokens by
//! id or text (`<[128009]>`, `<|im_end|>`, `!<...>` for any other token), each optionally
//! repeated by `*`, `+`, `?`, `{m}`, `{m,}` or `{m,n}`; `#` starts a comment.

use std::collections::HashMap;
use std::fmt;

/// Above this a repetition bound is refused (a minimum) or read as unbounded (a maximum), as
/// llama.cpp does: each counted copy is a rule of the grammar.
const MAX_REPETITION: u32 = 2000;

/// A GBNF grammar, checked: `root` exists, every rule it names is defined once.
#[derive(Clone, Debug, PartialEq)]
pub struct Gbnf {
    /// In the order they are defined.
    pub rules: Vec<Rule>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub name: String,
    pub body: Expr,
}

/// One rule's right-hand side.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// Items one after another; empty matches the empty string.
    Seq(Vec<Expr>),
    /// Any one of these.
    Alt(Vec<Expr>),
    /// These characters (at least one).
    Literal(String),
    /// One character inside (or, negated, outside) these inclusive ranges.
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    /// Any one character.
    Any,
    /// One token, named by id; negated, any token but it.
    Token {
        negated: bool,
        token: TokenRef,
        at: Pos,
    },
    /// Another rule.
    Rule(String),
    /// `inner` from `min` to `max` times (`None`: no limit).
    Repeat {
        inner: Box<Expr>,
        min: u32,
        max: Option<u32>,
    },
}

/// How a grammar names a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenRef {
    /// `<[128009]>`
    Id(u32),
    /// `<|im_end|>`: the text of one token.
    Text(String),
}

/// A place in the grammar's text: line and column, from 1, the column in characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

/// Why a grammar did not parse, and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {}, column {}: {message}", at.line, at.column)]
pub struct GbnfError {
    pub at: Pos,
    pub message: String,
}

fn error<T>(at: Pos, message: impl Into<String>) -> Result<T, GbnfError> {
    Err(GbnfError {
        at,
        message: message.into(),
    })
}

impl Gbnf {
    /// Parses `text` and checks its rules.
    pub fn parse(text: &str) -> Result<Self, GbnfError> {
        let (tokens, end) = tokenize(text)?;
        let mut parser = Parser {
            tokens: &tokens,
            end,
            next: 0,
            refs: Vec::new(),
        };
        let mut rules: Vec<Rule> = Vec::new();
        let mut defined: HashMap<String, Pos> = HashMap::new();
        parser.skip_newlines();
        while !parser.at_end() {
            let (rule, at) = parser.rule()?;
            if let Some(first) = defined.insert(rule.name.clone(), at) {
                return error(
                    at,
                    format!(
                        "rule `{}` is defined twice (first on line {})",
                        rule.name, first.line
                    ),
                );
            }
            rules.push(rule);
        }
        if !defined.contains_key("root") {
            let start = Pos { line: 1, column: 1 };
            return error(
                start,
                "the grammar has no `root` rule, where the text starts",
            );
        }
        if let Some((name, at)) = parser.refs.iter().find(|(n, _)| !defined.contains_key(n)) {
            return error(*at, format!("rule `{name}` is not defined"));
        }
        Ok(Self { rules })
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Name(String),
    Define,
    Literal(String),
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    Any,
    Token {
        negated: bool,
        token: TokenRef,
    },
    Open,
    Close,
    Bar,
    Repeat {
        min: u32,
        max: Option<u32>,
    },
    /// One or more line ends (with the comments and blank lines between them).
    Newline,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Name(n) => write!(f, "`{n}`"),
            Tok::Define => f.write_str("`::=`"),
            Tok::Literal(_) => f.write_str("a literal"),
            Tok::Class { .. } => f.write_str("a character class"),
            Tok::Any => f.write_str("`.`"),
            Tok::Token { .. } => f.write_str("a token"),
            Tok::Open => f.write_str("`(`"),
            Tok::Close => f.write_str("`)`"),
            Tok::Bar => f.write_str("`|`"),
            Tok::Repeat { .. } => f.write_str("a repetition"),
            Tok::Newline => f.write_str("the end of the line"),
        }
    }
}

struct Token {
    tok: Tok,
    at: Pos,
}

/// The text's characters with their positions.
struct Chars<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    at: Pos,
}

impl Chars<'_> {
    fn peek(&mut self) -> Option<char> {
        self.chars.peek().copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.at.line += 1;
            self.at.column = 1;
        } else {
            self.at.column += 1;
        }
        Some(c)
    }

    fn eat(&mut self, c: char) -> bool {
        let found = self.peek() == Some(c);
        if found {
            self.bump();
        }
        found
    }

    /// Spaces and tabs (not line ends).
    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.bump();
        }
    }

    fn int(&mut self) -> Result<u32, GbnfError> {
        let at = self.at;
        let mut digits = String::new();
        while let Some(c) = self.peek().filter(char::is_ascii_digit) {
            digits.push(c);
            self.bump();
        }
        if digits.is_empty() {
            return error(at, "expected a number");
        }
        digits
            .parse()
            .or_else(|_| error(at, format!("{digits} is too large")))
    }

    /// One character of a literal or class, escapes decoded.
    fn char(&mut self) -> Result<char, GbnfError> {
        let at = self.at;
        match self.bump() {
            None => error(at, "unexpected end of the grammar"),
            Some('\\') => {
                let hex = |chars: &mut Self, n: usize| {
                    let mut v = 0u32;
                    for _ in 0..n {
                        let d = chars.peek().and_then(|c| c.to_digit(16));
                        let Some(d) = d else {
                            return error(at, format!("expected {n} hexadecimal digits"));
                        };
                        chars.bump();
                        v = v * 16 + d;
                    }
                    char::from_u32(v)
                        .map_or_else(|| error(at, format!("U+{v:X} is not a character")), Ok)
                };
                match self.bump() {
                    Some('x') => hex(self, 2),
                    Some('u') => hex(self, 4),
                    Some('U') => hex(self, 8),
                    Some('t') => Ok('\t'),
                    Some('r') => Ok('\r'),
                    Some('n') => Ok('\n'),
                    Some(c @ ('\\' | '"' | '[' | ']' | '-')) => Ok(c),
                    Some(c) => error(at, format!("unknown escape `\\{c}`")),
                    None => error(at, "unexpected end of the grammar"),
                }
            }
            Some(c) => Ok(c),
        }
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

/// The tokens of `text`, and where it ends.
fn tokenize(text: &str) -> Result<(Vec<Token>, Pos), GbnfError> {
    let mut chars = Chars {
        chars: text.chars().peekable(),
        at: Pos { line: 1, column: 1 },
    };
    let mut tokens: Vec<Token> = Vec::new();
    loop {
        chars.skip_blanks();
        let at = chars.at;
        let Some(c) = chars.peek() else {
            break;
        };
        let tok = match c {
            '#' => {
                while chars.peek().is_some_and(|c| c != '\n' && c != '\r') {
                    chars.bump();
                }
                continue;
            }
            '\n' | '\r' => {
                chars.bump();
                if tokens.last().is_some_and(|t| t.tok == Tok::Newline) {
                    continue;
                }
                Tok::Newline
            }
            '"' => {
                chars.bump();
                let mut s = String::new();
                while !chars.eat('"') {
                    if chars.peek().is_none() {
                        return error(at, "the literal is not closed");
                    }
                    s.push(chars.char()?);
                }
                Tok::Literal(s)
            }
            '[' => {
                chars.bump();
                let negated = chars.eat('^');
                let mut ranges = Vec::new();
                while !chars.eat(']') {
                    if chars.peek().is_none() {
                        return error(at, "the character class is not closed");
                    }
                    let item = chars.at;
                    let lo = chars.char()?;
                    if !chars.eat('-') {
                        ranges.push((lo, lo));
                        continue;
                    }
                    if chars.peek() == Some(']') {
                        // A dash before the closing bracket is itself (`[a-]`), as in llama.cpp.
                        ranges.extend([(lo, lo), ('-', '-')]);
                        continue;
                    }
                    let hi = chars.char()?;
                    if hi < lo {
                        return error(item, format!("the range {lo:?}-{hi:?} is empty"));
                    }
                    ranges.push((lo, hi));
                }
                if ranges.is_empty() {
                    return error(at, "the character class is empty");
                }
                Tok::Class { negated, ranges }
            }
            '<' | '!' => {
                chars.bump();
                let negated = c == '!';
                if negated && !chars.eat('<') {
                    return error(at, "expected `<` after `!`");
                }
                let token = if chars.eat('[') {
                    let id = chars.int()?;
                    if !(chars.eat(']') && chars.eat('>')) {
                        return error(chars.at, "expected `]>` after the token id");
                    }
                    TokenRef::Id(id)
                } else {
                    let mut s = String::from('<');
                    loop {
                        match chars.bump() {
                            Some('>') => break,
                            Some('\n') | None => {
                                return error(at, "the token is not closed by `>`")
                            }
                            Some(c) => s.push(c),
                        }
                    }
                    s.push('>');
                    TokenRef::Text(s)
                };
                Tok::Token { negated, token }
            }
            '{' => {
                chars.bump();
                chars.skip_blanks();
                let min = chars.int()?;
                chars.skip_blanks();
                let max = if chars.eat(',') {
                    chars.skip_blanks();
                    let max = match chars.peek() {
                        Some(c) if c.is_ascii_digit() => Some(chars.int()?),
                        _ => None,
                    };
                    chars.skip_blanks();
                    max
                } else {
                    Some(min)
                };
                if !chars.eat('}') {
                    return error(chars.at, "expected `}` to end the repetition");
                }
                if min > MAX_REPETITION {
                    return error(
                        at,
                        format!("at most {MAX_REPETITION} repetitions, not {min}"),
                    );
                }
                if let Some(max) = max.filter(|&m| m < min) {
                    return error(at, format!("{{{min},{max}}} repeats fewer than none"));
                }
                Tok::Repeat {
                    min,
                    max: max.filter(|&m| m <= MAX_REPETITION),
                }
            }
            '*' | '+' | '?' | '.' | '(' | ')' | '|' => {
                chars.bump();
                match c {
                    '*' => Tok::Repeat { min: 0, max: None },
                    '+' => Tok::Repeat { min: 1, max: None },
                    '?' => Tok::Repeat {
                        min: 0,
                        max: Some(1),
                    },
                    '.' => Tok::Any,
                    '(' => Tok::Open,
                    ')' => Tok::Close,
                    _ => Tok::Bar,
                }
            }
            ':' => {
                chars.bump();
                if !(chars.eat(':') && chars.eat('=')) {
                    return error(at, "expected `::=`");
                }
                Tok::Define
            }
            c if is_name_char(c) => {
                let mut name = String::new();
                while let Some(c) = chars.peek().filter(|&c| is_name_char(c)) {
                    name.push(c);
                    chars.bump();
                }
                Tok::Name(name)
            }
            c => return error(at, format!("unexpected {c:?}")),
        };
        tokens.push(Token { tok, at });
    }
    Ok((tokens, chars.at))
}

struct Parser<'a> {
    tokens: &'a [Token],
    /// Where the text ends.
    end: Pos,
    next: usize,
    /// Every rule named, where, to check once all are defined.
    refs: Vec<(String, Pos)>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.next).map(|t| &t.tok)
    }

    /// Where the next token is (or the end of the text).
    fn at(&self) -> Pos {
        self.tokens.get(self.next).map_or(self.end, |t| t.at)
    }

    fn at_end(&self) -> bool {
        self.next >= self.tokens.len()
    }

    fn bump(&mut self) -> Option<&Tok> {
        let t = self.tokens.get(self.next).map(|t| &t.tok);
        self.next = (self.next + 1).min(self.tokens.len());
        t
    }

    fn skip_newlines(&mut self) {
        while self.peek() == Some(&Tok::Newline) {
            self.next += 1;
        }
    }

    /// `name ::= alternatives`, then the end of the line or of the text.
    fn rule(&mut self) -> Result<(Rule, Pos), GbnfError> {
        let at = self.at();
        let name = match self.bump() {
            Some(Tok::Name(n)) => n.clone(),
            Some(t) => return error(at, format!("expected a rule name, found {t}")),
            None => return error(at, "expected a rule name"),
        };
        if self.peek() != Some(&Tok::Define) {
            return error(self.at(), format!("expected `::=` after `{name}`"));
        }
        self.bump();
        self.skip_newlines();
        let body = self.alternatives(false)?;
        match self.peek() {
            None => {}
            Some(Tok::Newline) => self.skip_newlines(),
            Some(t) => return error(self.at(), format!("unexpected {t}")),
        }
        Ok((Rule { name, body }, at))
    }

    /// Sequences separated by `|`; newlines may come before or after a `|`, and inside
    /// parentheses (`nested`) anywhere.
    fn alternatives(&mut self, nested: bool) -> Result<Expr, GbnfError> {
        let mut alts = vec![self.sequence(nested)?];
        loop {
            // A line that starts with `|` continues the rule (llama.cpp wants the `|` at the
            // end of the line before; no rule can start with one, so this reads the same).
            let after_newlines = self.tokens[self.next..]
                .iter()
                .find(|t| t.tok != Tok::Newline)
                .map(|t| &t.tok);
            if after_newlines != Some(&Tok::Bar) {
                break;
            }
            self.skip_newlines();
            self.bump();
            self.skip_newlines();
            alts.push(self.sequence(nested)?);
        }
        Ok(if alts.len() == 1 {
            alts.remove(0)
        } else {
            Expr::Alt(alts)
        })
    }

    fn sequence(&mut self, nested: bool) -> Result<Expr, GbnfError> {
        let mut items = Vec::new();
        loop {
            if nested {
                self.skip_newlines();
            }
            let at = self.at();
            let item = match self.peek() {
                Some(Tok::Name(name)) => {
                    // A name followed by `::=` starts the next rule: only after a newline,
                    // which ends this sequence first, so here it is a reference.
                    let name = name.clone();
                    self.refs.push((name.clone(), at));
                    Expr::Rule(name)
                }
                Some(Tok::Literal(s)) => Expr::Literal(s.clone()),
                Some(Tok::Class { negated, ranges }) => Expr::Class {
                    negated: *negated,
                    ranges: ranges.clone(),
                },
                Some(Tok::Any) => Expr::Any,
                Some(Tok::Token { negated, token }) => Expr::Token {
                    negated: *negated,
                    token: token.clone(),
                    at,
                },
                Some(Tok::Open) => {
                    self.bump();
                    let inner = self.alternatives(true)?;
                    self.skip_newlines();
                    if self.peek() != Some(&Tok::Close) {
                        return error(
                            self.at(),
                            format!(
                                "expected `)` to close the group opened on line {}, column {}",
                                at.line, at.column
                            ),
                        );
                    }
                    // A group is its contents; `Seq` keeps `(a b)*` one item.
                    Expr::Seq(vec![inner])
                }
                Some(Tok::Repeat { .. }) => {
                    return error(at, "a repetition needs an item before it");
                }
                _ => break,
            };
            self.bump();
            items.push(self.repetitions(item));
        }
        Ok(if items.len() == 1 {
            items.remove(0)
        } else {
            Expr::Seq(items)
        })
    }

    /// `item` under the repetitions that follow it (`a+?` is `(a+)?`).
    fn repetitions(&mut self, mut item: Expr) -> Expr {
        while let Some(&Tok::Repeat { min, max }) = self.peek() {
            self.bump();
            item = Expr::Repeat {
                inner: Box::new(item),
                min,
                max,
            };
        }
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(text: &str) -> Expr {
        Gbnf::parse(text).unwrap().rules.remove(0).body
    }

    fn err(text: &str) -> String {
        Gbnf::parse(text).unwrap_err().to_string()
    }

    fn lit(s: &str) -> Expr {
        Expr::Literal(s.into())
    }

    fn rule(s: &str) -> Expr {
        Expr::Rule(s.into())
    }

    #[test]
    fn literals_decode_their_escapes() {
        assert_eq!(
            body(r#"root ::= "a\n\t\r\"\\\x41\u00e9\U0001F600\[\]\-""#),
            lit("a\n\t\r\"\\Aé😀[]-")
        );
        assert_eq!(body(r#"root ::= "日本""#), lit("日本"));
    }

    #[test]
    fn classes_take_ranges_negation_and_escapes() {
        let class = |negated, ranges: &[(char, char)]| Expr::Class {
            negated,
            ranges: ranges.to_vec(),
        };
        assert_eq!(
            body("root ::= [a-z0-9_]"),
            class(false, &[('a', 'z'), ('0', '9'), ('_', '_')])
        );
        assert_eq!(
            body(r#"root ::= [^"\\\x7F\x00-\x1F]"#),
            class(
                true,
                &[('"', '"'), ('\\', '\\'), ('\x7f', '\x7f'), ('\0', '\x1f')]
            )
        );
        // A dash last is a dash; `[` needs no escape inside; `,-.` is a range.
        assert_eq!(
            body("root ::= [+[,-.a-]"),
            class(
                false,
                &[('+', '+'), ('[', '['), (',', '.'), ('a', 'a'), ('-', '-')]
            )
        );
        assert_eq!(body("root ::= [ぁ-ゟ]"), class(false, &[('ぁ', 'ゟ')]));
    }

    #[test]
    fn repetitions_groups_and_alternatives() {
        let rep = |e: Expr, min, max| Expr::Repeat {
            inner: Box::new(e),
            min,
            max,
        };
        assert_eq!(
            body("root ::= a* b+ c? d{3} e{2,} f{1,4} g{ 1 , 2 }\na ::= \"\"\nb ::= \"\"\nc ::= \"\"\nd ::= \"\"\ne ::= \"\"\nf ::= \"\"\ng ::= \"\""),
            Expr::Seq(vec![
                rep(rule("a"), 0, None),
                rep(rule("b"), 1, None),
                rep(rule("c"), 0, Some(1)),
                rep(rule("d"), 3, Some(3)),
                rep(rule("e"), 2, None),
                rep(rule("f"), 1, Some(4)),
                rep(rule("g"), 1, Some(2)),
            ])
        );
        // An empty alternative, and alternatives continued on the next line after `|`.
        assert_eq!(
            body("root ::= | \"x\" |\n   \"y\" \"z\""),
            Expr::Alt(vec![
                Expr::Seq(vec![]),
                lit("x"),
                Expr::Seq(vec![lit("y"), lit("z")]),
            ])
        );
        // Or before the `|`, on the next line.
        assert_eq!(
            body("root ::= \"x\"\n  | \"y\" # why\n  | \"z\"\nother ::= \"w\""),
            Expr::Alt(vec![lit("x"), lit("y"), lit("z")])
        );
        // Inside parentheses newlines and comments are spaces.
        assert_eq!(
            body("root ::= (\n  \"a\" # first\n  | \"b\"\n)+ \"c\""),
            Expr::Seq(vec![
                rep(
                    Expr::Seq(vec![Expr::Alt(vec![lit("a"), lit("b")])]),
                    1,
                    None
                ),
                lit("c"),
            ])
        );
        // A name right before a group; a repetition of a repetition.
        assert_eq!(
            body("root ::= x(\"a\")+?\nx ::= \"\""),
            Expr::Seq(vec![
                rule("x"),
                rep(rep(Expr::Seq(vec![lit("a")]), 1, None), 0, Some(1)),
            ])
        );
        // A bound past the limit is no bound, as in llama.cpp.
        assert_eq!(body("root ::= \"a\"{1,5000}"), rep(lit("a"), 1, None));
    }

    #[test]
    fn tokens_by_id_and_text() {
        assert_eq!(
            body("root ::= <[12]> !<|im_end|> .").clone(),
            Expr::Seq(vec![
                Expr::Token {
                    negated: false,
                    token: TokenRef::Id(12),
                    at: Pos {
                        line: 1,
                        column: 10
                    },
                },
                Expr::Token {
                    negated: true,
                    token: TokenRef::Text("<|im_end|>".into()),
                    at: Pos {
                        line: 1,
                        column: 17
                    },
                },
                Expr::Any,
            ])
        );
    }

    #[test]
    fn rules_names_and_comments() {
        let g = Gbnf::parse(
            "# a comment\n\nroot ::= jp-char Rule2 # trailing\n\n\njp-char ::= \"x\"\r\nRule2 ::=\n  \"y\"\n",
        )
        .unwrap();
        let names: Vec<&str> = g.rules.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["root", "jp-char", "Rule2"]);
        assert_eq!(g.rules[2].body, lit("y"));
    }

    #[test]
    fn errors_say_where() {
        assert_eq!(
            err("root ::= \"a\" missing"),
            "line 1, column 14: rule `missing` is not defined"
        );
        assert_eq!(
            err("a ::= \"x\""),
            "line 1, column 1: the grammar has no `root` rule, where the text starts"
        );
        assert_eq!(
            err("root ::= \"a\"\nroot ::= \"b\""),
            "line 2, column 1: rule `root` is defined twice (first on line 1)"
        );
        assert_eq!(
            err("root ::= \"abc"),
            "line 1, column 10: the literal is not closed"
        );
        assert_eq!(
            err("root ::= [z-a]"),
            "line 1, column 11: the range 'z'-'a' is empty"
        );
        assert_eq!(
            err("root ::= \"\\q\""),
            "line 1, column 11: unknown escape `\\q`"
        );
        assert_eq!(
            err("root ::= (\"a\"\n  \"b\""),
            "line 2, column 6: expected `)` to close the group opened on line 1, column 10"
        );
        assert_eq!(err("root = \"a\""), "line 1, column 6: unexpected '='");
        assert_eq!(
            err("root ::= * \"a\""),
            "line 1, column 10: a repetition needs an item before it"
        );
        assert_eq!(
            err("root ::= \"a\"{3,2}"),
            "line 1, column 13: {3,2} repeats fewer than none"
        );
        assert_eq!(err("root ::= \"a\" )"), "line 1, column 14: unexpected `)`");
        // A second line that continues a rule without `|` is a new rule that lacks `::=`.
        assert_eq!(
            err("root ::= \"a\"\n  \"b\""),
            "line 2, column 3: expected a rule name, found a literal"
        );
        assert_eq!(
            err("root ::= [\\x4]"),
            "line 1, column 11: expected 2 hexadecimal digits"
        );
    }
}
