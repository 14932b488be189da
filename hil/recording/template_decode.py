"""Many MessagePack maps of one shape decoded at once into numpy columns (the fast path of hil.recording.series), or
checked at once to be of one shape (:func:`structure`, :func:`matches`: the recorder's validation).

A publisher sends the same map over and over with new numbers: the same keys, the same name lists, the same
lengths; only the bytes of the numbers change. The first message of a batch is the *template*: its bytes are
walked once to find every number (a *leaf*: its type byte and value bytes); every other byte is *structure*.
A batch decodes here only if every message has the template's length, the same structure bytes and, where the
template has an integer stored in its type byte (a fixint), such a byte: then each message decodes to the
template's map with its own numbers, which are read straight out of the bytes with numpy (big-endian, as MessagePack stores
them; the same values ``msgpack.unpackb`` gives). Anything else (another shape, a number that changed type, a
bool that flipped, a value this module does not column) returns None and the caller decodes message by message:
the result is the same either way, only the speed differs.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

#: type byte -> (numpy big-endian dtype of the value bytes that follow, kind: "f" float or "i" integer)
_NUMBER_TYPES = {0xca: (">f4", "f"), 0xcb: (">f8", "f"), 0xcc: (">u1", "i"), 0xcd: (">u2", "i"),
                 0xce: (">u4", "i"), 0xcf: (">u8", "i"), 0xd0: (">i1", "i"), 0xd1: (">i2", "i"),
                 0xd2: (">i4", "i"), 0xd3: (">i8", "i")}
#: integers stored in the type byte itself: positive fixint 0x00-0x7f, negative fixint 0xe0-0xff
_POSITIVE_FIXINT, _NEGATIVE_FIXINT = "pfix", "nfix"
_FIXINTS = frozenset((_POSITIVE_FIXINT, _NEGATIVE_FIXINT))
_INT64_MAX = (1 << 63) - 1
#: payload bytes compared with a template at a time (a scratch block that stays in the processor's cache)
MATCH_BLOCK_BYTES = 1 << 20


class _Shape(Exception):
    """The template holds something this module does not column (the caller decodes message by message)."""


@dataclass
class _Leaf:
    offset: int    # of the type byte
    code: str      # a dtype of _NUMBER_TYPES, or _POSITIVE_FIXINT / _NEGATIVE_FIXINT


def _walk(data: bytes, pos: int, leaves: list[_Leaf]) -> int:
    """Skip one MessagePack object at ``pos``, noting its numbers in ``leaves``; returns the position after it."""
    tag = data[pos]
    if tag <= 0x7f:
        leaves.append(_Leaf(pos, _POSITIVE_FIXINT))
        return pos + 1
    if tag >= 0xe0:
        leaves.append(_Leaf(pos, _NEGATIVE_FIXINT))
        return pos + 1
    if tag in _NUMBER_TYPES:
        dtype = _NUMBER_TYPES[tag][0]
        leaves.append(_Leaf(pos, dtype))
        return pos + 1 + np.dtype(dtype).itemsize
    if tag in (0xc0, 0xc2, 0xc3):                          # nil, false, true: structure
        return pos + 1
    for first, last, head, size in ((0xa0, 0xbf, 1, None), (0xd9, 0xd9, 2, ">B"), (0xda, 0xda, 3, ">H"),
                                    (0xdb, 0xdb, 5, ">I"), (0xc4, 0xc4, 2, ">B"), (0xc5, 0xc5, 3, ">H"),
                                    (0xc6, 0xc6, 5, ">I")):   # str and bin: structure
        if first <= tag <= last:
            length = tag & 0x1f if size is None else struct.unpack_from(size, data, pos + 1)[0]
            return pos + head + length
    for first, last, head, size, per_item in ((0x90, 0x9f, 1, None, 1), (0xdc, 0xdc, 3, ">H", 1),
                                              (0xdd, 0xdd, 5, ">I", 1), (0x80, 0x8f, 1, None, 2),
                                              (0xde, 0xde, 3, ">H", 2), (0xdf, 0xdf, 5, ">I", 2)):
        if first <= tag <= last:
            count = tag & 0x0f if size is None else struct.unpack_from(size, data, pos + 1)[0]
            pos += head
            for _ in range(count * per_item):
                pos = _walk(data, pos, leaves)
            return pos
    raise _Shape(f"type byte {tag:#x}")   # ext types


@dataclass
class Template:
    """The shape of a map (:func:`template`): its keys in order, per key either its value (no numbers in it: the
    same in every message of the shape) or the numbers it is made of (a number, or a flat list of numbers)."""
    data: bytes
    keys: list[str]
    constants: dict[str, object]
    numbers: dict[str, tuple[list[_Leaf], tuple[int, ...]]]   # key -> (its leaves, the value's array shape)
    structure: np.ndarray                            # (length,) bool: the bytes every message must share
    #: per key of ``numbers``, where its value bytes sit in a message: (offset of the first, strides per axis of
    #: the value's array shape), all bytes; None when they are not evenly spaced (read by gathering them)
    layouts: dict[str, tuple[int, tuple[int, ...]] | None] = field(default_factory=dict)

    def __post_init__(self):
        self.template_bytes = np.frombuffer(self.data, dtype=np.uint8)
        self.structure_mask = np.where(self.structure, np.uint8(0xff), np.uint8(0))   # for a bitwise AND
        fixints = [leaf.offset for leaves, _ in self.numbers.values() for leaf in leaves if leaf.code in _FIXINTS]
        self.fixint_offsets = np.array(fixints, dtype=np.int64)
        # the first value byte of every uint64: its top bit set is a number np.asarray does not make int64
        self.u64_top_offsets = np.array([leaf.offset + 1 for leaves, _ in self.numbers.values() for leaf in leaves
                                         if leaf.code == ">u8"], dtype=np.int64)
        self.layouts = {key: _layout(leaves, array_shape) for key, (leaves, array_shape) in self.numbers.items()}
        #: the keys whose numbers are floats (read as float64; the others are integers, read as int64)
        self.floats = frozenset(key for key, (leaves, _) in self.numbers.items() if _kind(leaves[0].code) == "f")


def _layout(leaves: list[_Leaf], array_shape: tuple[int, ...]) -> tuple[int, tuple[int, ...]] | None:
    """Where a key's value bytes sit, if evenly spaced along each axis of ``array_shape`` (:class:`Template`)."""
    code = leaves[0].code
    first = leaves[0].offset + (0 if code in _FIXINTS else 1)   # a fixint is its type byte
    offsets = np.array([leaf.offset for leaf in leaves]).reshape(array_shape or (1,))
    strides = []
    for axis in range(len(array_shape)):
        steps = np.diff(offsets, axis=axis)
        if steps.size and not (steps == steps.flat[0]).all():
            return None
        strides.append(int(steps.flat[0]) if steps.size else 1)
    return first, tuple(strides)


