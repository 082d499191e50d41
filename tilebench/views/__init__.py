"""Notebook views of a compiled kernel: highlighted code, layout heatmaps, resource tables.

Each module imports its widget libraries (anywidget, ipywidgets, plotly, pygments) itself; nothing is
imported here, so ``import tilebench`` stays light.
"""
