//! What a pickle builds: plain values (numbers, strings, tuples, lists, dicts) and three kinds
//! of torch object, each a description rather than a Python object: a storage (its key,
//! element type and length, from a persistent id), a tensor (its storage, offset, shape and
//! strides, from `_rebuild_tensor_v2`), and an allow-listed global as a tag.
//!
//! Objects live in one arena and values refer to them by index, so a list memoized and then
//! appended to, or a tensor fetched twice from the memo (tied weights), is one object, and
//! nothing is ever dropped or compared recursively.

use super::globals::{Dtype, Global};

/// A value on the stack or in the memo: small ones inline, the rest an index into the arena.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Obj(usize),
}

/// What a pickle builds.
#[derive(Debug)]
pub(super) enum Object {
    Str(String),
    /// A bytes object: nothing in a checkpoint reads one, so its contents are skipped.
    Bytes,
    /// An integer wider than 64 bits, as little-endian two's-complement bytes (the legacy
    /// format's magic number is one).
    BigInt(Vec<u8>),
    Tuple(Vec<Value>),
    List(Vec<Value>),
    /// A dict or an OrderedDict: its items in insertion order.
    Dict(Vec<(Value, Value)>),
    Global(Global),
    /// An index into [`Pickled::storages`].
    Storage(usize),
    Tensor(TensorDecl),
}

/// A storage as a persistent id declares it: where it lives is the container's business.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct StorageDecl {
    pub key: String,
    pub dtype: Dtype,
    /// Elements of `dtype`.
    pub numel: u64,
}

/// A tensor as `_rebuild_tensor_v2` describes it, in elements of its storage's type.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct TensorDecl {
    /// An index into [`Pickled::storages`].
    pub storage: usize,
    pub offset: u64,
    /// Outermost first.
    pub size: Vec<u64>,
    pub stride: Vec<u64>,
}

/// A finished pickle: the value STOP returned, the objects it refers to, the storages its
/// persistent ids declared, and where the pickle ended in the input.
#[derive(Debug)]
pub(super) struct Pickled {
    pub objects: Vec<Object>,
    pub storages: Vec<StorageDecl>,
    pub root: Value,
    pub end: usize,
}

impl Pickled {
    pub(super) fn object(&self, value: Value) -> Option<&Object> {
        match value {
            Value::Obj(i) => self.objects.get(i),
            _ => None,
        }
    }

    pub(super) fn str(&self, value: Value) -> Option<&str> {
        match self.object(value) {
            Some(Object::Str(s)) => Some(s),
            _ => None,
        }
    }
}
