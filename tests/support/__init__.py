"""Test support shared by the test packages: hand-built schedules and an in-memory wire
(:mod:`support.endpoint`), sim-driver helpers (:mod:`support.sim`) and the DCQCN incast closed loop
(:mod:`support.incast_loop`). Importable as ``support`` because pytest puts ``tests/`` on ``sys.path``
(``pythonpath`` in pyproject.toml)."""
