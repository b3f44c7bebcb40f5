"""Pure figure functions: data in (twin reports, sweeps, measurements), a ``plotly`` Figure out.

The app's pages and the static HTML report call the same functions, so they cannot disagree.
Every figure's subtitle says what it was computed on (``common.provenance``): the cluster, the
NCCL version the twin emulates, the twin's constants (a profile or the defaults), and whether its
numbers are predicted or measured.
"""
