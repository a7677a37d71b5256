"""Columnar fast path of the node decoder: one protobuf parse and a few numpy passes per batch.

Theory of operation
-------------------
A batch is a list of Node record *bodies*. They are joined into one buffer in which every body is
preceded by a separator: an explicit default value (``XX 00``: varint 0 or empty bytes) for each
field present in the batch. A canonical protobuf serializer never writes a default value, so after
parsing the buffer as :class:`NodeColumns` (every Node field declared ``repeated``) each column
holds, per node in file order, exactly one separator followed by that node's values. Columns are
then converted in bulk:

* a column with only separators is all defaults; one that alternates separator / non-default value
  is taken with a C-level slice; anything else is grouped with numpy by separator positions;
* packed dependency lists are unpacked for the whole batch at once (numpy varint decode);
* attributes are mapped to small ints, each node's attribute sequence (with a type class) to one
  exact integer key, and each distinct key is interpreted once by :class:`DecodeContext`;
* nodes are built in C: ``map(tuple.__new__, repeat(Node), zip(columns...))`` (``Node`` is a NamedTuple).

Which fields are present is learnt from the previous batch; if a field without separators turns up,
the batch is re-joined with it. The path gives up (returns False, and the caller uses the per-node
``NodeView`` decoder, which handles everything the wire format allows) when anything is not
canonical: a re-serialized size differing from the input (unknown fields, unpacked or split
dependency lists, non-minimal varints), an explicit default value, a singular field twice in one
record, or attribute sequences too varied for an exact integer key.
"""

from __future__ import annotations

from itertools import repeat

import numpy as np
from google.protobuf.message import DecodeError

from emulator.errors import TraceError
from emulator.trace import et_def_pb2 as pb
from emulator.trace.model import Node
from emulator.trace.pbconv import _NODE_TYPES, DecodeContext, _new_node, unpack_varints

#: field name, separator bytes, is an integer column
_FIELDS = (
    ("id", b"\x08\x00", True),
    ("name", b"\x12\x00", False),
    ("type", b"\x18\x00", True),
    ("ctrl_deps", b"\x22\x00", False),
    ("data_deps", b"\x2a\x00", False),
    ("start_time_micros", b"\x30\x00", True),
    ("duration_micros", b"\x38\x00", True),
    ("inputs", b"\x42\x00", False),
    ("outputs", b"\x4a\x00", False),
    ("attr", b"\x52\x00", False),
)
_MAX_KEY = 1 << 62
_ATTR_TABLE_LIMIT = 1 << 14
_CLASS_TYPE = (4, 5, 6, 7)  # attribute interpretation depends only on: other / SEND / RECV / COLL


def _objects(values) -> np.ndarray:  # type: ignore[no-untyped-def]
    """1-D object array of ``values`` (tuples stay elements, not rows)."""
    items = list(values)
    arr = np.empty(len(items), dtype=object)
    for i, v in enumerate(items):
        arr[i] = v
    return arr


class _GiveUp(Exception):
    """The batch is not canonical enough for the columnar path."""


