//! PyTorch checkpoints written opcode by opcode, in the zip layout torch.save uses: the
//! hostile ones the reader must refuse and the valid ones they are mutations of.

/// A pickle under construction, protocol 2 as torch writes it.
pub struct Pickle(pub Vec<u8>);

impl Pickle {
    pub fn new() -> Self {
        Pickle(vec![0x80, 2])
    }

    pub fn op(mut self, op: u8) -> Self {
        self.0.push(op);
        self
    }

    pub fn raw(mut self, bytes: &[u8]) -> Self {
        self.0.extend_from_slice(bytes);
        self
    }

    pub fn global(self, module: &str, name: &str) -> Self {
        self.op(b'c')
            .raw(module.as_bytes())
            .op(b'\n')
            .raw(name.as_bytes())
            .op(b'\n')
    }

    pub fn str(self, s: &str) -> Self {
        self.op(b'X')
            .raw(&(s.len() as u32).to_le_bytes())
            .raw(s.as_bytes())
    }

    pub fn int(self, n: i32) -> Self {
        self.op(b'J').raw(&n.to_le_bytes())
    }

    /// A tuple of ints (a shape or strides).
    pub fn ints(self, values: &[i32]) -> Self {
        values.iter().fold(self.op(b'('), |p, &v| p.int(v)).op(b't')
    }

    /// `('storage', torch.<class>, key, 'cpu', numel)` and BINPERSID.
    pub fn storage(self, class: &str, key: &str, numel: i64) -> Self {
        self.op(b'(')
            .str("storage")
            .global("torch", class)
            .str(key)
            .str("cpu")
            .op(0x8a)
            .op(8)
            .raw(&numel.to_le_bytes())
            .op(b't')
            .op(b'Q')
    }

    /// `_rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())`.
    pub fn tensor(self, class: &str, key: &str, numel: i64, offset: i32, size: &[i32]) -> Self {
        let stride = contiguous(size);
        self.tensor_strided(class, key, numel, offset, size, &stride)
    }

    pub fn tensor_strided(
        self,
        class: &str,
        key: &str,
        numel: i64,
        offset: i32,
        size: &[i32],
        stride: &[i32],
    ) -> Self {
        self.global("torch._utils", "_rebuild_tensor_v2")
            .op(b'(')
            .storage(class, key, numel)
            .int(offset)
            .ints(size)
            .ints(stride)
            .op(0x89)
            .global("collections", "OrderedDict")
            .op(b')')
            .op(b'R')
            .op(b't')
            .op(b'R')
    }

    pub fn stop(self) -> Vec<u8> {
        self.op(b'.').0
    }
}

impl Default for Pickle {
    fn default() -> Self {
        Self::new()
    }
}

pub fn contiguous(size: &[i32]) -> Vec<i32> {
    let mut stride = vec![1; size.len()];
    for i in (0..size.len().saturating_sub(1)).rev() {
        stride[i] = stride[i + 1] * size[i + 1];
    }
    stride
}

/// The state dict every valid checkpoint here holds: `a` a [2, 3] f32 matrix over storage
/// `0`, `b` a view of its last four values, `tied` the same tensor as `a` (a memo fetch), `h`
/// a [2] f16 vector over storage `1`.
pub fn state_dict() -> Vec<u8> {
    Pickle::new()
        .global("collections", "OrderedDict")
        .op(b')')
        .op(b'R')
        .op(b'q')
        .op(0)
        .op(b'(')
        .str("a")
        .tensor("FloatStorage", "0", 6, 0, &[2, 3])
        .op(b'q')
        .op(1)
        .str("b")
        .tensor("FloatStorage", "0", 6, 2, &[4])
        .str("tied")
        .op(b'h')
        .op(1)
        .str("h")
        .tensor("HalfStorage", "1", 2, 0, &[2])
        .op(b'u')
        .stop()
}

/// Storage `0`: 1.0 to 6.0 as f32; storage `1`: 1.0 and 2.0 as f16.
pub fn storages() -> Vec<(&'static str, Vec<u8>)> {
    let f32s: Vec<u8> = (1..=6).flat_map(|v| (v as f32).to_le_bytes()).collect();
    vec![("0", f32s), ("1", vec![0x00, 0x3c, 0x00, 0x40])]
}

/// One archive entry for [`zip`].
pub struct Entry {
    pub name: String,
    pub data: Vec<u8>,
    /// 0 stored, 8 deflated (the bytes are not really deflated: the reader refuses first).
    pub method: u16,
    /// Added to the size the central directory gives, to make an entry claim its neighbour.
    pub extra_len: u32,
}

impl Entry {
    pub fn stored(name: &str, data: &[u8]) -> Self {
        Entry {
            name: name.to_string(),
            data: data.to_vec(),
            method: 0,
            extra_len: 0,
        }
    }
}

/// A checkpoint as torch.save lays it out: `archive/data.pkl`, `archive/data/<key>`,
/// `archive/byteorder`.
pub fn checkpoint(pickle: &[u8], storages: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut entries = vec![Entry::stored("archive/data.pkl", pickle)];
    entries.push(Entry::stored("archive/byteorder", b"little"));
    for (key, data) in storages {
        entries.push(Entry::stored(&format!("archive/data/{key}"), data));
    }
    zip(&entries)
}

/// A zip archive of `entries`, written by hand so that a test controls every field.
pub fn zip(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for e in entries {
        let offset = out.len() as u32;
        let crc = crc32(&e.data);
        let size = e.data.len() as u32;
        // Local header.
        out.extend_from_slice(&0x04034b50u32.to_le_bytes());
        out.extend_from_slice(&20u16.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&e.method.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&33u16.to_le_bytes());
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&(e.name.len() as u16).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(e.name.as_bytes());
        out.extend_from_slice(&e.data);
        // Its central directory record.
        let claimed = size + e.extra_len;
        central.extend_from_slice(&0x02014b50u32.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes());
        central.extend_from_slice(&0u16.to_le_bytes());
        central.extend_from_slice(&e.method.to_le_bytes());
        central.extend_from_slice(&0u16.to_le_bytes());
        central.extend_from_slice(&33u16.to_le_bytes());
        central.extend_from_slice(&crc.to_le_bytes());
        central.extend_from_slice(&claimed.to_le_bytes());
        central.extend_from_slice(&claimed.to_le_bytes());
        central.extend_from_slice(&(e.name.len() as u16).to_le_bytes());
        central.extend_from_slice(&[0; 8]);
        central.extend_from_slice(&0u32.to_le_bytes());
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(e.name.as_bytes());
    }
    let start = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x06054b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&start.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
