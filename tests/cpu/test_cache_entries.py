"""Kernel-cache entries are sealed: the key and the sha256 of every file, written as tilelang saves the entry
and checked as it loads it. A copied, swapped or edited entry, or one holding a FIFO, a link or a file it
did not have, is refused with a warning naming the file and why, and compiled again: never loaded, never
blocking. Real tilelang compiles here (compile-only), in this process, with tilelang's memory cache
emptied before each compile that should ask the disk."""

import json
import os
import shutil
import signal
import stat
from pathlib import Path

import pytest
import tilelang.language as T

import tilebench as tb
from tilebench.compiler.cache import SEAL, UntrustedCacheWarning, seal_problem
from tilebench.compiler.environment import tilelang_cache_dir
from tilebench.compiler.runtime import tilelang


def scaled():
    @tb.jit(out_idx=[-1])
    def scale(N, factor):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
                for i in T.Parallel(128):
                    B[bx * 128 + i] = A[bx * 128 + i] * factor

        return main

    return scale


def compile_from_disk(factor: float):
    """A new JIT object, tilelang's memory cache emptied: the compile asks tilelang's disk cache."""
    tilelang()
    import tilelang.cache as tl_cache

    for cache in tl_cache._dispatch_map.values():
        cache._memory_cache.clear()
    return scaled()(1024, factor)


def entries(root: Path) -> dict[str, Path]:
    return {path.name: path for path in root.glob("*/*/kernels/*")}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A cache holding two sealed entries (factor 3 and 5), and each kernel's CUDA source."""
    cache = tmp_path_factory.mktemp("pristine") / "cache"
    with tb.settings.scope(TILEBENCH_CACHE_DIR=str(cache)):
        sources = {factor: compile_from_disk(factor).cuda_source for factor in (3.0, 5.0)}
        found = entries(tilelang_cache_dir())
        keys = {factor: _entry_of(found, sources[factor]).name for factor in sources}
    assert len(found) == 2 and sources[3.0] != sources[5.0]
    return cache, sources, keys


def _entry_of(found: dict[str, Path], source: str) -> Path:
    [entry] = [path for path in found.values() if (path / "device_kernel.cu").read_text() == source]
    return entry


@pytest.fixture
def cache(pristine, tmp_path):
    """A copy of the pristine cache, in use for the test: (tilelang's folder, sources, entry by factor)."""
    root, sources, keys = pristine
    copy = tmp_path / "cache"
    shutil.copytree(root, copy, symlinks=True)
    previous = signal.signal(signal.SIGALRM, _blocked)
    signal.alarm(240)  # a compile that blocks on a FIFO fails the test instead of hanging it
    with tb.settings.scope(TILEBENCH_CACHE_DIR=str(copy)):
        found = entries(tilelang_cache_dir())
        yield tilelang_cache_dir(), sources, {factor: found[key] for factor, key in keys.items()}
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _blocked(signum, frame):
    raise TimeoutError("the compile blocked")


def recompiled(factor: float, entry: Path, *expected: str) -> str:
    """Compile again, expecting one warning about `entry` that says each of `expected`; the CUDA source."""
    with pytest.warns(UntrustedCacheWarning) as caught:
        source = compile_from_disk(factor).cuda_source
    messages = [str(w.message) for w in caught if issubclass(w.category, UntrustedCacheWarning)]
    assert len(messages) == 1, messages
    assert f"not loading the cached kernel at {entry}" in messages[0]
    for part in expected:
        assert part in messages[0], messages[0]
    assert seal_problem(entry, entry.name)[0] is None  # a fresh entry, sealed for its own key
    return source


def test_an_intact_entry_is_loaded_with_its_own_sources(cache, recwarn):
    root, sources, entry = cache
    written = (entry[3.0] / "executable.so").stat().st_mtime_ns
    assert compile_from_disk(3.0).cuda_source == sources[3.0]
    assert not [w for w in recwarn if issubclass(w.category, UntrustedCacheWarning)]
    assert (entry[3.0] / "executable.so").stat().st_mtime_ns == written  # loaded, not rebuilt
    seal = json.loads((entry[3.0] / SEAL).read_text())
    assert seal["key"] == entry[3.0].name
    assert set(seal["files"]) == {p.name for p in entry[3.0].iterdir()} - {SEAL}
    assert {"executable.so", "device_kernel.cu", "host_kernel.cu", "params.json", "manifest.json"} <= set(
        seal["files"]
    )
    assert stat.S_IMODE((entry[3.0] / SEAL).stat().st_mode) == 0o600


def test_an_entry_copied_under_another_key_is_refused(cache):
    root, sources, entry = cache
    shutil.rmtree(entry[5.0])
    shutil.copytree(entry[3.0], entry[5.0])  # factor 3's kernel where factor 5's is looked for
    source = recompiled(5.0, entry[5.0], f"it was sealed for key {entry[3.0].name[:16]}", "copied")
    assert source == sources[5.0] != sources[3.0]


