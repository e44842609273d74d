//! Minimal SPIR-V reflection: which (set, binding) pairs a compute kernel uses, which of them
//! it may write, and how many bytes its push-constant block spans. Enough to build pipeline layouts from the shader and to
//! check each Rust push-constant struct against it; not a general SPIR-V reader.

use std::collections::{BTreeMap, HashMap, HashSet};

/// What a kernel binds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reflection {
    /// Storage-buffer bindings as (set, binding), sorted.
    pub bindings: Vec<(u32, u32)>,
    /// Per binding: whether the kernel may write it (a block not declared `readonly`). The
    /// recorder orders commands by these, so a wrong answer here is a data race.
    pub writes: Vec<bool>,
    /// Size in bytes of the push-constant block (0 when there is none).
    pub push_constant_size: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum ReflectError {
    #[error("not SPIR-V (bad magic or header)")]
    BadHeader,
    #[error("truncated instruction at word {0}")]
    Truncated(usize),
    #[error("push-constant block uses a type reflection does not know (id {0})")]
    UnknownType(u32),
}

const MAGIC: u32 = 0x0723_0203;
const OP_TYPE_INT: u32 = 21;
const OP_TYPE_FLOAT: u32 = 22;
const OP_TYPE_VECTOR: u32 = 23;
const OP_TYPE_ARRAY: u32 = 28;
const OP_TYPE_STRUCT: u32 = 30;
const OP_TYPE_POINTER: u32 = 32;
const OP_CONSTANT: u32 = 43;
const OP_VARIABLE: u32 = 59;
const OP_DECORATE: u32 = 71;
const OP_MEMBER_DECORATE: u32 = 72;
const DEC_ARRAY_STRIDE: u32 = 6;
const DEC_BINDING: u32 = 33;
const DEC_DESCRIPTOR_SET: u32 = 34;
const DEC_OFFSET: u32 = 35;
const DEC_NON_WRITABLE: u32 = 24;
const SC_UNIFORM: u32 = 2;
const SC_PUSH_CONSTANT: u32 = 9;
const SC_STORAGE_BUFFER: u32 = 12;

enum Type {
    Scalar(u32),
    Vector(u32, u32),
    Array(u32, u32),
    Struct(Vec<u32>),
    Pointer(u32),
}

/// Reflects a compute kernel's SPIR-V.
pub fn reflect(words: &[u32]) -> Result<Reflection, ReflectError> {
    if words.len() < 5 || words[0] != MAGIC {
        return Err(ReflectError::BadHeader);
    }
    let mut types: HashMap<u32, Type> = HashMap::new();
    let mut constants: HashMap<u32, u32> = HashMap::new();
    let mut bindings: HashMap<u32, (Option<u32>, Option<u32>)> = HashMap::new();
    let mut strides: HashMap<u32, u32> = HashMap::new();
    let mut offsets: HashMap<(u32, u32), u32> = HashMap::new();
    // Ids (variables) and (struct, member) pairs decorated NonWritable.
    let mut non_writable: HashSet<u32> = HashSet::new();
    let mut non_writable_members: HashSet<(u32, u32)> = HashSet::new();
    let mut variables = Vec::new();

    let mut i = 5;
    while i < words.len() {
        let count = (words[i] >> 16) as usize;
        let op = words[i] & 0xffff;
        if count == 0 || i + count > words.len() {
            return Err(ReflectError::Truncated(i));
        }
        let a = &words[i + 1..i + count];
        match op {
            OP_TYPE_INT | OP_TYPE_FLOAT if a.len() >= 2 => {
                types.insert(a[0], Type::Scalar(a[1] / 8));
            }
            OP_TYPE_VECTOR if a.len() >= 3 => {
                types.insert(a[0], Type::Vector(a[1], a[2]));
            }
            OP_TYPE_ARRAY if a.len() >= 3 => {
                types.insert(a[0], Type::Array(a[1], a[2]));
            }
            OP_TYPE_STRUCT if !a.is_empty() => {
                types.insert(a[0], Type::Struct(a[1..].to_vec()));
            }
            OP_TYPE_POINTER if a.len() >= 3 => {
                types.insert(a[0], Type::Pointer(a[2]));
            }
            OP_CONSTANT if a.len() >= 3 => {
                constants.insert(a[1], a[2]);
            }
            OP_VARIABLE if a.len() >= 3 => variables.push((a[0], a[1], a[2])),
            OP_DECORATE if a.len() >= 3 => match a[1] {
                DEC_BINDING => bindings.entry(a[0]).or_default().1 = Some(a[2]),
                DEC_DESCRIPTOR_SET => bindings.entry(a[0]).or_default().0 = Some(a[2]),
                DEC_ARRAY_STRIDE => {
                    strides.insert(a[0], a[2]);
                }
                _ => {}
            },
            OP_DECORATE if a.len() >= 2 && a[1] == DEC_NON_WRITABLE => {
                non_writable.insert(a[0]);
            }
            OP_MEMBER_DECORATE if a.len() >= 3 && a[2] == DEC_NON_WRITABLE => {
                non_writable_members.insert((a[0], a[1]));
            }
            OP_MEMBER_DECORATE if a.len() >= 4 && a[2] == DEC_OFFSET => {
                offsets.insert((a[0], a[1]), a[3]);
            }
            _ => {}
        }
        i += count;
    }

    // A block is read-only when the variable, or every member of its struct, is NonWritable.
    let read_only = |var: u32, ty: u32| {
        if non_writable.contains(&var) {
            return true;
        }
        let Some(Type::Pointer(pointee)) = types.get(&ty) else {
            return false;
        };
        match types.get(pointee) {
            Some(Type::Struct(members)) => {
                (0..members.len() as u32).all(|m| non_writable_members.contains(&(*pointee, m)))
            }
            _ => false,
        }
    };
    let mut out = Reflection::default();
    // Aliased blocks share a binding: it is written if any of them is.
    let mut buffers: BTreeMap<(u32, u32), bool> = BTreeMap::new();
    for (ty, id, class) in variables {
        match class {
            SC_STORAGE_BUFFER | SC_UNIFORM => {
                if let Some(&(set, Some(binding))) = bindings.get(&id) {
                    *buffers.entry((set.unwrap_or(0), binding)).or_default() |= !read_only(id, ty);
                }
            }
            SC_PUSH_CONSTANT => {
                let Some(Type::Pointer(pointee)) = types.get(&ty) else {
                    return Err(ReflectError::UnknownType(ty));
                };
                let size = type_size(*pointee, &types, &constants, &strides, &offsets)?;
                out.push_constant_size = out.push_constant_size.max(size);
            }
            _ => {}
        }
    }
    out.bindings = buffers.keys().copied().collect();
    out.writes = buffers.values().copied().collect();
    Ok(out)
}