def _is_number(value) -> bool:
    return type(value) in (int, float)


def _array_shape(value, leaves: int, matrices: bool) -> tuple[int, ...] | None:
    """The shape of the numbers ``value`` holds, if it is a number ``()``, a list of numbers ``(n,)`` or, with
    ``matrices``, a list of equal, non-empty lists of numbers ``(rows, columns)``; else None."""
    if _is_number(value):
        return ()
    if not isinstance(value, list) or not value:
        return None
    if all(_is_number(v) for v in value):
        return (len(value),)
    if matrices and all(isinstance(v, list) and v and all(_is_number(x) for x in v) for v in value):
        columns = len(value[0])
        if all(len(v) == columns for v in value) and len(value) * columns == leaves:
            return (len(value), columns)
    return None


def template(data: bytes, payload: dict, matrices: bool = False) -> Template | None:
    """The shape of ``data``, which decodes (``msgpack.unpackb``) to the map ``payload``; None when it has values
    this module does not column (numbers inside nested maps, lists of lists unless ``matrices``, numbers of mixed
    types in a list, non-string or repeated keys)."""
    data = bytes(data)
    header = _map_header(data, payload)
    if header is None:
        return None
    count, pos = header
    keys, constants, numbers, leaves = [], {}, {}, []
    try:
        for _ in range(count):
            key_leaves: list[_Leaf] = []
            pos = _walk(data, pos, key_leaves)
            if key_leaves:
                return None              # a number as a key
            key = list(payload)[len(keys)]
            if not isinstance(key, str):
                return None
            keys.append(key)
            start = pos
            value_leaves: list[_Leaf] = []
            pos = _walk(data, pos, value_leaves)
            if not value_leaves:
                constants[key] = payload[key]
                continue
            value = payload[key]
            kinds = {_kind(leaf.code) for leaf in value_leaves}
            codes = {leaf.code for leaf in value_leaves}
            array_shape = _array_shape(value, len(value_leaves), matrices)
            if (array_shape is None or (array_shape == () and value_leaves[0].offset != start) or len(kinds) != 1
                    or (len(codes) != 1 and not codes <= _FIXINTS)):
                return None
            numbers[key] = (value_leaves, array_shape)
            leaves += value_leaves
    except (_Shape, IndexError, struct.error):
        return None
    if pos != len(data):
        return None
    return Template(data, keys, constants, numbers, _structure_mask(len(data), leaves))


