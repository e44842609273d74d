//! The pickle machine: a data-only interpreter of the opcodes `torch.save` writes (protocols
//! 2 to 5), building the values of `value`. Nothing is called, imported or allocated on a
//! pickle's say-so: a global outside the allow-list is refused when named, REDUCE interprets
//! an allowed one as data, storages stay in the file, and the stack, the MARK nesting, the
//! memo and the number of objects are bounded.

use std::collections::HashMap;

use super::globals::Global;
use super::opcodes::*;
use super::value::{Object, Pickled, StorageDecl, TensorDecl, Value};

/// How deep MARKs may nest, and how many values the stack, objects the arena and entries the
/// memo may hold: far above what a checkpoint needs (a few dozen per tensor), far below what
/// would exhaust memory.
const MAX_MARKS: usize = 256;
const MAX_STACK: usize = 1 << 20;
const MAX_OBJECTS: usize = 1 << 22;
const MAX_MEMO: usize = 1 << 22;
/// A GLOBAL's module or name is a Python identifier path, never this long.
const MAX_LINE: usize = 256;

/// Runs the pickle at the start of `input` to its STOP. An error says at which byte and why.
pub(super) fn unpickle(input: &[u8]) -> Result<Pickled, String> {
    let mut machine = Machine {
        input,
        pos: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        objects: Vec::new(),
        storages: Vec::new(),
        storage_keys: HashMap::new(),
    };
    loop {
        let at = machine.pos;
        match machine.step() {
            Ok(Some(root)) => {
                return Ok(Pickled {
                    objects: machine.objects,
                    storages: machine.storages,
                    root,
                    end: machine.pos,
                })
            }
            Ok(None) => {}
            Err(reason) => return Err(format!("byte {at}: {reason}")),
        }
    }
}

struct Machine<'a> {
    input: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    /// The stack's length at each open MARK, innermost last; nothing below the innermost is
    /// reachable until that MARK is popped.
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
    objects: Vec<Object>,
    storages: Vec<StorageDecl>,
    storage_keys: HashMap<String, usize>,
}

type Step<T> = Result<T, String>;

