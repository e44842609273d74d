//! PyTorch checkpoints built opcode by opcode: the valid layouts read as the tensors they
//! describe, and every hostile or broken one is refused with an error naming the file and
//! what is wrong, never executed and never a panic.

mod common;

use std::path::{Path, PathBuf};

use common::torch_pickle::{checkpoint, state_dict, storages, zip, Entry, Pickle};
use hearth_models::pickle::{read_checkpoint, Dtype};

const PATH: &str = "/models/x/pytorch_model.bin";

/// A tensor read: name, type, shape and bytes.
type Read = (String, Dtype, Vec<usize>, Vec<u8>);

fn read(file: &[u8]) -> Result<Vec<Read>, String> {
    let tensors = read_checkpoint(Path::new(PATH), file).map_err(|e| e.to_string())?;
    Ok(tensors
        .into_iter()
        .map(|(name, t)| (name, t.dtype, t.shape, file[t.bytes].to_vec()))
        .collect())
}

/// The error reading `file`, which must name the file.
fn refusal(file: &[u8]) -> String {
    let err = read(file).expect_err("refused");
    assert!(err.starts_with(PATH), "{err}");
    err
}

/// A checkpoint of the standard storages around `pickle`.
fn with(pickle: Vec<u8>) -> Vec<u8> {
    checkpoint(&pickle, &storages())
}