def test_a_swapped_library_with_its_manifest_fixed_is_refused(cache):
    root, sources, entry = cache
    library = entry[5.0] / "executable.so"
    shutil.copyfile(entry[3.0] / "executable.so", library)  # factor 3's library ...
    manifest = json.loads((entry[5.0] / "manifest.json").read_text())
    manifest["files"]["executable.so"] = json.loads((entry[3.0] / "manifest.json").read_text())["files"][
        "executable.so"
    ]  # ... and its size and sha256 recorded in tilelang's manifest: tilelang's own check passes
    (entry[5.0] / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    tilelang()
    import tilelang.cache as tl_cache

    assert tl_cache._dispatch_map["tvm_ffi"]._verify_cache_dir_integrity(str(entry[5.0]))
    source = recompiled(5.0, entry[5.0], "executable.so does not match its seal.json")
    assert source == sources[5.0]
    assert library.read_bytes() != (entry[3.0] / "executable.so").read_bytes()  # rebuilt


@pytest.mark.parametrize("name", ["device_kernel.cu", "host_kernel.cu"])
def test_a_source_edited_in_place_is_refused(cache, name):
    root, sources, entry = cache
    path = entry[3.0] / name
    text = path.read_text()
    edited = text.replace("extern", "EXTERN", 1) if "extern" in text else text[:-1] + "/"
    assert len(edited) == len(text) and edited != text  # same size: tilelang's size check passes
    path.write_text(edited)
    source = recompiled(3.0, entry[3.0], f"{name} does not match its seal.json")
    assert source == sources[3.0] and (entry[3.0] / name).read_text() == text


@pytest.mark.parametrize("name", ["manifest.json", "params.json", "executable.so", "device_kernel.cu"])
def test_a_fifo_in_an_entry_is_refused_without_blocking(cache, name):
    root, sources, entry = cache
    (entry[3.0] / name).unlink()
    os.mkfifo(entry[3.0] / name, 0o600)
    source = recompiled(3.0, entry[3.0], f"{name} is a FIFO, not a regular file")
    assert source == sources[3.0] and stat.S_ISREG((entry[3.0] / name).lstat().st_mode)


def test_a_fifo_as_the_seal_is_refused_without_blocking(cache):
    root, sources, entry = cache
    (entry[3.0] / SEAL).unlink()
    os.mkfifo(entry[3.0] / SEAL, 0o600)
    assert recompiled(3.0, entry[3.0], "seal.json is a FIFO, not a regular file") == sources[3.0]


def test_a_library_linked_from_outside_is_refused(cache, tmp_path):
    root, sources, entry = cache
    outside = tmp_path / "elsewhere.so"
    shutil.copyfile(entry[5.0] / "executable.so", outside)
    (entry[3.0] / "executable.so").unlink()
    (entry[3.0] / "executable.so").symlink_to(outside)
    assert recompiled(3.0, entry[3.0], "executable.so is a symbolic link") == sources[3.0]
    assert outside.exists()  # the link is removed, never what it points to


def test_an_unsealed_entry_or_an_added_file_is_refused(cache):
    root, sources, entry = cache
    (entry[3.0] / SEAL).unlink()
    assert recompiled(3.0, entry[3.0], "it has no seal.json") == sources[3.0]
    (entry[5.0] / "kernel.cubin").write_bytes(b"\x7fELF")
    assert recompiled(5.0, entry[5.0], "kernel.cubin is not in its seal.json") == sources[5.0]


def test_a_refused_cuda_binary_is_compiled_again(cache):
    """tilelang's CUDA binary cache is sealed too: a FIFO, or a binary copied under another key, is refused."""
    root, sources, entry = cache
    first, second = binaries = sorted(root.glob("*/cuda-binaries/*"))
    assert all(seal_problem(binary, binary.name)[0] is None for binary in binaries)
    for kernel in entry.values():
        shutil.rmtree(kernel)  # so that the device binaries are asked for
    shutil.rmtree(second)
    shutil.copytree(first, second)  # the first kernel's binary where the second's is looked for
    (first / "kernel.cubin").unlink()
    os.mkfifo(first / "kernel.cubin", 0o600)
    with pytest.warns(UntrustedCacheWarning) as caught:
        for factor in (3.0, 5.0):
            assert compile_from_disk(factor).cuda_source == sources[factor]
    messages = [str(w.message) for w in caught if issubclass(w.category, UntrustedCacheWarning)]
    assert len(messages) == 2, messages
    assert any(str(first) in m and "kernel.cubin is a FIFO, not a regular file" in m for m in messages)
    assert any(str(second) in m and f"sealed for key {first.name[:16]}" in m for m in messages)
    assert all(seal_problem(binary, binary.name)[0] is None for binary in binaries)  # compiled, sealed