fn type_size(
    id: u32,
    types: &HashMap<u32, Type>,
    constants: &HashMap<u32, u32>,
    strides: &HashMap<u32, u32>,
    offsets: &HashMap<(u32, u32), u32>,
) -> Result<u32, ReflectError> {
    let size = |t| type_size(t, types, constants, strides, offsets);
    match types.get(&id) {
        Some(Type::Scalar(bytes)) => Ok(*bytes),
        Some(Type::Vector(elem, n)) => Ok(size(*elem)? * n),
        Some(Type::Array(elem, len_id)) => {
            let len = *constants
                .get(len_id)
                .ok_or(ReflectError::UnknownType(*len_id))?;
            let stride = match strides.get(&id) {
                Some(s) => *s,
                None => size(*elem)?,
            };
            Ok(stride * len)
        }
        Some(Type::Struct(members)) => {
            let mut end = 0;
            for (m, &ty) in members.iter().enumerate() {
                let offset = *offsets
                    .get(&(id, m as u32))
                    .ok_or(ReflectError::UnknownType(id))?;
                end = end.max(offset + size(ty)?);
            }
            Ok(end)
        }
        _ => Err(ReflectError::UnknownType(id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_garbage() {
        assert!(matches!(reflect(&[1, 2, 3]), Err(ReflectError::BadHeader)));
        // A header followed by an instruction claiming more words than exist.
        let words = [MAGIC, 0x10000, 0, 10, 0, (9 << 16) | OP_DECORATE];
        assert!(matches!(reflect(&words), Err(ReflectError::Truncated(5))));
    }

    #[test]
    fn rmsnorm_binds_three_buffers_and_twelve_bytes_of_push_constants() {
        let r = reflect(crate::RMSNORM.spirv).unwrap();
        assert_eq!(r.bindings, vec![(0, 0), (0, 1), (0, 2)]);
        // y is read too: with `accumulate` the norm adds to it.
        assert_eq!(r.writes, vec![false, false, true]);
        assert_eq!(r.push_constant_size, 12);
    }

    #[test]
    fn read_write_blocks_count_as_written() {
        // kv_gather: the cache (bindings 0, 1), its tables (2) and the selection (3, 4) are
        // read-only, the scratch (5, 6) write-only and the fetch counters (7) read-write.
        let r = reflect(crate::KV_GATHER_Q8.spirv).unwrap();
        let written: Vec<u32> = r
            .bindings
            .iter()
            .zip(&r.writes)
            .filter(|(_, &w)| w)
            .map(|(&(_, b), _)| b)
            .collect();
        assert_eq!(written, vec![5, 6, 7]);
    }
}
