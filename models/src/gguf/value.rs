//! GGUF metadata values: the thirteen value types, typed arrays (which may nest), and typed
//! access through [`FromMeta`].

use std::fmt;

/// The type tag stored before every metadata value (GGUF `gguf_metadata_value_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    /// The type with this tag, or `None` for an unknown tag.
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The smallest number of bytes a value of this type can take in a file: the bound the
    /// reader checks an array length against before it allocates anything.
    pub(crate) fn min_encoded_len(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 => 8,
            // u64 length, possibly zero bytes of text
            String => 8,
            // u32 element type + u64 length
            Array => 12,
        }
    }

    /// Lower-case name used in messages (`u32`, `string`, `array`).
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(MetaArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A metadata array. Arrays are homogeneous, so each element type gets its own vector; this
/// keeps a 49k-entry vocabulary as one `Vec<String>` the tokenizer can borrow directly.
/// Arrays of arrays hold inner arrays that may each have a different element type.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<MetaArray>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl MetaValue {
    /// The value's type tag.
    pub fn value_type(&self) -> ValueType {
        match self {
            MetaValue::U8(_) => ValueType::U8,
            MetaValue::I8(_) => ValueType::I8,
            MetaValue::U16(_) => ValueType::U16,
            MetaValue::I16(_) => ValueType::I16,
            MetaValue::U32(_) => ValueType::U32,
            MetaValue::I32(_) => ValueType::I32,
            MetaValue::F32(_) => ValueType::F32,
            MetaValue::Bool(_) => ValueType::Bool,
            MetaValue::String(_) => ValueType::String,
            MetaValue::Array(_) => ValueType::Array,
            MetaValue::U64(_) => ValueType::U64,
            MetaValue::I64(_) => ValueType::I64,
            MetaValue::F64(_) => ValueType::F64,
        }
    }

    /// A description of the type for messages: `u32`, `array of string`.
    pub fn type_description(&self) -> String {
        match self {
            MetaValue::Array(a) => format!("array of {}", a.elem_type().name()),
            v => v.value_type().name().to_string(),
        }
    }

    /// Any integer type that holds a non-negative value, widened.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer type, widened; `None` for a u64 above `i64::MAX`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            MetaValue::I8(v) => Some(v.into()),
            MetaValue::I16(v) => Some(v.into()),
            MetaValue::I32(v) => Some(v.into()),
            MetaValue::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// A float of either width. Integers are not floats: a writer that stored an integer
    /// where a float belongs has made a mistake worth reporting.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v.into()),
            MetaValue::F64(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&MetaArray> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl MetaArray {
    /// The element type tag.
    pub fn elem_type(&self) -> ValueType {
        match self {
            MetaArray::U8(_) => ValueType::U8,
            MetaArray::I8(_) => ValueType::I8,
            MetaArray::U16(_) => ValueType::U16,
            MetaArray::I16(_) => ValueType::I16,
            MetaArray::U32(_) => ValueType::U32,
            MetaArray::I32(_) => ValueType::I32,
            MetaArray::F32(_) => ValueType::F32,
            MetaArray::Bool(_) => ValueType::Bool,
            MetaArray::String(_) => ValueType::String,
            MetaArray::Array(_) => ValueType::Array,
            MetaArray::U64(_) => ValueType::U64,
            MetaArray::I64(_) => ValueType::I64,
            MetaArray::F64(_) => ValueType::F64,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::String(v) => v.len(),
            MetaArray::Array(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as a scalar value (arrays of arrays give nested `MetaValue::Array`s).
    pub fn get(&self, i: usize) -> Option<MetaValue> {
        Some(match self {
            MetaArray::U8(v) => MetaValue::U8(*v.get(i)?),
            MetaArray::I8(v) => MetaValue::I8(*v.get(i)?),
            MetaArray::U16(v) => MetaValue::U16(*v.get(i)?),
            MetaArray::I16(v) => MetaValue::I16(*v.get(i)?),
            MetaArray::U32(v) => MetaValue::U32(*v.get(i)?),
            MetaArray::I32(v) => MetaValue::I32(*v.get(i)?),
            MetaArray::F32(v) => MetaValue::F32(*v.get(i)?),
            MetaArray::Bool(v) => MetaValue::Bool(*v.get(i)?),
            MetaArray::String(v) => MetaValue::String(v.get(i)?.clone()),
            MetaArray::Array(v) => MetaValue::Array(v.get(i)?.clone()),
            MetaArray::U64(v) => MetaValue::U64(*v.get(i)?),
            MetaArray::I64(v) => MetaValue::I64(*v.get(i)?),
            MetaArray::F64(v) => MetaValue::F64(*v.get(i)?),
        })
    }
}

/// Conversion from a borrowed metadata value, used by [`super::GgufFile::get`] and friends
/// so that a wrong type becomes an error naming the key.
pub trait FromMeta<'a>: Sized {
    /// What the caller expected, for the error message.
    const EXPECTED: &'static str;
    fn from_meta(value: &'a MetaValue) -> Option<Self>;
}

macro_rules! from_meta_int {
    ($($t:ty),*) => {$(
        impl FromMeta<'_> for $t {
            const EXPECTED: &'static str = concat!("an integer that fits ", stringify!($t));
            fn from_meta(value: &MetaValue) -> Option<Self> {
                value.as_i64().and_then(|v| <$t>::try_from(v).ok())
                    .or_else(|| value.as_u64().and_then(|v| <$t>::try_from(v).ok()))
            }
        }
    )*};
}
from_meta_int!(u32, u64, usize, i32, i64);

impl FromMeta<'_> for f64 {
    const EXPECTED: &'static str = "a float";
    fn from_meta(value: &MetaValue) -> Option<Self> {
        value.as_f64()
    }
}

impl FromMeta<'_> for f32 {
    const EXPECTED: &'static str = "a float";
    fn from_meta(value: &MetaValue) -> Option<Self> {
        value.as_f64().map(|v| v as f32)
    }
}

impl FromMeta<'_> for bool {
    const EXPECTED: &'static str = "a bool";
    fn from_meta(value: &MetaValue) -> Option<Self> {
        value.as_bool()
    }
}

impl<'a> FromMeta<'a> for &'a str {
    const EXPECTED: &'static str = "a string";
    fn from_meta(value: &'a MetaValue) -> Option<Self> {
        value.as_str()
    }
}

