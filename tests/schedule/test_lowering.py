"""Transfer tables and their lowering: the array path gives the schedules the per-transfer path gave.

The digests below are of schedules compiled before the compiler lowered transfer tables with array
operations (one Python object per transfer then); the same traces must still give byte-identical
schedule files.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.errors import ScheduleError
from emulator.schedule.algorithms import all_algorithms
from emulator.schedule.algorithms.base import Transfer
from emulator.schedule.algorithms.table import table_of_transfers
from emulator.schedule.compiler import CompileOptions, compile_trace
from emulator.schedule.io import schedule_hash
from emulator.schedule.model import OP_RECV, OP_SEND
from emulator.trace.generators.collective import CollectiveOptions, collective_trace
from emulator.trace.model import CollectiveType, RankGraph, Trace

ALGOS = all_algorithms()
COLUMNS = ("src", "dst", "size_bytes", "step", "chunk", "after_ptr", "after_idx")

#: op / algorithm (None = default) / ranks / chunks / window → schedule hash, from the per-transfer compiler
GOLDEN = {
    "ALL_TO_ALL/None/16/c1/wNone": "2179b5a8b100dd3af9707d8d0a341385a29e015b75f318e3cd092e0d70bae78d",
    "ALL_TO_ALL/None/16/c2/w5": "2f81a8ad295753ec2c2a4123c68e645702f58fb81d34f38139e150cd93ef652b",
    "ALL_TO_ALL/pairwise/16/c1/wNone": "d4982fa43ed6b4ddb360942114f5f3dd2e9c694141b0f724b6f7b5f1e55019f3",
    "ALL_REDUCE/None/16/c1/wNone": "a51024161d449ad311c579ae842d6bdb434c2fe5c2a8c1a87721cd19d6576d56",
    "ALL_REDUCE/None/16/c3/wNone": "df18166eaaa5f4ab13cee046209693c22747b436dd54a96d88288b00e9dece88",
    "ALL_GATHER/None/16/c2/wNone": "72d149e36951de0cfb8a0aca411a2b2f0ac006c1b67c9ef83450ff455e402a8a",
    "REDUCE_SCATTER/None/16/c1/wNone": "2989de1f0081749a7d52dc5f224ac50a351beed0622b826d1427b5a5f3066b27",
    "ALL_REDUCE/direct/16/c2/wNone": "78ab786b5e3d38acb3edcec5ecae4a4e0dc257de090988ec63d6ed5a776d4631",
    "ALL_TO_ALL/None/64/c1/wNone": "6f7f47419a7b47f34a01c9fa29f2e252fa2e56b5067173ac8c166e35739202ac",
    "ALL_TO_ALL/None/64/c2/w5": "a4d3a7a9eea23c0f3a78c30445941d44cd424e18da643a790aeb879ee1bb0d27",
    "ALL_TO_ALL/pairwise/64/c1/wNone": "d4ee2acefad380fa7709cc7fefc5b6541f16048c6d093b557ce2716b02de8f80",
    "ALL_REDUCE/None/64/c1/wNone": "713f8af7ab43cb06df9822ed9bf5838d6a3e9520d19c6cfc7bc79d6f515625d1",
    "ALL_REDUCE/None/64/c3/wNone": "279291dcf4dddf97bbfa63ea3e6d2fc864ed157874f5da23a5b9c81e51e14690",
    "ALL_GATHER/None/64/c2/wNone": "8ec928fa9007d39ad6cb95a135b056e8afc691f1af7d18ebf9c0537eaee4a472",
    "REDUCE_SCATTER/None/64/c1/wNone": "74b362bce17ca63b0ce314e902af67e693324d5245490b594c60526ab0de19cf",
    "ALL_REDUCE/direct/64/c2/wNone": "c4d26cf0153d97988993c9d9048538d9c34629efa41b85cadd42207105df7de9"
}


def _trace(op: CollectiveType, n: int) -> Trace:
    gen = collective_trace(CollectiveOptions(ranks=n, collectives=(op,), size_bytes=(1 << 20) + 12345, iterations=2))
    return Trace(ranks={r: RankGraph(r, list(gen.nodes(r))) for r in range(n)}, groups=dict(gen.groups))


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_compiled_schedules_are_byte_identical_to_the_per_transfer_compiler(case):
    op, algo, n, chunks, window = case.split("/")
    ctype = CollectiveType[op]
    options = CompileOptions(algorithms={ctype: algo} if algo != "None" else {}, chunks=int(chunks[1:]),
                             window=None if window == "wNone" else int(window[1:]))
    assert schedule_hash(compile_trace(_trace(ctype, int(n)), options)) == GOLDEN[case]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(ALGOS), st.integers(1, 19), st.integers(0, 5000), st.integers(1, 4),
       st.one_of(st.none(), st.integers(1, 20)))
def test_an_algorithms_table_is_its_transfers_as_columns(alg, n, size, chunks, window):
    root = n // 2 if alg.uses_root else 0
    got = alg.table(n, size, root=root, chunks=chunks, window=window)
    want = table_of_transfers(alg.transfers(n, size, root=root, chunks=chunks, window=window))
    for name in COLUMNS:
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name


@dataclass(frozen=True)
class _Listed:
    """An algorithm object with ``transfers()`` only (the compiler's Algorithm protocol)."""

    rows: tuple[Transfer, ...]
    name: str = "listed"
    collective: CollectiveType = CollectiveType.ALL_REDUCE

    def transfers(self, n, size_bytes, *, root=0, chunks=1, window=None):
        return list(self.rows)


def _compile_listed(rows, n=2):
    return compile_trace(_trace(CollectiveType.ALL_REDUCE, n), get_algorithm=lambda ctype, name: _Listed(tuple(rows)))


def test_a_table_out_of_topological_order_lowers_in_that_order():
    # transfer 0 (1 -> 0) waits for transfer 1 (0 -> 1): rank 1 receives before it sends
    s = _compile_listed([Transfer(1, 0, 10, 1, 0, (1,)), Transfer(0, 1, 10, 0, 0)])
    ops = [i for i in s.rank_ops(1) if s.op_kind[i] in (OP_SEND, OP_RECV)][:2]
    recv, send = ops
    assert s.op_kind[recv] == OP_RECV and s.op_kind[send] == OP_SEND
    assert recv in s.parents(send).tolist()


@pytest.mark.parametrize(("rows", "words"), [
    ([Transfer(0, 0, 1, 0, 0)], "bad position"),
    ([Transfer(0, 2, 1, 0, 0)], "bad position"),
    ([Transfer(0, 1, 1, 0, 0, (5,))], "invalid 'after' index 5"),
    ([Transfer(0, 1, 1, 0, 0, (0,))], "invalid 'after' index 0"),
    ([Transfer(0, 1, 1, 0, 0, (1,)), Transfer(1, 0, 1, 0, 0, (0,))], "cyclic"),
])
def test_a_bad_table_is_one_error_naming_the_collective(rows, words):
    with pytest.raises(ScheduleError, match=words) as err:
        _compile_listed(rows)
    assert "all_reduce/listed n=2" in str(err.value)


def test_a_wait_on_a_transfer_without_the_sender_is_an_error():
    rows = [Transfer(0, 1, 1, 0, 0), Transfer(2, 0, 1, 1, 0, (0,))]  # rank 2 waits for 0 -> 1
    with pytest.raises(ScheduleError, match="transfer 1 waits for transfer 0, which does not involve its sender"):
        _compile_listed(rows, 3)
