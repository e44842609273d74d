//! GGUF files holding Hearth's private tensor types: read when the file states the layout
//! version this build reads, refused with an error naming the file, the tensor and both
//! versions otherwise; sizes of private types are bounds-checked like every other type.

use hearth_models::gguf::{GgufFile, GgufWriter, MetaValue};
use hearth_models::GgmlType;
use hearth_quant::{Format, FORMAT_VERSION, VERSION_KEY};

const NAME: &str = "hearth.gguf";

/// A file with a Q3H matrix (64 x 2 values: 2 blocks of 32 bytes) followed by an F32 vector,
/// with `version` as its `hearth.quant.version` (absent for `None`).
fn file_with(version: Option<MetaValue>) -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set_metadata("general.architecture", MetaValue::String("llama".into()));
    if let Some(v) = version {
        w.set_metadata(VERSION_KEY, v);
    }
    w.add_tensor(
        "blk.0.attn_q.weight",
        GgmlType::Hearth(Format::Q3H),
        &[64, 2],
        vec![9u8; 64],
    )
    .unwrap();
    w.add_tensor(
        "blk.0.attn_norm.weight",
        GgmlType::F32,
        &[64],
        vec![0u8; 256],
    )
    .unwrap();
    w.to_bytes().unwrap()
}

fn current() -> Option<MetaValue> {
    Some(MetaValue::U32(FORMAT_VERSION))
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

/// Parses `bytes`, expecting an error naming the file and containing every fragment.
fn expect_error(bytes: Vec<u8>, fragments: &[&str]) -> String {
    let err = match GgufFile::from_bytes(NAME, bytes) {
        Ok(_) => panic!("parsed a file it should refuse; expected {fragments:?}"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains(NAME), "error does not name the file: {err}");
    for f in fragments {
        assert!(err.contains(f), "error lacks {f:?}: {err}");
    }
    err
}

#[test]
fn private_types_with_the_current_version_are_read() {
    let file = GgufFile::from_bytes(NAME, file_with(current())).unwrap();
    let view = file.tensor_view("blk.0.attn_q.weight").unwrap();
    assert_eq!(view.info.ggml_type, GgmlType::Hearth(Format::Q3H));
    assert_eq!(view.info.ggml_type.name(), "Q3H");
    assert_eq!(view.info.n_bytes, 64);
    assert_eq!(view.data, &[9u8; 64][..]);
    // Any integer type holding the right number will do.
    for version in [
        MetaValue::U64(FORMAT_VERSION.into()),
        MetaValue::I32(FORMAT_VERSION as i32),
    ] {
        let file = GgufFile::from_bytes(NAME, file_with(Some(version.clone()))).unwrap();
        let view = file.tensor_view("blk.0.attn_q.weight").unwrap();
        assert_eq!(
            (view.info.ggml_type, view.data),
            (GgmlType::Hearth(Format::Q3H), &[9u8; 64][..]),
            "{version:?}"
        );
    }
}

#[test]
fn every_private_type_round_trips() {
    let private = Format::ALL.into_iter().filter(|f| f.is_private());
    for ty in private.map(GgmlType::from) {
        let mut w = GgufWriter::new();
        w.set_metadata(VERSION_KEY, MetaValue::U32(FORMAT_VERSION));
        let row = ty.block_size();
        let n_bytes = ty.bytes_for(row * 3).unwrap();
        let data: Vec<u8> = (0..n_bytes).map(|i| i as u8).collect();
        w.add_tensor("w", ty, &[row, 3], data.clone()).unwrap();
        let file = GgufFile::from_bytes(NAME, w.to_bytes().unwrap()).unwrap();
        let view = file.tensor_view("w").unwrap();
        assert_eq!((view.info.ggml_type, view.data), (ty, &data[..]), "{ty}");
    }
}

#[test]
fn ggufs_own_types_need_no_version() {
    // Q4 and Q8 are GGUF's Q4_1 and Q8_0: any GGUF reader can read them.
    let q8_0: Vec<u8> = (0..34).collect();
    let q4_1: Vec<u8> = (100..120).collect();
    let mut w = GgufWriter::new();
    w.add_tensor("w", GgmlType::Q8_0, &[32, 1], q8_0.clone())
        .unwrap();
    w.add_tensor("v", GgmlType::Q4_1, &[32], q4_1.clone())
        .unwrap();
    let file = GgufFile::from_bytes(NAME, w.to_bytes().unwrap()).unwrap();
    assert_eq!(file.metadata().get(VERSION_KEY), None);
    let view = file.tensor_view("w").unwrap();
    assert_eq!(
        (view.info.ggml_type, view.data),
        (GgmlType::Q8_0, &q8_0[..])
    );
    let view = file.tensor_view("v").unwrap();
    assert_eq!(
        (view.info.ggml_type, view.data),
        (GgmlType::Q4_1, &q4_1[..])
    );
}

#[test]
fn private_type_without_the_version_key() {
    expect_error(
        file_with(None),
        &[
            "tensor `blk.0.attn_q.weight`",
            "Q3H",
            VERSION_KEY,
            &format!("reads version {FORMAT_VERSION}"),
        ],
    );
}

#[test]
fn private_type_from_a_newer_hearth() {
    let newer = FORMAT_VERSION + 1;
    expect_error(
        file_with(Some(MetaValue::U32(newer))),
        &[
            "tensor `blk.0.attn_q.weight`",
            &format!("version {newer}"),
            &format!("reads version {FORMAT_VERSION}"),
            "newer Hearth",
        ],
    );
    expect_error(file_with(Some(MetaValue::U64(u64::MAX))), &["newer Hearth"]);
}

#[test]
fn private_type_from_an_older_hearth() {
    expect_error(
        file_with(Some(MetaValue::U32(0))),
        &["tensor `blk.0.attn_q.weight`", "version 0", "older Hearth"],
    );
    expect_error(
        file_with(Some(MetaValue::I32(-1))),
        &["tensor `blk.0.attn_q.weight`", "version number", "i32"],
    );
}

#[test]
fn version_key_that_is_not_a_number() {
    expect_error(
        file_with(Some(MetaValue::String("1".into()))),
        &[
            "tensor `blk.0.attn_q.weight`",
            VERSION_KEY,
            "version number",
            "string",
        ],
    );
}

#[test]
fn the_version_is_only_checked_when_private_types_are_present() {
    // A bad version key alone does not make an otherwise ordinary file unreadable.
    let mut w = GgufWriter::new();
    w.set_metadata(VERSION_KEY, MetaValue::U32(FORMAT_VERSION + 7));
    let data: Vec<u8> = (0..32).collect();
    w.add_tensor("w", GgmlType::F32, &[8], data.clone())
        .unwrap();
    let file = GgufFile::from_bytes(NAME, w.to_bytes().unwrap()).unwrap();
    assert_eq!(
        file.metadata().get(VERSION_KEY),
        Some(&MetaValue::U32(FORMAT_VERSION + 7))
    );
    let view = file.tensor_view("w").unwrap();
    assert_eq!((view.info.ggml_type, view.data), (GgmlType::F32, &data[..]));
}

#[test]
fn private_type_row_that_is_not_whole_blocks() {
    let mut bytes = file_with(current());
    // n_dims, then the row length: 64 -> 32, half a Q3H block.
    let dims_at = after(&bytes, "blk.0.attn_q.weight") + 4;
    put_u64(&mut bytes, dims_at, 32);
    expect_error(
        bytes,
        &["tensor `blk.0.attn_q.weight`", "whole number of Q3H blocks"],
    );
}

#[test]
fn private_type_larger_than_its_data() {
    // Twice the rows: the tensor now claims 128 bytes and runs into the next tensor's data,
    // as a file whose writer used a smaller block would.
    let mut bytes = file_with(current());
    let dims_at = after(&bytes, "blk.0.attn_q.weight") + 4;
    put_u64(&mut bytes, dims_at + 8, 4);
    expect_error(
        bytes,
        &[
            "tensor `blk.0.attn_norm.weight`",
            "overlaps tensor `blk.0.attn_q.weight`",
        ],
    );
}

#[test]
fn private_type_with_truncated_data() {
    // The Q3H tensor is last, and the file ends inside its data.
    let mut w = GgufWriter::new();
    w.set_metadata(VERSION_KEY, MetaValue::U32(FORMAT_VERSION));
    w.add_tensor(
        "w",
        GgmlType::Hearth(Format::Q4B64),
        &[64, 4],
        vec![1u8; 144],
    )
    .unwrap();
    let mut bytes = w.to_bytes().unwrap();
    bytes.truncate(bytes.len() - 20);
    expect_error(bytes, &["tensor `w`", "past the end"]);

    // Or the shape claims more rows than the data holds.
    let mut bytes = w.to_bytes().unwrap();
    let dims_at = after(&bytes, "w") + 4;
    put_u64(&mut bytes, dims_at + 8, 5);
    expect_error(bytes, &["tensor `w`", "past the end"]);
}

#[test]
fn unknown_type_ids() {
    let type_at = |bytes: &[u8]| after(bytes, "blk.0.attn_norm.weight") + 4 + 8;
    let mut bytes = file_with(current());
    let at = type_at(&bytes);
    put_u32(&mut bytes, at, 1030);
    expect_error(
        bytes.clone(),
        &[
            "tensor `blk.0.attn_norm.weight`",
            "unknown tensor type id 1030",
            "newer Hearth",
        ],
    );
    put_u32(&mut bytes, at, 77);
    let err = expect_error(bytes, &["unknown tensor type id 77"]);
    assert!(!err.contains("Hearth"), "{err}");
}

#[test]
fn writer_refuses_private_data_of_the_wrong_size() {
    let mut w = GgufWriter::new();
    let err = w
        .add_tensor("w", GgmlType::Hearth(Format::Q3H), &[64, 2], vec![0u8; 63])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("63") && err.contains("64") && err.contains("Q3H"),
        "{err}"
    );
    let err = w
        .add_tensor("w", GgmlType::Hearth(Format::Q6), &[32, 2], vec![0u8; 52])
        .unwrap_err()
        .to_string();
    assert!(err.contains("Q6"), "{err}");
}

#[test]
fn metadata_can_be_removed() {
    let mut w = GgufWriter::new();
    for (i, k) in ["a", "b", "c"].iter().enumerate() {
        w.set_metadata(*k, MetaValue::U32(i as u32));
    }
    assert_eq!(w.remove_metadata("b"), Some(MetaValue::U32(1)));
    assert_eq!(w.remove_metadata("b"), None);
    w.set_metadata("a", MetaValue::U32(10));
    w.set_metadata("d", MetaValue::U32(3));
    let file = GgufFile::from_bytes(NAME, w.to_bytes().unwrap()).unwrap();
    let entries: Vec<(&str, u64)> = file
        .metadata()
        .iter()
        .map(|(k, v)| (k, v.as_u64().unwrap()))
        .collect();
    assert_eq!(entries, [("a", 10), ("c", 2), ("d", 3)]);
}