impl<'a> Machine<'a> {
    /// Runs one opcode; the root value once STOP is reached.
    fn step(&mut self) -> Step<Option<Value>> {
        let op = self.byte()?;
        match op {
            PROTO => {
                let version = self.byte()?;
                if !(2..=5).contains(&version) {
                    return Err(format!("pickle protocol {version} (2 to 5 are read)"));
                }
            }
            // Frames only group opcodes for buffered reading; the input is all here.
            FRAME => {
                let len = u64::from_le_bytes(self.array()?);
                if len > (self.input.len() - self.pos) as u64 {
                    return Err(format!("a frame of {len} bytes runs past the end"));
                }
            }
            STOP => return self.pop().map(Some),
            MARK => {
                if self.marks.len() >= MAX_MARKS {
                    return Err(format!("MARKs nest deeper than {MAX_MARKS}"));
                }
                self.marks.push(self.stack.len());
            }
            POP => {
                if self.stack.len() > self.floor() {
                    self.pop()?;
                } else {
                    self.pop_mark()?;
                }
            }
            POP_MARK => {
                self.pop_mark()?;
            }
            DUP => {
                let top = self.top()?;
                self.push(top)?;
            }
            NONE => self.push(Value::None)?,
            NEWTRUE => self.push(Value::Bool(true))?,
            NEWFALSE => self.push(Value::Bool(false))?,
            BININT => {
                let v = i32::from_le_bytes(self.array()?);
                self.push(Value::Int(v.into()))?;
            }
            BININT1 => {
                let v = self.byte()?;
                self.push(Value::Int(v.into()))?;
            }
            BININT2 => {
                let v = u16::from_le_bytes(self.array()?);
                self.push(Value::Int(v.into()))?;
            }
            LONG1 => {
                let len = self.byte()?;
                self.long(len.into())?;
            }
            LONG4 => {
                let len = i32::from_le_bytes(self.array()?);
                let len = usize::try_from(len).map_err(|_| "LONG4 of negative length")?;
                self.long(len)?;
            }
            BINFLOAT => {
                let v = f64::from_be_bytes(self.array()?);
                self.push(Value::Float(v))?;
            }
            SHORT_BINUNICODE => {
                let len = self.byte()?;
                self.string(len.into())?;
            }
            BINUNICODE => {
                let len = u32::from_le_bytes(self.array()?);
                self.string(len as usize)?;
            }
            BINUNICODE8 => {
                let len = u64::from_le_bytes(self.array()?);
                self.string(usize::try_from(len).unwrap_or(usize::MAX))?;
            }
            SHORT_BINBYTES => {
                let len = self.byte()?;
                self.bytes(len.into())?;
            }
            BINBYTES => {
                let len = u32::from_le_bytes(self.array()?);
                self.bytes(len as usize)?;
            }
            BINBYTES8 => {
                let len = u64::from_le_bytes(self.array()?);
                self.bytes(usize::try_from(len).unwrap_or(usize::MAX))?;
            }
            EMPTY_TUPLE => self.alloc(Object::Tuple(Vec::new()))?,
            TUPLE1 | TUPLE2 | TUPLE3 => {
                let n = usize::from(op - TUPLE1) + 1;
                let mut items = vec![Value::None; n];
                for item in items.iter_mut().rev() {
                    *item = self.pop()?;
                }
                self.alloc(Object::Tuple(items))?;
            }
            TUPLE => {
                let items = self.pop_mark()?;
                self.alloc(Object::Tuple(items))?;
            }
            EMPTY_LIST => self.alloc(Object::List(Vec::new()))?,
            LIST => {
                let items = self.pop_mark()?;
                self.alloc(Object::List(items))?;
            }
            APPEND => {
                let item = self.pop()?;
                self.list_on_top()?.push(item);
            }
            APPENDS => {
                let items = self.pop_mark()?;
                self.list_on_top()?.extend(items);
            }
            EMPTY_DICT => self.alloc(Object::Dict(Vec::new()))?,
            DICT => {
                let items = pairs(self.pop_mark()?)?;
                self.alloc(Object::Dict(items))?;
            }
            SETITEM => {
                let value = self.pop()?;
                let key = self.pop()?;
                self.dict_on_top()?.push((key, value));
            }
            SETITEMS => {
                let items = pairs(self.pop_mark()?)?;
                self.dict_on_top()?.extend(items);
            }
            GLOBAL => {
                let module = self.line()?;
                let name = self.line()?;
                let global = Global::resolve(module, name)?;
                self.alloc(Object::Global(global))?;
            }
            STACK_GLOBAL => {
                let name = self.pop()?;
                let module = self.pop()?;
                let global = match (self.str_of(module), self.str_of(name)) {
                    (Some(module), Some(name)) => Global::resolve(module, name)?,
                    _ => return Err("STACK_GLOBAL of something other than two strings".into()),
                };
                self.alloc(Object::Global(global))?;
            }
            REDUCE => {
                let args = self.pop()?;
                let callable = self.pop()?;
                let value = self.reduce(callable, args)?;
                self.push(value)?;
            }
            BUILD => {
                let _state = self.pop()?;
                // An OrderedDict's attributes (a state dict's `_metadata`) come as a BUILD;
                // they mean nothing here. Anything else would be setting state on an object.
                let target = self.top()?;
                if !matches!(self.object(target), Some(Object::Dict(_))) {
                    return Err(format!("BUILD on {} is not allowed", self.kind(target)));
                }
            }
            BINPUT => {
                let key = self.byte()?;
                self.put(key.into())?;
            }
            LONG_BINPUT => {
                let key = u32::from_le_bytes(self.array()?);
                self.put(key)?;
            }
            MEMOIZE => {
                let key = u32::try_from(self.memo.len()).map_err(|_| "the memo is full")?;
                self.put(key)?;
            }
            BINGET => {
                let key = self.byte()?;
                self.get(key.into())?;
            }
            LONG_BINGET => {
                let key = u32::from_le_bytes(self.array()?);
                self.get(key)?;
            }
            BINPERSID => {
                let pid = self.pop()?;
                let storage = self.persistent_load(pid)?;
                self.alloc(Object::Storage(storage))?;
            }
            other => return Err(refusal(other)),
        }
        Ok(None)
    }

    fn byte(&mut self) -> Step<u8> {
        let [b] = self.array()?;
        Ok(b)
    }