impl<'a> FromMeta<'a> for &'a MetaArray {
    const EXPECTED: &'static str = "an array";
    fn from_meta(value: &'a MetaValue) -> Option<Self> {
        value.as_array()
    }
}

impl<'a> FromMeta<'a> for &'a [String] {
    const EXPECTED: &'static str = "an array of strings";
    fn from_meta(value: &'a MetaValue) -> Option<Self> {
        match value.as_array()? {
            MetaArray::String(v) => Some(v),
            _ => None,
        }
    }
}

impl<'a> FromMeta<'a> for &'a [i32] {
    const EXPECTED: &'static str = "an array of i32";
    fn from_meta(value: &'a MetaValue) -> Option<Self> {
        match value.as_array()? {
            MetaArray::I32(v) => Some(v),
            _ => None,
        }
    }
}

impl<'a> FromMeta<'a> for &'a [f32] {
    const EXPECTED: &'static str = "an array of f32";
    fn from_meta(value: &'a MetaValue) -> Option<Self> {
        match value.as_array()? {
            MetaArray::F32(v) => Some(v),
            _ => None,
        }
    }
}

/// Short, human-readable rendering: long strings and arrays are elided so `hearth inspect`
/// can print every key on one line.
impl fmt::Display for MetaValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaValue::U8(v) => write!(f, "{v}"),
            MetaValue::I8(v) => write!(f, "{v}"),
            MetaValue::U16(v) => write!(f, "{v}"),
            MetaValue::I16(v) => write!(f, "{v}"),
            MetaValue::U32(v) => write!(f, "{v}"),
            MetaValue::I32(v) => write!(f, "{v}"),
            MetaValue::F32(v) => write!(f, "{v}"),
            MetaValue::Bool(v) => write!(f, "{v}"),
            MetaValue::String(s) => write_short_str(f, s),
            MetaValue::Array(a) => write!(f, "{a}"),
            MetaValue::U64(v) => write!(f, "{v}"),
            MetaValue::I64(v) => write!(f, "{v}"),
            MetaValue::F64(v) => write!(f, "{v}"),
        }
    }
}

impl fmt::Display for MetaArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 6;
        write!(f, "[{}; {}]", self.elem_type().name(), self.len())?;
        let shown = self.len().min(SHOWN);
        f.write_str(" [")?;
        for i in 0..shown {
            if i > 0 {
                f.write_str(", ")?;
            }
            if let Some(v) = self.get(i) {
                write!(f, "{v}")?;
            }
        }
        if self.len() > shown {
            f.write_str(", ...")?;
        }
        f.write_str("]")
    }
}

fn write_short_str(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    const MAX_CHARS: usize = 60;
    let mut short: String = s.chars().take(MAX_CHARS).collect();
    if short.len() < s.len() {
        short.push_str("...");
    }
    write!(f, "{short:?}")
}
