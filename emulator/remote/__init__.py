"""Runs over many hosts: the agent API (:mod:`.api`), the agent server (:mod:`.agent`), the controller
(:mod:`.controller`, :mod:`.driver`), HOSTS.yaml (:mod:`.hosts`), clock offsets (:mod:`.clock`), runs under
launchers (:mod:`.launch`) and the network-namespace lab of the tests and benches (:mod:`.lab`)."""