    fn array<const N: usize>(&mut self) -> Step<[u8; N]> {
        let bytes = self.take(N)?;
        let mut out = [0; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn take(&mut self, n: usize) -> Step<&'a [u8]> {
        let input: &'a [u8] = self.input;
        let rest = input.get(self.pos..).unwrap_or_default();
        let bytes = rest
            .get(..n)
            .ok_or_else(|| format!("truncated: {n} bytes wanted, {} left", rest.len()))?;
        self.pos += n;
        Ok(bytes)
    }

    /// A GLOBAL's module or name: text up to a newline.
    fn line(&mut self) -> Step<&'a str> {
        let input: &'a [u8] = self.input;
        let rest = input.get(self.pos..).unwrap_or_default();
        let window = rest.get(..MAX_LINE + 1).unwrap_or(rest);
        let len = window
            .iter()
            .position(|&b| b == b'\n')
            .ok_or("GLOBAL without a newline-terminated name")?;
        self.pos += len + 1;
        let text = rest.get(..len).unwrap_or_default();
        std::str::from_utf8(text).map_err(|_| "GLOBAL name is not UTF-8".into())
    }

    fn long(&mut self, len: usize) -> Step<()> {
        let bytes = self.take(len)?;
        if len > 8 {
            let big = Object::BigInt(bytes.to_vec());
            return self.alloc(big);
        }
        // Sign-extend the little-endian two's complement to 64 bits.
        let fill = if bytes.last().is_some_and(|&b| b & 0x80 != 0) {
            0xff
        } else {
            0
        };
        let mut full = [fill; 8];
        full[..len].copy_from_slice(bytes);
        self.push(Value::Int(i64::from_le_bytes(full)))
    }

    fn string(&mut self, len: usize) -> Step<()> {
        let bytes = self.take(len)?;
        let s = std::str::from_utf8(bytes).map_err(|_| "a string that is not UTF-8")?;
        let s = Object::Str(s.to_string());
        self.alloc(s)
    }

    fn bytes(&mut self, len: usize) -> Step<()> {
        self.take(len)?;
        self.alloc(Object::Bytes)
    }

    /// Where the innermost MARK holds the stack: nothing below is reachable.
    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn push(&mut self, value: Value) -> Step<()> {
        if self.stack.len() >= MAX_STACK {
            return Err(format!("more than {MAX_STACK} values on the stack"));
        }
        self.stack.push(value);
        Ok(())
    }

    fn pop(&mut self) -> Step<Value> {
        if self.stack.len() <= self.floor() {
            return Err("stack underflow".into());
        }
        self.stack.pop().ok_or_else(|| "stack underflow".into())
    }

    fn top(&self) -> Step<Value> {
        match self.stack.last() {
            Some(&v) if self.stack.len() > self.floor() => Ok(v),
            _ => Err("stack underflow".into()),
        }
    }

    /// The values pushed since the innermost MARK, which is closed.
    fn pop_mark(&mut self) -> Step<Vec<Value>> {
        let mark = self.marks.pop().ok_or("no MARK to pop to")?;
        if mark > self.stack.len() {
            return Err("stack underflow".into());
        }
        Ok(self.stack.split_off(mark))
    }

    /// A new object in the arena.
    fn create(&mut self, object: Object) -> Step<Value> {
        if self.objects.len() >= MAX_OBJECTS {
            return Err(format!("more than {MAX_OBJECTS} objects"));
        }
        self.objects.push(object);
        Ok(Value::Obj(self.objects.len() - 1))
    }

    /// A new object, pushed.
    fn alloc(&mut self, object: Object) -> Step<()> {
        let value = self.create(object)?;
        self.push(value)
    }

    fn put(&mut self, key: u32) -> Step<()> {
        let top = self.top()?;
        if self.memo.len() >= MAX_MEMO && !self.memo.contains_key(&key) {
            return Err(format!("more than {MAX_MEMO} memo entries"));
        }
        self.memo.insert(key, top);
        Ok(())
    }

    fn get(&mut self, key: u32) -> Step<()> {
        let value = *self
            .memo
            .get(&key)
            .ok_or_else(|| format!("memo index {key} is not set"))?;
        self.push(value)
    }

    fn object(&self, value: Value) -> Option<&Object> {
        match value {
            Value::Obj(i) => self.objects.get(i),
            _ => None,
        }
    }

    fn str_of(&self, value: Value) -> Option<&str> {
        match self.object(value) {
            Some(Object::Str(s)) => Some(s),
            _ => None,
        }
    }

