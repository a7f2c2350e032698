"""``localkit tour``: every method of the map reproduced on real bundled data and checked side by
side against its reference, with timings, a table printed and figures written."""
from ._core import Row, TourContext, format_table, run_tour, sections

__all__ = ["Row", "TourContext", "format_table", "run_tour", "sections"]
