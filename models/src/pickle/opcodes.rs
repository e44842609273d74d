//! Pickle opcodes, with their names as CPython's `pickletools` gives them: the unpickler
//! matches on the constants and names an opcode it refuses.

pub(super) const MARK: u8 = b'(';
pub(super) const STOP: u8 = b'.';
pub(super) const POP: u8 = b'0';
pub(super) const POP_MARK: u8 = b'1';
pub(super) const DUP: u8 = b'2';
pub(super) const BININT: u8 = b'J';
pub(super) const BININT1: u8 = b'K';
pub(super) const BININT2: u8 = b'M';
pub(super) const NONE: u8 = b'N';
pub(super) const BINPERSID: u8 = b'Q';
pub(super) const REDUCE: u8 = b'R';
pub(super) const BINUNICODE: u8 = b'X';
pub(super) const APPEND: u8 = b'a';
pub(super) const BUILD: u8 = b'b';
pub(super) const GLOBAL: u8 = b'c';
pub(super) const DICT: u8 = b'd';
pub(super) const EMPTY_DICT: u8 = b'}';
pub(super) const APPENDS: u8 = b'e';
pub(super) const BINGET: u8 = b'h';
pub(super) const LONG_BINGET: u8 = b'j';
pub(super) const LIST: u8 = b'l';
pub(super) const EMPTY_LIST: u8 = b']';
pub(super) const BINPUT: u8 = b'q';
pub(super) const LONG_BINPUT: u8 = b'r';
pub(super) const SETITEM: u8 = b's';
pub(super) const TUPLE: u8 = b't';
pub(super) const EMPTY_TUPLE: u8 = b')';
pub(super) const SETITEMS: u8 = b'u';
pub(super) const BINFLOAT: u8 = b'G';
pub(super) const PROTO: u8 = 0x80;
pub(super) const TUPLE1: u8 = 0x85;
pub(super) const TUPLE2: u8 = 0x86;
pub(super) const TUPLE3: u8 = 0x87;
pub(super) const NEWTRUE: u8 = 0x88;
pub(super) const NEWFALSE: u8 = 0x89;
pub(super) const LONG1: u8 = 0x8a;
pub(super) const LONG4: u8 = 0x8b;
pub(super) const BINBYTES: u8 = b'B';
pub(super) const SHORT_BINBYTES: u8 = b'C';
pub(super) const SHORT_BINUNICODE: u8 = 0x8c;
pub(super) const BINUNICODE8: u8 = 0x8d;
pub(super) const BINBYTES8: u8 = 0x8e;
pub(super) const STACK_GLOBAL: u8 = 0x93;
pub(super) const MEMOIZE: u8 = 0x94;
pub(super) const FRAME: u8 = 0x95;

/// Every opcode of protocols 0 to 5 by name, those read above and those refused.
const NAMES: [(u8, &str); 68] = [
    (MARK, "MARK"),
    (STOP, "STOP"),
    (POP, "POP"),
    (POP_MARK, "POP_MARK"),
    (DUP, "DUP"),
    (b'F', "FLOAT"),
    (b'I', "INT"),
    (BININT, "BININT"),
    (BININT1, "BININT1"),
    (b'L', "LONG"),
    (BININT2, "BININT2"),
    (NONE, "NONE"),
    (b'P', "PERSID"),
    (BINPERSID, "BINPERSID"),
    (REDUCE, "REDUCE"),
    (b'S', "STRING"),
    (b'T', "BINSTRING"),
    (b'U', "SHORT_BINSTRING"),
    (b'V', "UNICODE"),
    (BINUNICODE, "BINUNICODE"),
    (APPEND, "APPEND"),
    (BUILD, "BUILD"),
    (GLOBAL, "GLOBAL"),
    (DICT, "DICT"),
    (EMPTY_DICT, "EMPTY_DICT"),
    (APPENDS, "APPENDS"),
    (b'g', "GET"),
    (BINGET, "BINGET"),
    (b'i', "INST"),
    (LONG_BINGET, "LONG_BINGET"),
    (LIST, "LIST"),
    (EMPTY_LIST, "EMPTY_LIST"),
    (b'o', "OBJ"),
    (b'p', "PUT"),
    (BINPUT, "BINPUT"),
    (LONG_BINPUT, "LONG_BINPUT"),
    (SETITEM, "SETITEM"),
    (TUPLE, "TUPLE"),
    (EMPTY_TUPLE, "EMPTY_TUPLE"),
    (SETITEMS, "SETITEMS"),
    (BINFLOAT, "BINFLOAT"),
    (PROTO, "PROTO"),
    (0x81, "NEWOBJ"),
    (0x82, "EXT1"),
    (0x83, "EXT2"),
    (0x84, "EXT4"),
    (TUPLE1, "TUPLE1"),
    (TUPLE2, "TUPLE2"),
    (TUPLE3, "TUPLE3"),
    (NEWTRUE, "NEWTRUE"),
    (NEWFALSE, "NEWFALSE"),
    (LONG1, "LONG1"),
    (LONG4, "LONG4"),
    (BINBYTES, "BINBYTES"),
    (SHORT_BINBYTES, "SHORT_BINBYTES"),
    (SHORT_BINUNICODE, "SHORT_BINUNICODE"),
    (BINUNICODE8, "BINUNICODE8"),
    (BINBYTES8, "BINBYTES8"),
    (0x8f, "EMPTY_SET"),
    (0x90, "ADDITEMS"),
    (0x91, "FROZENSET"),
    (0x92, "NEWOBJ_EX"),
    (STACK_GLOBAL, "STACK_GLOBAL"),
    (MEMOIZE, "MEMOIZE"),
    (FRAME, "FRAME"),
    (0x96, "BYTEARRAY8"),
    (0x97, "NEXT_BUFFER"),
    (0x98, "READONLY_BUFFER"),
];

/// Why `op` is not read: a known opcode that a checkpoint has no use for (the text forms of
/// protocol 0, sets, object construction, out-of-band buffers) by its name, or an unknown one.
pub(super) fn refusal(op: u8) -> String {
    match NAMES.iter().find(|(code, _)| *code == op) {
        Some((_, name)) => format!("opcode {name} ({op:#04x}) is not supported"),
        None => format!("unknown opcode {op:#04x}"),
    }
}
