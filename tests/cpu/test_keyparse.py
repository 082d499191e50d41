"""The C key parser (tilebench/kernel/_keyparse.c), built by the install: the common call in C, every
other call and every error handed to the Python parser behind it."""

import gc
import weakref

import pytest
import torch

from tilebench.kernel import native

keyparse = native.load()
if keyparse is None:
    pytest.fail("the C key parser was not built by the install (see tilebench/kernel/native.py)")


class Slow:
    """The parser behind: records what reached it."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return ("slow", len(args), tuple(sorted(kwargs)))


def test_the_common_call_reads_shapes_and_strides_after_the_compile_values():
    slow = Slow()
    parser = keyparse.KeyParser(
        2, ("f16", 128), [(0, False, 0), (1, False, 1), (0, True, 0), (0, False, 1)], slow
    )
    a, b = torch.empty(6, 4), torch.empty(4, 5)
    assert parser(a, b) == ("f16", 128, 6, 5, 4, 4)
    assert parser(a.t(), b) == ("f16", 128, 4, 5, 1, 6)
    assert slow.calls == []


def test_every_other_call_goes_to_the_slow_parser_unchanged():
    slow = Slow()
    parser = keyparse.KeyParser(2, (), [(0, False, 0), (1, False, 2)], slow)
    a, b = torch.empty(3), torch.empty(2, 2)
    assert parser(a, b, 64) == ("slow", 3, ())  # a compile-time value given
    assert parser(a, B=b) == ("slow", 1, ("B",))  # keywords
    assert parser(a) == ("slow", 1, ())
    assert parser(7, b) == ("slow", 2, ())  # no .shape: the slow parser names the parameter
    assert parser(a, b) == ("slow", 2, ())  # axis 2 of a 2-d tensor
    assert len(slow.calls) == 5 and slow.calls[1] == ((a,), {"B": b})


def test_an_exception_that_is_not_an_error_goes_up():
    class Interrupting:
        @property
        def shape(self):
            raise KeyboardInterrupt

    slow = Slow()
    parser = keyparse.KeyParser(1, (), [(0, False, 0)], slow)
    with pytest.raises(KeyboardInterrupt):
        parser(Interrupting())
    assert slow.calls == []


@pytest.mark.parametrize(
    "args, error",
    [
        ((-1, (), [], print), "nargs must be 0..64"),
        ((65, (), [], print), "nargs must be 0..64"),
        ((1, (), [(1, False, 0)], print), "read 0 is out of range"),
        ((1, (), [(0, False, -1)], print), "read 0 is out of range"),
        ((1, (), [(0, False)], print), "KeyParser read"),
        ((1, (), [], "not callable"), "slow must be callable"),
        ((1, [], [], print), "must be tuple"),
    ],
)
def test_bad_construction_is_a_clear_error(args, error):
    with pytest.raises((TypeError, ValueError), match=error):
        keyparse.KeyParser(*args)


def test_a_parser_in_a_reference_cycle_is_collected_and_takes_a_doc():
    class Owner:
        def slow(self, *args):
            return args

    owner = Owner()
    owner.parser = keyparse.KeyParser(0, (1,), [], owner.slow)  # owner -> parser -> bound method -> owner
    owner.parser.__doc__ = "the key"
    assert owner.parser() == (1,) and owner.parser.__doc__ == "the key" and owner.parser.slow == owner.slow
    gone = weakref.ref(owner)
    del owner
    gc.collect()
    assert gone() is None


def test_a_stale_build_is_not_loaded(monkeypatch):
    monkeypatch.setattr(native, "VERSION", native.VERSION + 1)
    assert native.load() is None


def test_build_writes_the_module_or_says_why_not(tmp_path, monkeypatch):
    built = native.build(tmp_path)
    assert built == native.library_path(tmp_path) and built.read_bytes()[:4] == b"\x7fELF"
    assert [p.name for p in tmp_path.iterdir()] == [built.name]  # no partial file left
    monkeypatch.setattr(native, "compiler", lambda: None)
    with pytest.raises(RuntimeError, match="no C compiler found"):
        native.build(tmp_path)