fn f32s(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn a_zip_checkpoint_reads_views_and_tied_tensors_as_slices() {
    let tensors = read(&with(state_dict())).unwrap();
    let names: Vec<&str> = tensors.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(names, ["a", "b", "h", "tied"]);
    let [a, b, h, tied] = &tensors[..] else {
        unreachable!()
    };
    assert_eq!((a.1, &a.2), (Dtype::F32, &vec![2, 3]));
    assert_eq!(a.3, f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    assert_eq!(
        (b.1, &b.2, &b.3),
        (Dtype::F32, &vec![4], &f32s(&[3.0, 4.0, 5.0, 6.0]))
    );
    assert_eq!(
        (h.1, &h.2, &h.3),
        (Dtype::F16, &vec![2], &vec![0, 0x3c, 0, 0x40])
    );
    assert_eq!(tied, &("tied".to_string(), a.1, a.2.clone(), a.3.clone()));
}

/// The legacy layout: magic number, version, system information, the object, the storage
/// keys, then each storage as a count and its bytes.
fn legacy(object: Vec<u8>, keys: &[&str], stored: &[(i64, Vec<u8>)]) -> Vec<u8> {
    let magic = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
    let mut out = Pickle::new().op(0x8a).op(10).raw(&magic).stop();
    out.extend(Pickle::new().int(1001).stop());
    let sys_info = Pickle::new()
        .op(b'}')
        .str("little_endian")
        .op(0x88)
        .op(b's')
        .stop();
    out.extend(sys_info);
    out.extend(object);
    let list = keys
        .iter()
        .fold(Pickle::new().op(b']').op(b'('), |p, k| p.str(k));
    out.extend(list.op(b'e').stop());
    for (count, bytes) in stored {
        out.extend_from_slice(&count.to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out
}

fn legacy_storages() -> Vec<(i64, Vec<u8>)> {
    storages()
        .into_iter()
        .map(|(key, b)| (if key == "0" { 6 } else { 2 }, b))
        .collect()
}

#[test]
fn a_legacy_checkpoint_reads_as_the_zip_one_does() {
    let file = legacy(state_dict(), &["0", "1"], &legacy_storages());
    assert_eq!(read(&file).unwrap(), read(&with(state_dict())).unwrap());

    let mut short = legacy_storages();
    short[1].0 = 3;
    let err = refusal(&legacy(state_dict(), &["0", "1"], &short));
    assert!(
        err.contains("storage `1` is stored with 3 elements"),
        "{err}"
    );
    let err = refusal(&legacy(state_dict(), &["0"], &legacy_storages()[..1]));
    assert!(
        err.contains("storage `1` is declared but not stored"),
        "{err}"
    );
    let err = refusal(&legacy(state_dict(), &["0", "1", "2"], &legacy_storages()));
    assert!(
        err.contains("storage `2` is stored, but no tensor declares it"),
        "{err}"
    );
    let not_torch = Pickle::new().int(7).stop();
    assert!(refusal(&not_torch).contains("not a PyTorch checkpoint"));
}

fn scratch(test: &str) -> PathBuf {
    common::scratch_dir(&format!("pickle-{test}"))
}

/// `callable(args...)` as REDUCE builds it.
fn call(module: &str, name: &str, arg: &str) -> Pickle {
    Pickle::new()
        .global(module, name)
        .str(arg)
        .op(0x85)
        .op(b'R')
}

#[test]
fn os_system_is_refused_and_never_runs() {
    let dir = scratch("canary");
    let canary = dir.join("canary");
    let command = format!("touch {}", canary.display());
    for module in ["posix", "os", "nt", "subprocess"] {
        let name = if module == "subprocess" {
            "call"
        } else {
            "system"
        };
        let pickle = call(module, name, &command).stop();
        let err = refusal(&with(pickle.clone()));
        assert!(
            err.contains(&format!("global `{module}.{name}` is not allowed")),
            "{err}"
        );
        // The same call with the name pushed as strings (protocol 4's STACK_GLOBAL).
        let stacked = Pickle::new()
            .str(module)
            .str(name)
            .op(0x93)
            .str(&command)
            .op(0x85)
            .op(b'R')
            .stop();
        let err = refusal(&with(stacked));
        assert!(err.contains(&format!("global `{module}.{name}`")), "{err}");
        // As a legacy file's object too.
        let err = refusal(&legacy(pickle, &[], &[]));
        assert!(err.contains("is not allowed"), "{err}");
    }
    assert!(!canary.exists(), "the pickle ran");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn builtins_are_refused_by_name() {
    for name in ["eval", "exec", "getattr", "__import__", "compile", "open"] {
        let err = refusal(&with(call("builtins", name, "1+1").stop()));
        assert!(
            err.contains(&format!("global `builtins.{name}` is not allowed")),
            "{err}"
        );
        assert!(err.contains("archive/data.pkl, byte 2"), "{err}");
    }
    let err = refusal(&with(call("_codecs", "encode", "x").stop()));
    assert!(err.contains("`_codecs.encode`"), "{err}");
}

#[test]
fn nested_reduce_tricks_are_refused() {
    // An allowed global called on what a forbidden one would return.
    let inner_forbidden = Pickle::new()
        .global("collections", "OrderedDict")
        .global("builtins", "eval")
        .str("__import__('os').system('true')")
        .op(0x85)
        .op(b'R')
        .op(0x85)
        .op(b'R')
        .stop();
    let err = refusal(&with(inner_forbidden));
    assert!(
        err.contains("global `builtins.eval` is not allowed"),
        "{err}"
    );

    // An allowed global's result called in turn.
    let call_result = Pickle::new()
        .global("collections", "OrderedDict")
        .op(b')')
        .op(b'R')
        .op(b')')
        .op(b'R')
        .stop();
    assert!(refusal(&with(call_result)).contains("REDUCE of a dict"));

    // A storage class called, and a tensor rebuilt from something that is not a storage.
    let storage_called = Pickle::new()
        .global("torch", "FloatStorage")
        .op(b')')
        .op(b'R')
        .stop();
    let err = refusal(&with(storage_called));
    assert!(
        err.contains("calling `torch.FloatStorage` is not allowed"),
        "{err}"
    );
    let fake_storage = Pickle::new()
        .global("torch._utils", "_rebuild_tensor_v2")
        .op(b'(')
        .global("collections", "OrderedDict")
        .op(b')')
        .op(b'R')
        .int(0)
        .ints(&[1])
        .ints(&[1])
        .op(0x89)
        .op(b'N')
        .op(b't')
        .op(b'R')
        .stop();
    let err = refusal(&with(fake_storage));
    assert!(err.contains("a dict for a storage"), "{err}");

    // Object construction opcodes, whatever the class.
    let newobj = Pickle::new()
        .global("collections", "OrderedDict")
        .op(b')')
        .op(0x81)
        .stop();
    assert!(refusal(&with(newobj)).contains("opcode NEWOBJ (0x81) is not supported"));
}

#[test]
fn build_is_refused_except_on_a_dict() {
    // A state dict's `_metadata`, as `model.state_dict()` pickles it, is ignored.
    let mut with_metadata = state_dict();
    with_metadata.pop();
    let with_metadata = Pickle(with_metadata)
        .op(b'}')
        .str("_metadata")
        .op(b'}')
        .op(b's')
        .op(b'b')
        .stop();
    assert_eq!(read(&with(with_metadata)).unwrap().len(), 4);

    let on_tensor = Pickle::new()
        .tensor("FloatStorage", "0", 6, 0, &[6])
        .op(b'}')
        .op(b'b')
        .stop();
    assert!(refusal(&with(on_tensor)).contains("BUILD on a tensor is not allowed"));
    let on_global = Pickle::new()
        .global("collections", "OrderedDict")
        .op(b'}')
        .op(b'b')
        .stop();
    let err = refusal(&with(on_global));
    assert!(
        err.contains("BUILD on global `collections.OrderedDict` is not allowed"),
        "{err}"
    );
}

/// A dict of one tensor `w` over storage `0` (6 f32 values).
fn one_tensor(class: &str, numel: i64, offset: i32, size: &[i32], stride: &[i32]) -> Vec<u8> {
    Pickle::new()
        .op(b'}')
        .str("w")
        .tensor_strided(class, "0", numel, offset, size, stride)
        .op(b's')
        .stop()
}

#[test]
fn storages_and_tensors_must_lie_inside_the_file() {
    let huge = one_tensor("FloatStorage", 1 << 61, 0, &[2], &[1]);
    let err = refusal(&with(huge));
    assert!(
        err.contains("storage `0` declares 2305843009213693952 F32"),
        "{err}"
    );
    let past = one_tensor("DoubleStorage", 6, 0, &[2], &[1]);
    assert!(refusal(&with(past)).contains("more than its entry's 24 bytes"));

    let overrun = one_tensor("FloatStorage", 6, 4, &[3], &[1]);
    let err = refusal(&with(overrun));
    assert!(
        err.contains("tensor `w`: elements 4..7 overrun storage `0` of 6 elements"),
        "{err}"
    );
    let transposed = one_tensor("FloatStorage", 6, 0, &[3, 2], &[1, 3]);
    let err = refusal(&with(transposed));
    assert!(
        err.contains("tensor `w`: strides [1, 3] for shape [3, 2] are not contiguous"),
        "{err}"
    );
    // A dimension of one may have any stride.
    let column = one_tensor("FloatStorage", 6, 0, &[3, 1], &[1, 7]);
    assert_eq!(read(&with(column)).unwrap()[0].2, [3, 1]);

    let missing = Pickle::new()
        .op(b'}')
        .str("w")
        .tensor("FloatStorage", "9", 1, 0, &[1])
        .op(b's')
        .stop();
    assert!(refusal(&with(missing)).contains("storage `9` has no entry `archive/data/9`"));
    let retyped = Pickle::new()
        .op(b'}')
        .str("a")
        .tensor("FloatStorage", "0", 6, 0, &[1])
        .op(b's')
        .str("b")
        .tensor("IntStorage", "0", 6, 0, &[1])
        .op(b's')
        .stop();
    assert!(refusal(&with(retyped)).contains("storage `0` is declared twice"));
}

#[test]
fn overlapping_and_compressed_entries_are_refused() {
    let pickle = Pickle::new()
        .op(b'}')
        .str("a")
        .tensor("ByteStorage", "0", 60, 0, &[1])
        .op(b's')
        .str("b")
        .tensor("ByteStorage", "1", 4, 0, &[1])
        .op(b's')
        .stop();
    // Entry `0` claims the bytes of entry `1` that follows it.
    let mut first = Entry::stored("archive/data/0", &[1; 4]);
    first.extra_len = 56;
    let entries = [
        Entry::stored("archive/data.pkl", &pickle),
        first,
        Entry::stored("archive/data/1", &[2; 4]),
    ];
    let err = refusal(&zip(&entries));
    assert!(err.contains("storages `0` and `1` share bytes"), "{err}");

    let mut deflated = Entry::stored("archive/data/0", &[0; 24]);
    deflated.method = 8;
    let entries = [Entry::stored("archive/data.pkl", &state_dict()), deflated];
    let err = refusal(&zip(&entries));
    assert!(
        err.contains("entry `archive/data/0` is compressed"),
        "{err}"
    );

    let big_endian = [
        Entry::stored("archive/data.pkl", &state_dict()),
        Entry::stored("archive/byteorder", b"big"),
    ];
    assert!(refusal(&zip(&big_endian)).contains("byte order `big`"));
    let no_pickle = [Entry::stored("archive/data/0", &[0; 4])];
    assert!(refusal(&zip(&no_pickle)).contains("without a `data.pkl`"));
}

#[test]
fn truncated_files_and_pickles_are_errors() {
    let file = with(state_dict());
    for len in 0..file.len() {
        let err = read(&file[..len]).err();
        assert!(err.is_some(), "{len} of {} bytes read", file.len());
    }
    let pickle = state_dict();
    for len in 0..pickle.len() {
        let err = refusal(&with(pickle[..len].to_vec()));
        assert!(err.contains("archive/data.pkl"), "{err}");
    }
    let legacy = legacy(state_dict(), &["0", "1"], &legacy_storages());
    for len in 0..legacy.len() {
        assert!(read(&legacy[..len]).is_err(), "{len} legacy bytes read");
    }
}

#[test]
fn bad_opcodes_memo_and_nesting_are_errors() {
    let err = refusal(&with(Pickle::new().op(0xff).stop()));
    assert!(err.contains("byte 2: unknown opcode 0xff"), "{err}");
    let err = refusal(&with(Pickle::new().op(b'i').stop()));
    assert!(err.contains("opcode INST (0x69) is not supported"), "{err}");
    let err = refusal(&with(Pickle::new().op(b'h').op(7).stop()));
    assert!(err.contains("memo index 7 is not set"), "{err}");
    let err = refusal(&with(
        Pickle::new().op(b'j').raw(&u32::MAX.to_le_bytes()).stop(),
    ));
    assert!(err.contains("memo index 4294967295 is not set"), "{err}");
    let protocol = Pickle(vec![0x80, 9]).stop();
    assert!(refusal(&with(protocol)).contains("pickle protocol 9"));

    let deep = Pickle::new().raw(&[b'('; 100_000]).stop();
    assert!(refusal(&with(deep)).contains("MARKs nest deeper than"));
    let wide = Pickle::new().raw(&vec![b'N'; 2 << 20]).stop();
    assert!(refusal(&with(wide)).contains("values on the stack"));
    let lists = Pickle::new().raw(&b"]q\x00".repeat((1 << 20) + 1)).stop();
    assert!(refusal(&with(lists)).contains("values on the stack"));
    let underflow = Pickle::new().op(b'(').op(b'R').stop();
    assert!(refusal(&with(underflow)).contains("stack underflow"));
    let not_a_dict = Pickle::new().int(3).stop();
    assert!(refusal(&with(not_a_dict)).contains("no dict of tensors"));
    let not_a_tensor = Pickle::new().op(b'}').str("w").int(3).op(b's').stop();
    assert!(refusal(&with(not_a_tensor)).contains("tensor `w`: not a tensor"));
}

/// Bytes of a valid checkpoint changed one at a time: each read is an error or tensors inside
/// the file, never a panic.
#[test]
fn mutated_checkpoints_never_panic() {
    let file = with(state_dict());
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..4000 {
        let mut bytes = file.clone();
        for _ in 0..3 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let at = (state >> 16) as usize % bytes.len();
            bytes[at] = (state >> 8) as u8;
        }
        if let Ok(tensors) = read_checkpoint(Path::new(PATH), &bytes) {
            for t in tensors.values() {
                assert!(t.bytes.end <= bytes.len());
            }
        }
    }
}
