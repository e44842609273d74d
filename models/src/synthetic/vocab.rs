//! The vocabulary of a synthetic file: the fewest SentencePiece tokens a tokenizer needs,
//! then filler pieces up to the shape's size.

/// A SentencePiece vocabulary of `n` tokens and their GGUF token types: `<unk>` (unknown),
/// `<s>` and `</s>` (control), then `<0x00>`..`<0xFF>` (byte) as far as they fit, then
/// filler pieces `▁t259`, `▁t260`, ... (normal).
pub(super) fn vocabulary(n: usize) -> (Vec<String>, Vec<i32>) {
    const UNKNOWN: i32 = 2;
    const CONTROL: i32 = 3;
    const BYTE: i32 = 6;
    const NORMAL: i32 = 1;
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut types = vec![UNKNOWN, CONTROL, CONTROL];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(BYTE);
    }
    tokens.truncate(n);
    types.truncate(n);
    for i in tokens.len()..n {
        tokens.push(format!("\u{2581}t{i}"));
        types.push(NORMAL);
    }
    (tokens, types)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_fits_any_size() {
        let (t, ty) = vocabulary(3);
        assert_eq!((t.len(), ty.len()), (3, 3));
        let (t, ty) = vocabulary(300);
        assert_eq!((t.len(), ty.len()), (300, 300));
        assert_eq!(t[3], "<0x00>");
        assert_eq!(t[258], "<0xFF>");
        assert_eq!(t[259], "\u{2581}t259");
        let unique: std::collections::HashSet<&String> = t.iter().collect();
        assert_eq!(unique.len(), 300);
    }
}
