"""The cache folder: never a chmod on a folder tilebench did not create, 0700 folders and 0600 files in
what it writes, and cached kernels not private to this user are refused (a warning, then a fresh compile)."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tilebench.compiler.cache import untrusted_reason
from tilebench.compiler.environment import prepare_environment, tilelang_cache_dir
from tilebench.config import CacheFolderError, cache_root, settings, write_private_file
from tilebench.store import default_store

TESTS = Path(__file__).resolve().parents[1]


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def modes_under(root: Path) -> tuple[set[int], set[int]]:
    """(folder modes, file modes) of everything under root, root included."""
    folders, files = {mode(root)}, set()
    for folder, dirs, names in os.walk(root):
        folders |= {mode(Path(folder, d)) for d in dirs}
        files |= {mode(Path(folder, n)) for n in names}
    return folders, files


@pytest.mark.parametrize("shared_mode", [0o755, 0o1777, 0o750])
def test_an_existing_shared_folder_keeps_its_mode_and_gets_a_tilebench_subfolder(tmp_path, shared_mode):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, shared_mode)  # 0o1777: a /tmp-like folder, sticky bit included
    with settings.scope(TILEBENCH_CACHE_DIR=str(shared)):
        assert settings.cache_dir == shared / "tilebench"
        prepare_environment()
        default_store().start_run("gemm")
        assert os.environ["TILELANG_CACHE_DIR"] == str(shared / "tilebench" / "tilelang")
        assert default_store().path == shared / "tilebench" / "records.sqlite"
    assert mode(shared) == shared_mode  # S_IMODE keeps the sticky bit
    assert mode(shared / "tilebench") == mode(shared / "tilebench" / "tilelang") == 0o700
    assert mode(shared / "tilebench" / "records.sqlite") == 0o600


def test_a_missing_folder_is_created_private_with_its_parents(tmp_path):
    target = tmp_path / "a" / "b" / "cache"
    with settings.scope(TILEBENCH_CACHE_DIR=str(target)):
        assert settings.cache_dir == target
        prepare_environment()
    assert [mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", target, target / "tilelang")] == [
        0o700
    ] * 4


def test_a_private_folder_of_ones_own_is_used_as_it_is(tmp_path):
    own = tmp_path / "own"
    own.mkdir(mode=0o700)
    with settings.scope(TILEBENCH_CACHE_DIR=str(own)):
        assert settings.cache_dir == own
        prepare_environment()
    assert mode(own) == 0o700 and (own / "tilelang").is_dir()


def test_a_tilebench_subfolder_that_others_can_open_is_refused(tmp_path):
    shared = tmp_path / "shared"
    (shared / "tilebench").mkdir(parents=True)
    os.chmod(shared, 0o755)
    os.chmod(shared / "tilebench", 0o777)  # made by someone else, or by hand: not private
    with (
        settings.scope(TILEBENCH_CACHE_DIR=str(shared)),
        pytest.raises(CacheFolderError, match="is not private") as error,
    ):
        cache_root()
    assert str(shared / "tilebench") in str(error.value) and "TILEBENCH_CACHE_DIR" in str(error.value)
    assert mode(shared / "tilebench") == 0o777  # refused, not changed


def test_write_private_file_is_atomic_and_0600(tmp_path):
    path = tmp_path / "peaks.json"
    write_private_file(path, '{"a": 1}')
    write_private_file(path, b'{"a": 2}')
    assert path.read_text() == '{"a": 2}' and mode(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["peaks.json"]


# ---------------------------------------------------------------------------
# tilelang's disk cache under tilebench's folder
# ---------------------------------------------------------------------------

COMPILE = """
import warnings

import seed_kernels as S

from tilebench.compiler.cache import UntrustedCacheWarning

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", UntrustedCacheWarning)
    S.vector_add.compile(4096)
for warning in caught:
    if issubclass(warning.category, UntrustedCacheWarning):
        print("WARNING", warning.message)
