"""What the socket drivers (loopback, direct) share: UDP ports (:mod:`.udp`), worker processes that run
rank endpoints on them (:mod:`.workers`) and the supervisor that starts, watches and ends a run
(:mod:`.supervisor`)."""
