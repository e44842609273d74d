//! Reading and writing GGUF files: every value type, nested arrays, alignment, and a
//! byte-exact round trip of the real test model.

mod common;

use hearth_models::gguf::{GgufFile, GgufWriter, MetaArray, MetaValue, MAX_ARRAY_DEPTH};
use hearth_models::GgmlType;

/// A small file with one value of every type, nested arrays and three tensors.
fn sample_writer() -> GgufWriter<'static> {
    let mut w = GgufWriter::new();
    let meta = [
        ("general.architecture", MetaValue::String("llama".into())),
        ("t.u8", MetaValue::U8(200)),
        ("t.i8", MetaValue::I8(-100)),
        ("t.u16", MetaValue::U16(60_000)),
        ("t.i16", MetaValue::I16(-30_000)),
        ("t.u32", MetaValue::U32(4_000_000_000)),
        ("t.i32", MetaValue::I32(-2_000_000_000)),
        ("t.f32", MetaValue::F32(1.5e-5)),
        ("t.bool", MetaValue::Bool(true)),
        ("t.string", MetaValue::String("héllo wörld ✓".into())),
        ("t.u64", MetaValue::U64(u64::MAX)),
        ("t.i64", MetaValue::I64(i64::MIN)),
        ("t.f64", MetaValue::F64(std::f64::consts::PI)),
        ("t.empty", MetaValue::String(String::new())),
        (
            "t.strings",
            MetaValue::Array(MetaArray::String(vec![
                "a".into(),
                String::new(),
                "ç".into(),
            ])),
        ),
        ("t.i32s", MetaValue::Array(MetaArray::I32(vec![1, -2, 3]))),
        ("t.f32s", MetaValue::Array(MetaArray::F32(vec![0.5, -0.25]))),
        (
            "t.bools",
            MetaValue::Array(MetaArray::Bool(vec![true, false])),
        ),
        ("t.u8s", MetaValue::Array(MetaArray::U8(vec![1, 2, 255]))),
        ("t.f64s", MetaValue::Array(MetaArray::F64(vec![1e300]))),
        ("t.none", MetaValue::Array(MetaArray::U64(vec![]))),
        (
            "t.nested",
            MetaValue::Array(MetaArray::Array(vec![
                MetaArray::I16(vec![1, 2]),
                MetaArray::String(vec!["x".into()]),
                MetaArray::Array(vec![MetaArray::U16(vec![7])]),
            ])),
        ),
    ];
    for (k, v) in meta {
        w.set_metadata(k, v);
    }
    // Q4_1: 32 x 2 values = 2 blocks of 20 bytes, padded to 64 in the file.
    let q: Vec<u8> = (0..40).collect();
    w.add_tensor("blk.0.q", GgmlType::Q4_1, &[32, 2], q)
        .unwrap();
    w.add_tensor("scalar", GgmlType::F16, &[], vec![0x00, 0x3c])
        .unwrap();
    // The last tensor fills its alignment exactly, so the file has no trailing padding.
    let f: Vec<u8> = (0..8u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    w.add_tensor("norm", GgmlType::F32, &[8], f).unwrap();
    w
}

#[test]
fn every_value_type_round_trips() {
    let bytes = sample_writer().to_bytes().unwrap();
    let file = GgufFile::from_bytes("sample.gguf", bytes.clone()).unwrap();
    assert_eq!(file.version(), 3);
    assert_eq!(file.alignment(), 32);
    assert_eq!(file.metadata().len(), 22);
    assert_eq!(file.require::<&str>("t.string").unwrap(), "héllo wörld ✓");
    assert_eq!(file.require::<u64>("t.u64").unwrap(), u64::MAX);
    assert_eq!(file.require::<i64>("t.i64").unwrap(), i64::MIN);
    assert_eq!(file.require::<i32>("t.i8").unwrap(), -100);
    assert_eq!(file.require::<f32>("t.f32").unwrap(), 1.5e-5);
    assert!(file.require::<bool>("t.bool").unwrap());
    assert_eq!(
        file.require::<&[String]>("t.strings").unwrap(),
        &["a".to_string(), String::new(), "ç".to_string()]
    );
    assert_eq!(file.require::<&[i32]>("t.i32s").unwrap(), &[1, -2, 3]);
    let nested = file.require::<&MetaArray>("t.nested").unwrap();
    assert_eq!(nested.len(), 3);
    assert_eq!(
        nested.get(2),
        Some(MetaValue::Array(MetaArray::Array(vec![MetaArray::U16(
            vec![7]
        )])))
    );

    let q = file.tensor_view("blk.0.q").unwrap();
    assert_eq!(q.info.ggml_type, GgmlType::Q4_1);
    assert_eq!(q.info.shape, vec![32, 2]);
    assert_eq!(q.info.n_bytes, 40);
    assert_eq!(q.data, (0..40).collect::<Vec<u8>>().as_slice());
    let scalar = file.tensor_view("scalar").unwrap();
    assert_eq!(
        (scalar.info.n_elements(), scalar.data),
        (1, &[0x00, 0x3c][..])
    );
    for t in file.tensors() {
        assert_eq!(t.offset % 32, 0, "{}", t.name);
    }

    // Read, write, read: identical metadata and identical bytes.
    let again = GgufWriter::from_file(&file).unwrap().to_bytes().unwrap();
    assert_eq!(again, bytes);
    let reread = GgufFile::from_bytes("again.gguf", again).unwrap();
    let a: Vec<_> = file.metadata().iter().collect();
    let b: Vec<_> = reread.metadata().iter().collect();
    assert_eq!(a, b);
    assert_eq!(file.tensors(), reread.tensors());
}