    /// What a value is, for errors.
    fn kind(&self, value: Value) -> String {
        let kind = match value {
            Value::None => "None",
            Value::Bool(_) => "a bool",
            Value::Int(_) => "an int",
            Value::Float(_) => "a float",
            Value::Obj(_) => match self.object(value) {
                Some(Object::Str(_)) => "a string",
                Some(Object::Bytes) => "bytes",
                Some(Object::BigInt(_)) => "an int",
                Some(Object::Tuple(_)) => "a tuple",
                Some(Object::List(_)) => "a list",
                Some(Object::Dict(_)) => "a dict",
                Some(Object::Global(g)) => return format!("global `{}`", g.name()),
                Some(Object::Storage(_)) => "a storage",
                Some(Object::Tensor(_)) => "a tensor",
                None => "nothing",
            },
        };
        kind.into()
    }

    fn list_on_top(&mut self) -> Step<&mut Vec<Value>> {
        let top = self.top()?;
        let kind = self.kind(top);
        match top {
            Value::Obj(i) => match self.objects.get_mut(i) {
                Some(Object::List(items)) => Ok(items),
                _ => Err(format!("APPEND to {kind}")),
            },
            _ => Err(format!("APPEND to {kind}")),
        }
    }

    fn dict_on_top(&mut self) -> Step<&mut Vec<(Value, Value)>> {
        let top = self.top()?;
        let kind = self.kind(top);
        match top {
            Value::Obj(i) => match self.objects.get_mut(i) {
                Some(Object::Dict(items)) => Ok(items),
                _ => Err(format!("SETITEM on {kind}")),
            },
            _ => Err(format!("SETITEM on {kind}")),
        }
    }

    /// REDUCE: an allow-listed global applied to a tuple, interpreted as data.
    fn reduce(&mut self, callable: Value, args: Value) -> Step<Value> {
        let global = match self.object(callable) {
            Some(Object::Global(g)) => *g,
            _ => return Err(format!("REDUCE of {}", self.kind(callable))),
        };
        let args = match self.object(args) {
            Some(Object::Tuple(items)) => items.clone(),
            _ => {
                let kind = self.kind(args);
                return Err(format!("`{}` called with {kind}", global.name()));
            }
        };
        let wrong = |what: &str| format!("`{}` called with {what}", global.name());
        match global {
            Global::OrderedDict => {
                if !args.is_empty() {
                    return Err(wrong("arguments"));
                }
                self.create(Object::Dict(Vec::new()))
            }
            Global::RebuildTensor | Global::RebuildTensorV2 => {
                let arity = match global {
                    Global::RebuildTensor => 4..=4,
                    _ => 6..=7,
                };
                if !arity.contains(&args.len()) {
                    return Err(wrong(&format!("{} arguments", args.len())));
                }
                let tensor = self.tensor(&args).map_err(|e| wrong(&e))?;
                self.create(Object::Tensor(tensor))
            }
            Global::RebuildParameter => match args.as_slice() {
                [data, _, _] if matches!(self.object(*data), Some(Object::Tensor(_))) => Ok(*data),
                _ => Err(wrong("something other than (tensor, requires_grad, hooks)")),
            },
            Global::Storage(_) => Err(format!("calling `{}` is not allowed", global.name())),
        }
    }

    /// `(storage, offset, size, stride, ...)`: the rest (gradients, hooks, metadata) does
    /// not change the values.
    fn tensor(&self, args: &[Value]) -> Step<TensorDecl> {
        let [storage, offset, size, stride, ..] = args else {
            return Err("too few arguments".into());
        };
        let storage = match self.object(*storage) {
            Some(Object::Storage(s)) => *s,
            _ => return Err(format!("{} for a storage", self.kind(*storage))),
        };
        let offset = match *offset {
            Value::Int(n) => u64::try_from(n).map_err(|_| "a negative offset")?,
            other => return Err(format!("{} for an offset", self.kind(other))),
        };
        let (size, stride) = (self.dims(*size)?, self.dims(*stride)?);
        if size.len() != stride.len() {
            return Err(format!("{} sizes and {} strides", size.len(), stride.len()));
        }
        Ok(TensorDecl {
            storage,
            offset,
            size,
            stride,
        })
    }

    /// A tuple of non-negative ints: a shape or strides.
    fn dims(&self, value: Value) -> Step<Vec<u64>> {
        let Some(Object::Tuple(items)) = self.object(value) else {
            return Err(format!("{} for a shape", self.kind(value)));
        };
        items
            .iter()
            .map(|v| match *v {
                Value::Int(n) => u64::try_from(n).map_err(|_| "a negative size or stride".into()),
                other => Err(format!("{} in a shape", self.kind(other))),
            })
            .collect()
    }