class ColumnDecoder:
    """Decodes batches of Node bodies into model nodes for one file (keeps the learnt field set)."""

    def __init__(self, ctx: DecodeContext) -> None:
        self.ctx = ctx
        self.present: frozenset[str] = frozenset({"id", "name", "type", "data_deps", "duration_micros", "attr"})
        self.attr_ids: dict[bytes, int] = {b"": 0}
        self.attr_raw: list[bytes] = []
        self.misses = 0  # batches given up for attribute variety; after a few, stop trying
        # facts for the reader's checks, valid while every batch went through this path
        self.all_batches = True
        self.ids_contiguous = True
        self.id_run: tuple[int, int] | None = None
        self.dep_range: dict[str, tuple[int, int]] = {}

    @property
    def enabled(self) -> bool:
        return self.misses < 3

    def decode(self, bodies: list[bytes], out: list) -> bool:
        """Append the batch's nodes to ``out``; False (nothing appended) when the caller must fall back."""
        count = len(bodies)
        present = self.present
        for _attempt in range(2):
            sep = b"".join(s for name, s, _ in _FIELDS if name in present)
            blob = sep + sep.join(bodies)
            cols = pb.NodeColumns()
            try:
                cols.ParseFromString(blob)
            except (DecodeError, UnicodeDecodeError):
                return self._fail()
            cols.DiscardUnknownFields()
            if cols.ByteSize() != len(blob):
                return self._fail()
            seen = frozenset(name for name, _, _ in _FIELDS if len(getattr(cols, name)) > (count if name in present else 0))
            if seen <= present:
                break
            present = present | seen
        else:
            return self._fail()
        self.present = seen
        try:
            self._build(cols, present, count, out)
        except _GiveUp:
            return self._fail()
        return True

    def _fail(self) -> bool:
        self.all_batches = False
        return False

    def ids_cover_deps(self) -> dict[str, bool] | None:
        """Per dependency kind, True when every parent id lies inside the file's contiguous id run.

        None when that is unknown (ids not contiguous, or a batch took the per-node path).
        """
        if not (self.all_batches and self.ids_contiguous and self.id_run is not None):
            return None
        lo, hi = self.id_run
        return {
            kind: kind not in self.dep_range or (lo <= self.dep_range[kind][0] and self.dep_range[kind][1] <= hi)
            for kind in ("data_deps", "ctrl_deps")
        }

    # -- columns -----------------------------------------------------------------------------------
    @staticmethod
    def _groups(col, count: int) -> tuple[np.ndarray, np.ndarray, list]:
        """(start, end) index arrays of each node's values in ``col`` and the column as a list."""
        values = col[:]
        n = len(values)
        seps = np.flatnonzero(~np.fromiter(map(bool, values), dtype=bool, count=n))
        if len(seps) != count:
            raise _GiveUp  # an explicit default value inside a record
        ends = np.empty(count, dtype=np.int64)
        ends[:-1] = seps[1:]
        ends[-1] = n
        return seps + 1, ends, values

    def _singular(self, cols, name: str, present: frozenset[str], count: int, is_int: bool, default):
        if name not in present:
            return None
        col = getattr(cols, name)
        n = len(col)
        if n == count:
            return None
        if n == 2 * count and not any(col[0::2]):
            values = col[1::2]
            if all(values):
                return values
        if is_int:
            arr = np.fromiter(col, dtype=np.int64 if name == "type" else np.uint64, count=n)
            seps = np.flatnonzero(arr == 0)
            if len(seps) != count:
                raise _GiveUp  # an explicit default value inside a record
            width = np.empty(count, dtype=np.int64)
            width[:-1] = seps[1:] - seps[:-1] - 1
            width[-1] = n - seps[-1] - 1
            if width.max() > 1:
                raise _GiveUp  # a singular field written twice in one record
            arr = np.append(arr, np.zeros(1, dtype=arr.dtype))
            return arr[np.where(width == 1, seps + 1, n)].tolist()
        starts, ends, values = self._groups(col, count)
        width = ends - starts
        if width.max() > 1:
            raise _GiveUp  # a singular field written twice in one record
        has = (width == 1).tolist()
        return [values[s] if h else default for s, h in zip(starts.tolist(), has, strict=True)]

    def _note_range(self, kind: str, values: np.ndarray) -> None:
        if len(values):
            lo, hi = int(values.min()), int(values.max())
            old = self.dep_range.get(kind)
            self.dep_range[kind] = (lo, hi) if old is None else (min(lo, old[0]), max(hi, old[1]))

    def _note_ids(self, ids: list[int] | None, count: int) -> None:
        """Track whether the file's ids so far form one contiguous increasing run (no set needed then)."""
        if not self.ids_contiguous:
            return
        if ids is None:
            arr = np.zeros(count, dtype=np.uint64)
        else:
            arr = np.fromiter(ids, dtype=np.uint64, count=count)
        first = int(arr[0])
        if (self.id_run is not None and first != self.id_run[1] + 1) or int(arr[-1]) - first != count - 1:
            self.ids_contiguous = False
            return
        if count > 1 and not (np.diff(arr) == 1).all():
            self.ids_contiguous = False
            return
        self.id_run = (first if self.id_run is None else self.id_run[0], int(arr[-1]))

    def _deps(self, raws: list[bytes] | None, count: int, ids: list[int] | None, kind: str) -> list[tuple[int, ...]]:
        if raws is None:
            return [()] * count
        joined = b"".join(raws)
        if joined.isascii():
            self._note_range(kind, np.frombuffer(joined, dtype=np.uint8))
            return list(map(tuple, raws))
        data = np.frombuffer(joined, dtype=np.uint8)
        width = len(raws[0])
        if 1 < width <= 9 and len(joined) == width * count and min(map(len, raws)) == width:
            # every node has one dependency list of the same byte length (the total alone does not say
            # so: lengths 0 and 2·width add up the same): one varint each?
            grid = data.reshape(count, width)
            if (grid[:, -1] < 0x80).all() and (grid[:, :-1] >= 0x80).all():
                decoded = np.zeros(count, dtype=np.uint64)
                for j in range(width):
                    decoded |= (grid[:, j] & 0x7F).astype(np.uint64) << np.uint64(7 * j)
                self._note_range(kind, decoded)
                return list(zip(decoded.tolist()))
        lens = np.fromiter(map(len, raws), dtype=np.int64, count=count)
        term = data < 0x80
        raw_ends = np.cumsum(lens)
        nonempty = lens > 0
        if not term[raw_ends[nonempty] - 1].all():
            self._deps_error(raws, ids)
        ends = np.flatnonzero(term)
        starts = np.empty_like(ends)
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
        sizes = ends - starts + 1
        if sizes.max() > 10:
            self._deps_error(raws, ids)
        shift = (np.arange(len(data), dtype=np.int64) - np.repeat(starts, sizes)) * 7
        if sizes.max() == 10 and (data[ends[sizes == 10]] > 1).any():
            self._deps_error(raws, ids)
        contrib = (data & 0x7F).astype(np.uint64) << shift.astype(np.uint64)
        decoded = np.bitwise_or.reduceat(contrib, starts)
        self._note_range(kind, decoded)
        values = decoded.tolist()
        per_node = np.zeros(count, dtype=np.int64)
        per_node[nonempty] = np.add.reduceat(term.astype(np.int64), (raw_ends - lens)[nonempty])
        if (per_node == 1).all():
            return list(zip(values))
        first = np.cumsum(per_node) - per_node
        return [tuple(values[a : a + k]) if k else () for a, k in zip(first.tolist(), per_node.tolist(), strict=True)]

    def _deps_error(self, raws: list[bytes], ids: list[int] | None) -> None:
        for i, raw in enumerate(raws):
            try:
                unpack_varints(raw)
            except ValueError as exc:
                nid = ids[i] if ids is not None else 0
                raise TraceError(f"{self.ctx.where(nid)}: bad dependency list ({exc})") from None
        raise _GiveUp

    def _interpretations(
        self, cols, types: list[int] | None, ids: list[int] | None, count: int
    ) -> tuple[list[tuple], np.ndarray]:
        """(interpretation (is_cpu_op, comm, attrs, error) per distinct pattern, pattern index per node)."""
        classes = np.zeros(count, dtype=np.int64)
        t = None
        if types is not None:
            t = np.asarray(types, dtype=np.int64)
            classes[t == 5] = 1
            classes[t == 6] = 2
            classes[t == 7] = 3
        col = cols.attr if "attr" in self.present else None
        table = self.attr_raw
        aids = self.attr_ids
        if col is None or len(col) == count:
            keys = classes
            base = len(table) + 1
        else:
            if len(table) > _ATTR_TABLE_LIMIT:
                aids.clear()
                table.clear()
                aids[b""] = 0
            n = len(col)
            aid = np.fromiter(map(aids.get, col, repeat(-1, n)), dtype=np.int64, count=n)
            unknown = np.flatnonzero(aid < 0)
            if len(unknown):
                for i in unknown.tolist():
                    v = col[i]
                    if v not in aids:
                        table.append(v)
                        aids[v] = len(table)
                    aid[i] = aids[v]
            seps = np.flatnonzero(aid == 0)
            if len(seps) != count:
                raise _GiveUp  # an empty attribute entry inside a record
            starts = seps + 1
            width = np.empty(count, dtype=np.int64)
            width[:-1] = seps[1:] - starts[:-1]
            width[-1] = n - starts[-1]
            base = len(table) + 1
            most = int(width.max())
            if base**most * 4 >= _MAX_KEY:
                self.misses += 1
                raise _GiveUp  # attribute sequences too varied for an exact integer key
            keys = classes
            mult = 4
            aid = np.append(aid, 0)
            for j in range(most):
                idx = np.where(width > j, starts + j, n)
                keys = keys + aid[idx] * mult
                mult *= base
        uniq, inv = np.unique(keys, return_inverse=True)
        results: list[tuple] = []
        interpret = self.ctx.interpret_raws
        for k in uniq.tolist():
            cls, rest = k % 4, k // 4
            seq = []
            while rest:
                seq.append(table[rest % base - 1])
                rest //= base
            try:
                hit = interpret(_CLASS_TYPE[cls], tuple(seq))
            except TraceError:
                raise _GiveUp from None  # the per-node path names the node
            if hit[3] is not None:
                first = int(np.argmax(keys == k))
                nid = ids[first] if ids is not None else 0
                raise TraceError(f"{self.ctx.where(nid)}: {hit[3]}")
            results.append(hit)
        times = np.bincount(inv, minlength=len(results)).tolist() if len(results) > 1 else [count]
        for k, hit, n in zip(uniq.tolist(), results, times, strict=True):
            if hit[1] is not None:
                self.ctx.count_node(_CLASS_TYPE[k % 4], hit[0], hit[1], n)
        if t is not None:
            counts = self.ctx.counts
            odd = int(np.count_nonzero((t < 0) | (t > 7)))
            if odd:
                counts["odd_type"] = counts.get("odd_type", 0) + odd
            meta = int(np.count_nonzero(t == 1))
            if meta:
                counts["metadata"] = counts.get("metadata", 0) + meta
        return results, inv

    def _build(self, cols, present: frozenset[str], count: int, out: list) -> None:
        ctx = self.ctx
        ids = self._singular(cols, "id", present, count, True, 0)
        names = self._singular(cols, "name", present, count, False, "")
        types = self._singular(cols, "type", present, count, True, 0)
        data = self._singular(cols, "data_deps", present, count, False, b"")
        ctrl = self._singular(cols, "ctrl_deps", present, count, False, b"")
        starts = self._singular(cols, "start_time_micros", present, count, True, 0)
        durs = self._singular(cols, "duration_micros", present, count, True, 0)
        ins = self._singular(cols, "inputs", present, count, False, b"")
        outs = self._singular(cols, "outputs", present, count, False, b"")
        results, pattern = self._interpretations(cols, types, ids, count)
        id_list = ids if ids is not None else [0] * count
        data_t = self._deps(data, count, ids, "data_deps")
        ctrl_t = self._deps(ctrl, count, ids, "ctrl_deps")
        self._note_ids(ids, count)
        zeros = [0] * count
        nones = [None] * count
        name_list = names if names is not None else [""] * count
        type_list = list(map(_NODE_TYPES.get, types, types)) if types is not None else [_NODE_TYPES[0]] * count
        in_list = [ctx.io_info(r, n) if r else None for r, n in zip(ins, id_list, strict=True)] if ins is not None else nones
        out_list = [ctx.io_info(r, n) if r else None for r, n in zip(outs, id_list, strict=True)] if outs is not None else nones
        if len(results) == 1:
            (cpu, comm, attrs, _), = results
            cpu_i, comm_i, attrs_i = repeat(cpu, count), repeat(comm, count), repeat(attrs, count)
        else:  # one C-level gather per field from small object arrays indexed by pattern
            cpu_i, comm_i, attrs_i = (_objects(h[j] for h in results)[pattern].tolist() for j in range(3))
        out.extend(
            map(
                _new_node,
                repeat(Node, count),
                zip(
                    id_list,
                    name_list,
                    type_list,
                    data_t,
                    ctrl_t,
                    durs if durs is not None else zeros,
                    starts if starts is not None else zeros,
                    cpu_i,
                    comm_i,
                    in_list,
                    out_list,
                    attrs_i,
                    strict=True,
                ),
            )
        )


__all__ = ["ColumnDecoder"]
