"""Reports of results directories: text, JSON, CSV, HTML, plots, the Perfetto timeline and run comparison.

Everything here reads a results directory through :func:`emulator.results.read_results` (never live
state). Public API::

    from emulator.report import build_document, render_text, render_html, write_plots, write_timeline
    from emulator.report import compare_summaries

    res = read_results(path)
    print(render_text(build_document(res)))                     # what 'emulator report' prints
    Path("r.html").write_text(render_html(build_document(res, with_figures=True)))
    write_timeline(res, res.path / "timeline.json")            # Chrome trace for Perfetto
    write_plots(res, res.path / "plots")                        # PNG files
    write_run_outputs(res, profile.output.formats)              # what 'emulator run' adds per profile
    compare_summaries([("alone", a.summary), ("mixed", b.summary)])

matplotlib is imported only when a figure is drawn.
"""

from emulator.report.build import build_document
from emulator.report.compare import Comparison, compare_summaries
from emulator.report.figures import write_plots, write_timeline
from emulator.report.html import render_html
from emulator.report.outputs import write_run_outputs
from emulator.report.text import render_text

__all__ = ["Comparison", "build_document", "compare_summaries", "render_html", "render_text", "write_plots",
           "write_run_outputs", "write_timeline"]
