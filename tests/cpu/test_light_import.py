"""`import tilebench` stays light: the heavy libraries load on first use."""

import subprocess
import sys


def test_import_loads_no_heavy_module():
    code = (
        "import sys, tilebench; tilebench.place; "
        "heavy = {'tilelang', 'tvm', 'ipywidgets', 'plotly', 'pandas', 'optuna', 'anywidget', 'dask', 'distributed'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_unknown_attribute_is_an_attribute_error():
    import tilebench

    try:
        tilebench.not_a_thing  # noqa: B018
    except AttributeError as error:
        assert "not_a_thing" in str(error)
    else:
        raise AssertionError("expected AttributeError")
