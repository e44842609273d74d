//! The allow-list: the only Python globals a checkpoint may name. Everything else, however
//! harmless it looks (`builtins.getattr`, `_codecs.encode`, `torch.device`), is refused by
//! its dotted name the moment a GLOBAL opcode asks for it, so nothing a refused global would
//! build ever reaches the stack.

/// A storage's element type, from the legacy storage class that names it
/// (`torch.FloatStorage` is f32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F64,
    F32,
    F16,
    BF16,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
}

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F64 | Dtype::I64 => 8,
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F16 | Dtype::BF16 | Dtype::I16 => 2,
            Dtype::I8 | Dtype::U8 | Dtype::Bool => 1,
        }
    }

    /// The name safetensors gives the same type.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F64 => "F64",
            Dtype::F32 => "F32",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::I64 => "I64",
            Dtype::I32 => "I32",
            Dtype::I16 => "I16",
            Dtype::I8 => "I8",
            Dtype::U8 => "U8",
            Dtype::Bool => "BOOL",
        }
    }
}

/// A global the unpickler knows. None of them runs anything: each is a tag that REDUCE
/// interprets as data (a new empty dict, a tensor's description, a storage's type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Global {
    /// `collections.OrderedDict`: called with no arguments, an empty dict.
    OrderedDict,
    /// `torch._utils._rebuild_tensor(storage, offset, size, stride)`.
    RebuildTensor,
    /// `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad,
    /// backward_hooks[, metadata])`: how torch pickles every tensor.
    RebuildTensorV2,
    /// `torch._utils._rebuild_parameter(data, requires_grad, backward_hooks)`: the tensor
    /// itself (gradients mean nothing to a reader of weights).
    RebuildParameter,
    /// A storage class, as the first element of a persistent id names it; never callable.
    Storage(Dtype),
}

/// The storage classes, by the name torch gives them.
const STORAGES: [(&str, Dtype); 10] = [
    ("DoubleStorage", Dtype::F64),
    ("FloatStorage", Dtype::F32),
    ("HalfStorage", Dtype::F16),
    ("BFloat16Storage", Dtype::BF16),
    ("LongStorage", Dtype::I64),
    ("IntStorage", Dtype::I32),
    ("ShortStorage", Dtype::I16),
    ("CharStorage", Dtype::I8),
    ("ByteStorage", Dtype::U8),
    ("BoolStorage", Dtype::Bool),
];

impl Global {
    /// The global `module.name` stands for, or why it is refused.
    pub(super) fn resolve(module: &str, name: &str) -> Result<Global, String> {
        let global = match (module, name) {
            ("collections", "OrderedDict") => Some(Global::OrderedDict),
            ("torch._utils", "_rebuild_tensor") => Some(Global::RebuildTensor),
            ("torch._utils", "_rebuild_tensor_v2") => Some(Global::RebuildTensorV2),
            ("torch._utils", "_rebuild_parameter") => Some(Global::RebuildParameter),
            ("torch", storage) => STORAGES
                .iter()
                .find(|(n, _)| *n == storage)
                .map(|&(_, dtype)| Global::Storage(dtype)),
            _ => None,
        };
        global.ok_or_else(|| format!("global `{module}.{name}` is not allowed"))
    }

    /// The dotted name, for errors.
    pub(super) fn name(self) -> String {
        match self {
            Global::OrderedDict => "collections.OrderedDict".into(),
            Global::RebuildTensor => "torch._utils._rebuild_tensor".into(),
            Global::RebuildTensorV2 => "torch._utils._rebuild_tensor_v2".into(),
            Global::RebuildParameter => "torch._utils._rebuild_parameter".into(),
            Global::Storage(dtype) => {
                let name = STORAGES.iter().find(|(_, d)| *d == dtype).map(|(n, _)| *n);
                format!("torch.{}", name.unwrap_or("Storage"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torch_names_resolve_and_others_are_refused_by_name() {
        assert_eq!(
            Global::resolve("torch", "BFloat16Storage"),
            Ok(Global::Storage(Dtype::BF16))
        );
        assert_eq!(
            Global::resolve("torch._utils", "_rebuild_tensor_v2"),
            Ok(Global::RebuildTensorV2)
        );
        for (module, name) in [
            ("posix", "system"),
            ("builtins", "eval"),
            ("builtins", "getattr"),
            ("torch", "load"),
            ("torch._utils", "_rebuild_device_tensor_from_numpy"),
        ] {
            let err = Global::resolve(module, name).unwrap_err();
            assert_eq!(err, format!("global `{module}.{name}` is not allowed"));
        }
        for (name, dtype) in STORAGES {
            assert_eq!(Global::Storage(dtype).name(), format!("torch.{name}"));
        }
    }
}