def _map_header(data: bytes, payload: dict) -> tuple[int, int] | None:
    """(entries, position of the first key) of the map ``data`` holds, which decodes to ``payload``; None when it is
    not a map or has a repeated key (the decoded map keeps the last one)."""
    tag = data[0]
    if 0x80 <= tag <= 0x8f:
        count, pos = tag & 0x0f, 1
    elif tag == 0xde:
        count, pos = struct.unpack_from(">H", data, 1)[0], 3
    elif tag == 0xdf:
        count, pos = struct.unpack_from(">I", data, 1)[0], 5
    else:
        return None
    return (count, pos) if count == len(payload) else None


def _structure_mask(length: int, leaves: list[_Leaf]) -> np.ndarray:
    """(length,) bool: True at the bytes that are not a number's value (a fixint is its type byte)."""
    structure = np.ones(length, dtype=bool)
    for leaf in leaves:
        if leaf.code in _FIXINTS:
            structure[leaf.offset] = False
        else:
            structure[leaf.offset + 1:leaf.offset + 1 + np.dtype(leaf.code).itemsize] = False
    return structure


def _kind(code: str) -> str:
    return "i" if code in _FIXINTS else np.dtype(code).kind.replace("u", "i")


def rows_of(shape: Template, messages: list) -> np.ndarray | None:
    """``messages`` (k bytes-like payloads) as a (k, length) uint8 array, if each is as long as ``shape``'s."""
    length = len(shape.data)
    if any(len(message) != length for message in messages):
        return None
    return np.frombuffer(b"".join(messages), dtype=np.uint8).reshape(len(messages), length)


