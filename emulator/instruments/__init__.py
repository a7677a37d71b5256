"""Measuring instruments the drivers carry and the stats read: log-linear histograms, exact percentile
distributions, and the timing verdict of a socket run. No I/O; below every layer that measures."""
