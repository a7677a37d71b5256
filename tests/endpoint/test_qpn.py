import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from emulator.endpoint.qpn import qp_endpoints, qp_of, rank_for_qpn, receiver_qpn, sender_qpn


@given(st.integers(min_value=0, max_value=(1 << 23) - 3))
def test_qpn_round_trip(qp):
    assert qp_of(receiver_qpn(qp)) == (qp, False)
    assert qp_of(sender_qpn(qp)) == (qp, True)
    assert receiver_qpn(qp) >= 2 and sender_qpn(qp) < (1 << 24)


def test_rank_for_qpn_routes_data_to_receiver_and_acks_to_sender():
    flow_qp = np.array([0, 1, 0, 2])
    flow_src = np.array([0, 1, 0, 3])
    flow_dst = np.array([1, 2, 1, 0])
    qp_src, qp_dst = qp_endpoints(flow_qp, flow_src, flow_dst)
    assert rank_for_qpn(receiver_qpn(2), qp_src, qp_dst) == 0
    assert rank_for_qpn(sender_qpn(2), qp_src, qp_dst) == 3
    assert rank_for_qpn(receiver_qpn(9), qp_src, qp_dst) == -1