"""


def compile_in_a_fresh_process(cache: Path) -> list[str]:
    """Compile seed vector_add in a new process (no memory cache); the UntrustedCacheWarnings it gave."""
    env = {
        **os.environ,
        "TILEBENCH_CACHE_DIR": str(cache),
        "PYTHONPATH": f"{TESTS}{os.pathsep}{TESTS.parent}",
    }
    done = subprocess.run(
        [sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [line.removeprefix("WARNING ") for line in done.stdout.splitlines() if line.startswith("WARNING ")]


@pytest.fixture(scope="module")
def compiled_cache(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("compiled") / "cache"
    assert compile_in_a_fresh_process(cache) == []
    return cache


def kernel_entry(cache: Path) -> Path:
    [entry] = (cache / "tilelang").glob("*/*/kernels/*")
    return entry


def test_everything_tilelang_writes_under_tilebench_is_private(compiled_cache):
    folders, files = modes_under(compiled_cache)
    assert folders == {0o700} and files == {0o600}
    assert {"executable.so", "manifest.json"} <= {p.name for p in kernel_entry(compiled_cache).iterdir()}
    assert list((compiled_cache / "tilelang").glob("*/cuda-binaries/*/kernel.cubin"))


def test_a_group_writable_cached_library_is_refused_then_compiled_again(compiled_cache):
    entry = kernel_entry(compiled_cache)
    os.chmod(entry / "executable.so", 0o664)
    [warning] = compile_in_a_fresh_process(compiled_cache)
    assert f"not loading the cached kernel at {entry}" in warning
    assert "executable.so is writable by group or others (mode 0o664)" in warning
    assert kernel_entry(compiled_cache) == entry and mode(entry / "executable.so") == 0o600  # fresh, private
    written = (entry / "executable.so").stat().st_mtime_ns
    assert compile_in_a_fresh_process(compiled_cache) == []  # now a private entry: loaded, not rewritten
    assert (entry / "executable.so").stat().st_mtime_ns == written


def test_a_refused_cuda_binary_is_compiled_again(compiled_cache):
    [binary] = (compiled_cache / "tilelang").glob("*/cuda-binaries/*/kernel.cubin")
    os.chmod(binary.parent, 0o777)
    subprocess.run(
        ["rm", "-rf", str(kernel_entry(compiled_cache))], check=True
    )  # so nvcc's output is asked for
    [warning] = compile_in_a_fresh_process(compiled_cache)
    assert str(binary.parent) in warning and "the folder is writable by group or others" in warning
    assert mode(binary.parent) == 0o700 and binary.exists()


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_cached_library_owned_by_another_user_is_refused(compiled_cache):
    entry = kernel_entry(compiled_cache)
    os.chown(entry / "params.json", 65534, -1)
    [warning] = compile_in_a_fresh_process(compiled_cache)
    assert "params.json is owned by uid 65534, not you (uid 0)" in warning
    assert (entry / "params.json").stat().st_uid == 0


def test_untrusted_reason_names_the_owner(compiled_cache):
    entry = kernel_entry(compiled_cache)
    assert untrusted_reason(entry) is None
    other = os.getuid() + 1
    assert (
        untrusted_reason(entry, uid=other)
        == f"the folder is owned by uid {os.getuid()}, not you (uid {other})"
    )
    link = entry.parent / "link"
    link.symlink_to(entry)
    try:
        assert untrusted_reason(link) == "the folder is a symbolic link"
    finally:
        link.unlink()


def test_clear_cache_makes_a_private_folder_again(tmp_path):
    from tilebench.compiler.cache import clear_tilelang_caches

    with settings.scope(TILEBENCH_CACHE_DIR=str(tmp_path / "cache")):
        clear_tilelang_caches()
        assert mode(tilelang_cache_dir()) == 0o700 and mode(settings.cache_dir) == 0o700


def test_a_fifo_or_device_in_an_entry_is_named_and_never_opened(tmp_path):
    """lstat sees what a file is: a FIFO (or a device, a socket) is refused before anything opens it, and
    read_regular, which reads an entry's files, opens without blocking and refuses what is not a file."""
    import signal

    from tilebench.compiler.cache import read_regular

    entry = tmp_path / "entry"
    entry.mkdir(mode=0o700)
    (entry / "params.json").write_text("[]")
    os.chmod(entry / "params.json", 0o600)
    os.mkfifo(entry / "manifest.json", 0o600)
    assert untrusted_reason(entry) == "manifest.json is a FIFO, not a regular file"
    previous = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("reading a FIFO blocked"))
    signal.alarm(30)
    try:
        with pytest.raises(OSError, match="manifest.json is a FIFO, not a regular file"):
            read_regular(entry / "manifest.json")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert read_regular(entry / "params.json") == b"[]"
    (entry / "manifest.json").unlink()
    (entry / "manifest.json").symlink_to(entry / "params.json")
    with pytest.raises(OSError):  # never followed
        read_regular(entry / "manifest.json")
    os.mkfifo(tmp_path / "fifo", 0o600)
    assert untrusted_reason(tmp_path / "fifo") == "the folder is a FIFO, not a folder"
