//! Hostile and broken GGUF files: each one is a clean error naming the file and the field
//! or tensor, never a panic and never a huge allocation.

use hearth_models::gguf::{GgufFile, GgufWriter, MetaArray, MetaValue, MAX_ARRAY_DEPTH};
use hearth_models::GgmlType;

const NAME: &str = "bad.gguf";

fn valid() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set_metadata("general.architecture", MetaValue::String("llama".into()));
    w.set_metadata("t.text", MetaValue::String("plain".into()));
    w.set_metadata(
        "t.list",
        MetaValue::Array(MetaArray::String(vec!["a".into(), "b".into()])),
    );
    w.add_tensor("first", GgmlType::Q4_0, &[32, 2], vec![7u8; 36])
        .unwrap();
    // 32 bytes: ends exactly on the alignment, so the file has no trailing padding.
    w.add_tensor("last", GgmlType::F32, &[8], vec![1u8; 32])
        .unwrap();
    w.to_bytes().unwrap()
}

/// Position just after the first occurrence of `needle`.
fn after(bytes: &[u8], needle: &str) -> usize {
    let n = needle.as_bytes();
    bytes
        .windows(n.len())
        .position(|w| w == n)
        .map(|p| p + n.len())
        .unwrap_or_else(|| panic!("{needle} not in the file"))
}

fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Parses `bytes`, expecting an error whose message names the file and contains every
/// fragment.
fn expect_error(bytes: Vec<u8>, fragments: &[&str]) {
    let err = match GgufFile::from_bytes(NAME, bytes) {
        Ok(_) => panic!("parsed a broken file; expected {fragments:?}"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains(NAME), "error does not name the file: {err}");
    for f in fragments {
        assert!(err.contains(f), "error lacks {f:?}: {err}");
    }
}

/// Offset of tensor `name`'s `offset` field (after name, n_dims, dims, type).
fn tensor_offset_field(bytes: &[u8], name: &str, n_dims: usize) -> usize {
    after(bytes, name) + 4 + 8 * n_dims + 4
}

#[test]
fn the_valid_file_parses() {
    let file = GgufFile::from_bytes(NAME, valid()).unwrap();
    assert_eq!(file.tensors().len(), 2);
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = valid();
    for len in 0..bytes.len() {
        let err = GgufFile::from_bytes(NAME, bytes[..len].to_vec())
            .err()
            .unwrap_or_else(|| panic!("truncated to {len} bytes but parsed"));
        let msg = err.to_string();
        assert!(msg.contains(NAME), "{msg}");
        assert!(
            msg.contains("truncated") || msg.contains("past the end"),
            "at {len}: {msg}"
        );
    }
}

#[test]
fn wrong_magic() {
    let mut bytes = valid();
    bytes[..4].copy_from_slice(b"GGML");
    expect_error(bytes, &["header: magic", "not a GGUF file"]);
}

#[test]
fn unsupported_versions() {
    let mut bytes = valid();
    put_u32(&mut bytes, 4, 1);
    expect_error(bytes.clone(), &["version", "v1"]);
    put_u32(&mut bytes, 4, 3u32.swap_bytes());
    expect_error(bytes.clone(), &["big-endian"]);
    put_u32(&mut bytes, 4, 99);
    expect_error(bytes, &["unknown GGUF version 99"]);
}

#[test]
fn absurd_tensor_count() {
    let mut bytes = valid();
    put_u64(&mut bytes, 8, u64::MAX / 2);
    expect_error(bytes, &["tensor count", "impossible"]);
}

#[test]
fn absurd_metadata_count() {
    let mut bytes = valid();
    put_u64(&mut bytes, 16, 1 << 40);
    expect_error(bytes, &["metadata count", "impossible"]);
}

#[test]
fn huge_array_length() {
    let mut bytes = valid();
    // key "t.list", then type tag (array), element type (string), then the length.
    let len_at = after(&bytes, "t.list") + 4 + 4;
    put_u64(&mut bytes, len_at, u64::MAX);
    expect_error(bytes, &["metadata `t.list`", "array length", "impossible"]);
}

#[test]
fn huge_string_length() {
    let mut bytes = valid();
    let len_at = after(&bytes, "t.text") + 4;
    put_u64(&mut bytes, len_at, 1 << 62);
    expect_error(bytes, &["metadata `t.text`", "string length"]);
}

#[test]
fn string_that_is_not_utf8() {
    let mut bytes = valid();
    let text_at = after(&bytes, "t.text") + 4 + 8;
    bytes[text_at] = 0xff;
    expect_error(bytes, &["metadata `t.text`", "not valid UTF-8"]);

    let mut bytes = valid();
    let name_at = after(&bytes, "first") - 5;
    bytes[name_at] = 0xc3; // a lead byte followed by ASCII
    expect_error(bytes, &["tensor entry 0: name", "UTF-8"]);
}

#[test]
fn unknown_value_type() {
    let mut bytes = valid();
    let at = after(&bytes, "t.text");
    put_u32(&mut bytes, at, 13);
    expect_error(bytes, &["metadata `t.text`", "unknown value type 13"]);
}

#[test]
fn arrays_nested_too_deep() {
    let mut a = MetaArray::U8(vec![]);
    for _ in 0..MAX_ARRAY_DEPTH {
        a = MetaArray::Array(vec![a]);
    }
    let mut w = GgufWriter::new();
    w.set_metadata("deep", MetaValue::Array(a));
    expect_error(w.to_bytes().unwrap(), &["metadata `deep`", "nested deeper"]);
}

#[test]
fn unknown_tensor_type() {
    let mut bytes = valid();
    let type_at = tensor_offset_field(&bytes, "last", 1) - 4;
    put_u32(&mut bytes, type_at, 99);
    expect_error(bytes, &["tensor `last`", "unknown tensor type id 99"]);
}

#[test]
fn tensor_offset_past_the_end() {
    let mut bytes = valid();
    let at = tensor_offset_field(&bytes, "last", 1);
    put_u64(&mut bytes, at, 1 << 20);
    expect_error(bytes.clone(), &["tensor `last`", "past the end"]);
    // An offset so large that offset + size overflows.
    put_u64(&mut bytes, at, u64::MAX - 31);
    expect_error(bytes, &["tensor `last`", "past the end"]);
}

#[test]
fn misaligned_tensor() {
    let mut bytes = valid();
    let at = tensor_offset_field(&bytes, "last", 1);
    put_u64(&mut bytes, at, 68);
    expect_error(
        bytes,
        &["tensor `last`", "not a multiple of the alignment 32"],
    );
}

#[test]
fn too_many_dimensions_and_absurd_shapes() {
    let mut bytes = valid();
    let at = after(&bytes, "last");
    put_u32(&mut bytes, at, 5);
    expect_error(bytes, &["tensor `last`", "5 dimensions"]);

    let mut bytes = valid();
    let dims_at = after(&bytes, "first") + 4;
    put_u64(&mut bytes, dims_at + 8, u64::MAX);
    expect_error(bytes, &["tensor `first`", "too many elements"]);

    let mut bytes = valid();
    put_u64(&mut bytes, dims_at, 33);
    expect_error(bytes, &["tensor `first`", "whole number of Q4_0 blocks"]);
}

#[test]
fn bad_alignment_value() {
    for bad in [0u32, 3, 48, 1 << 30] {
        // The writer refuses to lay out such a file, so write a good one and patch it.
        let mut w = GgufWriter::new();
        w.set_alignment(bad);
        assert!(
            bad == 1 << 30 || w.to_bytes().is_err(),
            "writer accepted {bad}"
        );
        w.set_alignment(32);
        let mut bytes = w.to_bytes().unwrap();
        let at = after(&bytes, "general.alignment") + 4;
        put_u32(&mut bytes, at, bad);
        expect_error(bytes, &["general.alignment", "power of two"]);
    }
}

#[test]
fn duplicate_keys_and_tensor_names() {
    let mut bytes = valid();
    let at = after(&bytes, "t.list") - 4;
    bytes[at..at + 4].copy_from_slice(b"text"); // "t.list" becomes a second "t.text"
    expect_error(bytes, &["metadata `t.text`", "more than once"]);

    let mut w = GgufWriter::new();
    w.add_tensor("a", GgmlType::F32, &[8], vec![0u8; 32])
        .unwrap();
    w.add_tensor("b", GgmlType::F32, &[8], vec![0u8; 32])
        .unwrap();
    let mut bytes = w.to_bytes().unwrap();
    let at = after(&bytes, "b") - 1;
    bytes[at] = b'a';
    expect_error(bytes, &["tensor `a`", "more than once"]);
}

#[test]
fn bool_that_is_not_zero_or_one() {
    let mut w = GgufWriter::new();
    w.set_metadata("t.flag", MetaValue::Bool(true));
    let mut bytes = w.to_bytes().unwrap();
    let at = after(&bytes, "t.flag") + 4;
    bytes[at] = 2;
    expect_error(bytes, &["metadata `t.flag`", "bool"]);
}

#[test]
fn missing_file_is_an_io_error_naming_it() {
    let err = GgufFile::open("/nonexistent/dir/model.gguf").unwrap_err();
    assert!(
        err.to_string().contains("/nonexistent/dir/model.gguf"),
        "{err}"
    );
}

#[test]
fn random_corruption_never_panics() {
    // A deterministic xorshift stream; each trial corrupts a few bytes of a valid file.
    let base = valid();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..5000 {
        let mut bytes = base.clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() % bytes.len() as u64) as usize;
            bytes[at] = next() as u8;
        }
        if let Ok(file) = GgufFile::from_bytes(NAME, bytes) {
            for t in file.tensors() {
                assert_eq!(file.tensor_data(t).unwrap().len() as u64, t.n_bytes);
            }
        }
    }
}

/// An index that ends short of the alignment, with only an empty tensor: even that tensor's
/// data would start past the end of the file (found by the `gguf_parse` fuzz target).
#[test]
fn data_section_past_the_end() {
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(1u64.to_le_bytes()); // one tensor
    bytes.extend(0u64.to_le_bytes()); // no metadata
    bytes.extend(1u64.to_le_bytes());
    bytes.push(b't');
    bytes.extend(1u32.to_le_bytes()); // one dimension
    bytes.extend(0u64.to_le_bytes()); // of size 0
    bytes.extend(0u32.to_le_bytes()); // F32
    bytes.extend(0u64.to_le_bytes()); // at offset 0
    assert_eq!(bytes.len(), 57); // the data section would start at 64
    expect_error(bytes, &["tensor data", "past the end"]);
}