def matching(shape: Template, rows: np.ndarray) -> np.ndarray:
    """(k,) bool: which ``rows`` ((k, length) uint8, :func:`rows_of`) have the shape: the template's structure
    bytes, a fixint wherever it has one, and no uint64 beyond int64 (np.asarray would not make it int64)."""
    ok = np.ones(len(rows), dtype=bool)
    step = max(1, MATCH_BLOCK_BYTES // max(rows.shape[1], 1))
    scratch = np.empty((min(step, len(rows)), rows.shape[1]), dtype=np.uint8)   # reused: it stays in the cache
    for start in range(0, len(rows), step):
        block = rows[start:start + step]
        differ = scratch[:len(block)]
        np.bitwise_xor(block, shape.template_bytes, out=differ)
        differ &= shape.structure_mask
        if np.count_nonzero(differ):
            ok[start:start + len(block)] = ~differ.any(axis=1)
    if len(shape.fixint_offsets):
        values = rows[:, shape.fixint_offsets]
        ok &= ~((values > 0x7f) & (values < 0xe0)).any(axis=1)
    if len(shape.u64_top_offsets):
        ok &= ~(rows[:, shape.u64_top_offsets] > 0x7f).any(axis=1)
    return ok


def read_columns(shape: Template, rows: np.ndarray, keys: frozenset[str] | None = None,
                 out: dict[str, np.ndarray] | None = None) -> dict[str, object]:
    """The columns of ``rows`` ((k, length) uint8, C-contiguous, all :func:`matching`): per key of the template, its
    constant value or its numbers as a (k,) array (a number), (k, n) array (a list of n numbers) or (k, rows,
    columns) array (a matrix), int64 for integers and float64 for floats (the arrays ``np.asarray`` makes of the
    decoded values). ``keys``: only these keys' numbers are read (the others are left out of the result).
    ``out``: per key of ``shape.floats``, a float64 array of that shape (any strides: a slice of the column the
    numbers end up in) to write them into; it is then the key's entry of the result."""
    rows = np.ascontiguousarray(rows)
    count, length = rows.shape
    columns: dict[str, object] = dict(shape.constants)
    for key, (leaves, array_shape) in shape.numbers.items():
        if keys is not None and key not in keys:
            continue
        code = leaves[0].code
        raw_dtype = np.uint8 if code in _FIXINTS else np.dtype(code)
        layout = shape.layouts[key]
        if layout is not None:       # evenly spaced: a strided view of the bytes, read in one pass
            first, strides = layout
            raw = np.ndarray((count,) + array_shape, dtype=raw_dtype, buffer=rows, offset=first,
                             strides=(length,) + strides)
        else:
            offsets = np.array([leaf.offset for leaf in leaves])
            size = np.dtype(raw_dtype).itemsize
            start = 0 if code in _FIXINTS else 1
            gathered = np.ascontiguousarray(rows[:, (offsets[:, None] + start + np.arange(size)).ravel()])
            raw = gathered.view(raw_dtype).reshape((count,) + array_shape)
        destination = out.get(key) if out is not None and key in shape.floats else None
        if code in _FIXINTS:   # a one-byte integer, positive (0x00-0x7f) or negative (0xe0-0xff) in any message
            values = raw.astype(np.int64)
            values[values >= 0xe0] -= 0x100
        elif destination is not None:   # byte-swapped and widened straight into place: no array in between
            np.copyto(destination, raw)
            values = destination
        else:
            values = raw.astype(np.float64 if raw.dtype.kind == "f" else np.int64)
        columns[key] = values
    return columns


def decode_batch(shape: Template, messages: list, keys: frozenset[str] | None = None) -> dict[str, object] | None:
    """``messages`` (k bytes-like payloads) decoded as ``shape`` (:func:`read_columns`); None unless every message
    has the shape (:func:`matching`). ``keys``: only these keys' numbers are read."""
    rows = rows_of(shape, messages)
    if rows is None or not matching(shape, rows).all():
        return None
    return read_columns(shape, rows, keys)


def _leaf_values(rows: np.ndarray, leaves: list[_Leaf]) -> np.ndarray | None:
    """The numbers at ``leaves`` (all of one code) of each message, ``rows`` (k, length) uint8: (k, leaves) int64
    or float64; None where a fixint's byte is not one in some message, or a uint64 exceeds int64 (np.asarray of such
    ints is not int64: the reference path decodes them)."""
    code = leaves[0].code
    offsets = np.array([leaf.offset for leaf in leaves])
    if code in _FIXINTS:     # a one-byte integer, positive (0x00-0x7f) or negative (0xe0-0xff) in any message
        values = rows[:, offsets].astype(np.int64)
        negative = values >= 0xe0
        if ((values > 0x7f) & ~negative).any():
            return None
        values[negative] -= 0x100
        return values
    size = np.dtype(code).itemsize
    raw = np.ascontiguousarray(rows[:, (offsets[:, None] + 1 + np.arange(size)).ravel()])
    values = raw.view(code).reshape(len(rows), len(leaves))
    if code == ">u8" and (values > _INT64_MAX).any():
        return None
    return values.astype(np.float64 if values.dtype.kind == "f" else np.int64)


@dataclass
class Structure:
    """What a message of one shape is made of, for validating many at once (:func:`structure`): its bytes, which of
    them every message of the shape shares (all but the numbers' value bytes), where its fixints are (a byte that
    must stay one) and where some top-level numbers are (``fields``: key -> its leaf)."""
    data: np.ndarray               # (length,) uint8
    structure: np.ndarray          # (length,) bool
    fixints: np.ndarray            # (n,) offsets of the fixint bytes
    fields: dict[str, _Leaf]


def structure(data: bytes, payload: dict, keys: frozenset[str]) -> Structure | None:
    """The shape of ``data``, which decodes (``msgpack.unpackb``) to the map ``payload``, for :func:`matches`, with the
    leaves of the ``keys`` that hold one number each at the top level; numbers may be anywhere (nested maps, lists
    of lists: they are leaves like any other). None for a repeated key, a number as a key, an ext type, or a key of
    ``keys`` that is not one number."""
    data = bytes(data)
    header = _map_header(data, payload)
    if header is None:
        return None
    count, pos = header
    leaves: list[_Leaf] = []
    fields: dict[str, _Leaf] = {}
    try:
        for key in payload:
            key_leaves: list[_Leaf] = []
            pos = _walk(data, pos, key_leaves)
            start = pos
            value_leaves: list[_Leaf] = []
            pos = _walk(data, pos, value_leaves)
            if key_leaves:
                return None
            if key in keys:
                if len(value_leaves) != 1 or value_leaves[0].offset != start:
                    return None
                fields[key] = value_leaves[0]
            leaves += value_leaves
    except (_Shape, IndexError, struct.error):
        return None
    if pos != len(data):
        return None
    fixints = np.array([leaf.offset for leaf in leaves if leaf.code in _FIXINTS], dtype=np.intp)
    return Structure(np.frombuffer(data, dtype=np.uint8), _structure_mask(len(data), leaves), fixints, fields)


def matches(shape: Structure, rows: np.ndarray) -> bool:
    """Whether every message of ``rows`` ((k, length) uint8) has ``shape``: its structure bytes, and a fixint
    (0x00-0x7f, 0xe0-0xff) at each of its fixints. Such a message decodes to a map with the same keys, each value of
    the same type (its numbers of the same MessagePack types) as the shape's."""
    if ((rows != shape.data) & shape.structure).any():
        return False
    fixints = rows[:, shape.fixints]
    return not ((fixints > 0x7f) & (fixints < 0xe0)).any()


def integers(shape: Structure, rows: np.ndarray, key: str) -> np.ndarray | None:
    """The top-level integer ``key`` (a field of ``shape``) of each message of ``rows`` (which :func:`matches`):
    (k,) int64; None when the shape holds a float there or a uint64 exceeds int64."""
    leaf = shape.fields[key]
    if _kind(leaf.code) != "i":
        return None
    values = _leaf_values(rows, [leaf])
    return None if values is None else values[:, 0]