#[test]
fn custom_alignment_and_v2_are_honoured() {
    let mut w = sample_writer();
    w.set_alignment(64);
    w.set_version(2).unwrap();
    let file = GgufFile::from_bytes("a64.gguf", w.to_bytes().unwrap()).unwrap();
    assert_eq!((file.version(), file.alignment()), (2, 64));
    assert_eq!(file.index().data_offset % 64, 0);
    for t in file.tensors() {
        assert_eq!(t.offset % 64, 0, "{}", t.name);
    }
    let err = w.set_version(4).unwrap_err();
    assert_eq!(
        err.to_string(),
        "<new GGUF file>: header: version: cannot write GGUF version 4 (only 2 and 3)"
    );
    // The refused version changes nothing.
    let file = GgufFile::from_bytes("a64.gguf", w.to_bytes().unwrap()).unwrap();
    assert_eq!(file.version(), 2);
}

#[test]
fn writer_rejects_data_of_the_wrong_size() {
    let mut w = GgufWriter::new();
    let err = w
        .add_tensor("w", GgmlType::Q8_0, &[32, 2], vec![0u8; 34])
        .unwrap_err();
    assert!(err.to_string().contains("`w`"), "{err}");
    let err = w
        .add_tensor("v", GgmlType::Q8_0, &[16], vec![0u8; 17])
        .unwrap_err();
    assert!(err.to_string().contains("Q8_0"), "{err}");
}

#[test]
fn arrays_nest_up_to_the_limit() {
    let mut a = MetaArray::U8(vec![1]);
    for _ in 1..MAX_ARRAY_DEPTH {
        a = MetaArray::Array(vec![a]);
    }
    let mut w = GgufWriter::new();
    w.set_metadata("deep", MetaValue::Array(a.clone()));
    let file = GgufFile::from_bytes("deep.gguf", w.to_bytes().unwrap()).unwrap();
    assert_eq!(file.metadata().get("deep"), Some(&MetaValue::Array(a)));
}

#[test]
fn write_atomic_replaces_the_file_and_leaves_no_temporary() {
    let dir = common::scratch_dir("atomic");
    let path = dir.join("m.gguf");
    std::fs::write(&path, b"old contents").unwrap();
    sample_writer().write_atomic(&path).unwrap();
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.tensors().len(), 3);
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("m.gguf")]);

    // A write into a directory that does not exist fails cleanly and names the path.
    let missing = dir.join("no/such/dir/m.gguf");
    let err = sample_writer().write_atomic(&missing).unwrap_err();
    assert!(err.to_string().contains("no/such/dir"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn real_model_round_trips_byte_for_byte() {
    let Some(path) = hearth_testkit::model(hearth_testkit::SMOLLM2) else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.version(), 3);
    assert_eq!(file.tensors().len(), 272);
    let embd = file.tensor("token_embd.weight").unwrap();
    assert_eq!(embd.ggml_type, GgmlType::Q8_0);
    assert_eq!(embd.shape, vec![576, 49152]);
    assert_eq!(embd.n_bytes, 576 * 49152 / 32 * 34);
    let total: u64 = file.tensors().iter().map(|t| t.n_bytes).sum();
    assert!(total <= file.file_size());

    let dir = common::scratch_dir("real-roundtrip");
    let out = dir.join("copy.gguf");
    GgufWriter::from_file(&file)
        .unwrap()
        .write_atomic(&out)
        .unwrap();
    let copy = std::fs::read(&out).unwrap();
    assert!(
        copy == file.bytes(),
        "rewritten file differs from the original"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