    /// A persistent id: `('storage', storage class, key, location, numel[, view])`. One key
    /// is one storage however often it is named, and must be named alike each time.
    fn persistent_load(&mut self, pid: Value) -> Step<usize> {
        let Some(Object::Tuple(items)) = self.object(pid) else {
            return Err(format!("persistent id is {}", self.kind(pid)));
        };
        let (class, key, numel) = match items.as_slice() {
            [tag, class, key, _location, Value::Int(numel), rest @ ..]
                if self.str_of(*tag) == Some("storage") && rest.len() <= 1 =>
            {
                if rest.first().is_some_and(|&v| v != Value::None) {
                    return Err("storage views (legacy view metadata) are not supported".into());
                }
                (*class, *key, *numel)
            }
            _ => return Err("persistent id is not ('storage', type, key, location, size)".into()),
        };
        let dtype = match self.object(class) {
            Some(Object::Global(Global::Storage(dtype))) => *dtype,
            _ => return Err(format!("storage type is {}", self.kind(class))),
        };
        let key = self
            .str_of(key)
            .ok_or_else(|| format!("storage key is {}", self.kind(key)))?
            .to_string();
        let numel =
            u64::try_from(numel).map_err(|_| format!("storage `{key}` has size {numel}"))?;
        let decl = StorageDecl { key, dtype, numel };
        if let Some(&i) = self.storage_keys.get(&decl.key) {
            return match self.storages.get(i) {
                Some(seen) if *seen == decl => Ok(i),
                _ => Err(format!(
                    "storage `{}` is declared twice, with different types or sizes",
                    decl.key
                )),
            };
        }
        self.storage_keys
            .insert(decl.key.clone(), self.storages.len());
        self.storages.push(decl);
        Ok(self.storages.len() - 1)
    }
}

/// A DICT's or SETITEMS' values as key/value pairs.
fn pairs(items: Vec<Value>) -> Step<Vec<(Value, Value)>> {
    if items.len() % 2 != 0 {
        return Err("a dict of an odd number of keys and values".into());
    }
    Ok(items
        .chunks_exact(2)
        .filter_map(|kv| match *kv {
            [key, value] => Some((key, value)),
            _ => None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ops: &[u8]) -> Result<Pickled, String> {
        unpickle(&[&[PROTO, 2], ops, &[STOP]].concat())
    }

    #[test]
    fn ints_of_every_width_sign_extend() {
        let cases: [(&[u8], i64); 6] = [
            (&[BININT1, 0xff], 255),
            (&[BININT2, 0xff, 0xff], 65535),
            (&[BININT, 0xff, 0xff, 0xff, 0xff], -1),
            (&[LONG1, 0], 0),
            (&[LONG1, 1, 0x80], -128),
            (&[LONG1, 2, 0x80, 0x00], 128),
        ];
        for (ops, want) in cases {
            assert_eq!(run(ops).unwrap().root, Value::Int(want), "{ops:?}");
        }
        let wide = run(&[LONG1, 9, 1, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap();
        assert!(matches!(wide.object(wide.root), Some(Object::BigInt(b)) if b.len() == 9));
    }

    #[test]
    fn a_memoized_list_is_the_list_appended_to_later() {
        // [] memoized, appended to, then fetched: one list, holding the item.
        let p = run(&[EMPTY_LIST, BINPUT, 0, BININT1, 7, APPEND, POP, BINGET, 0]).unwrap();
        match p.object(p.root) {
            Some(Object::List(items)) => assert_eq!(items, &[Value::Int(7)]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn values_below_a_mark_are_out_of_reach_until_it_closes() {
        assert_eq!(
            run(&[BININT1, 3, NONE, MARK, POP, POP]).unwrap().root,
            Value::Int(3)
        );
        let err = run(&[NONE, MARK, DUP]).unwrap_err();
        assert!(err.contains("stack underflow"), "{err}");
        let p = run(&[NONE, MARK, NEWTRUE, NEWFALSE, TUPLE]).unwrap();
        match p.object(p.root) {
            Some(Object::Tuple(items)) => {
                assert_eq!(items, &[Value::Bool(true), Value::Bool(false)])
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_frame_or_string_past_the_end_is_refused_before_reading() {
        let err = run(&[FRAME, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]).unwrap_err();
        assert!(err.contains("runs past the end"), "{err}");
        let err = run(&[BINUNICODE8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]).unwrap_err();
        assert!(err.contains("truncated"), "{err}");
        let err = run(&[BINUNICODE, 2, 0, 0, 0, 0xc3, 0x28]).unwrap_err();
        assert!(err.contains("not UTF-8"), "{err}");
    }
}
