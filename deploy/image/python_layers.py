"""The image's Python layers: the pinned dependencies, then the servingops wheel and its console script.

pip runs on the build machine but installs for the image's interpreter (CPython 3.11 of bookworm, x86_64
glibc 2.36: binary wheels only), so nothing is compiled and no pip lands in the image. Bytecode is compiled by
the image's own python3 inside a chroot of the base, with unchecked-hash pycs (no source mtime in them) and a
fixed hash seed, one file after the other in sorted order: a pyc then depends only on its source.
"""

from __future__ import annotations

import configparser
import csv
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

PYTHON_VERSION = "3.11"
SITE = f"usr/local/lib/python{PYTHON_VERSION}/dist-packages"
"""On the sys.path of Debian's python3, outside what dpkg owns."""
BIN = "usr/local/bin"
PLATFORMS = ("manylinux_2_36_x86_64", "manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_28_x86_64",
             "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux2010_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64")
"""Every manylinux tag glibc 2.36 (bookworm) can load: pip does not expand one tag into the older ones."""
PRUNE = ("bin", "kubernetes/aio", "temporalio/bridge/sdk-core")
"""Never imported at run time: scripts pip wrote for the build machine's interpreter, the kubernetes client's
asyncio twin (41 MB; the product uses the threaded client), and the Rust sources temporalio ships (12 MB)."""
TEST_DIRECTORIES = ("tests", "test")
"""A dependency's own test suite (jsonschema, websocket, fsspec, referencing, oras, ...: 1.7 MB), never imported
by the package itself; removed wherever a directory of these names lies inside a package."""
SOURCELESS = ("kubernetes",)
"""Packages shipped as bytecode only (each pyc where its .py was, which CPython imports without the source): the
kubernetes client is generated OpenAPI code whose 33 MB of source nobody reads in an image; a traceback through
it still names the file and line. Not for every dependency: some read their own source at run time (anyio's
lazy imports call inspect.getsource)."""


def _pip(*args: str, pip_cache: Path) -> None:
    env = {**os.environ, "PIP_CACHE_DIR": str(pip_cache), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([sys.executable, "-m", "pip", *args], check=True, env=env)


def _for_the_image(requirements: list[str], constraints: Path) -> list[str]:
    """pip's arguments that choose the image's wheels: its interpreter and platforms, the pins."""
    platform_args = [arg for tag in PLATFORMS for arg in ("--platform", tag)]
    return ["--only-binary=:all:", "--implementation", "cp", "--python-version", PYTHON_VERSION,
            "--abi", f"cp{PYTHON_VERSION.replace('.', '')}", *platform_args, "-c", str(constraints), *requirements]


def download_dependencies(requirements: list[str], constraints: Path, wheels: Path, pip_cache: Path) -> Path:
    """The wheels the dependency layer installs, downloaded once into `wheels` (a directory named by what
    chooses them: the caller's key) and kept: a rebuild installs from them without asking the index again.
    Every version is pinned, so the directory's wheels are what the index would give."""
    if wheels.is_dir():
        return wheels
    part = wheels.with_name(f".{wheels.name}.{os.getpid()}.part")  # complete, or never under its name
    shutil.rmtree(part, ignore_errors=True)
    _pip("download", "--quiet", "--dest", str(part), *_for_the_image(requirements, constraints), pip_cache=pip_cache)
    try:
        part.rename(wheels)
    except OSError:  # another build finished the same download first
        shutil.rmtree(part, ignore_errors=True)
    return wheels


def install_dependencies(root: Path, requirements: list[str], constraints: Path, wheels: Path,
                         pip_cache: Path) -> None:
    """The product's dependencies at the versions constraints.txt pins, from the downloaded `wheels` (no
    index), into the image's site-packages under `root`."""
    _pip("install", "--quiet", "--no-compile", "--target", str(root / SITE), "--no-index", "--find-links",
         str(wheels), *_for_the_image(requirements, constraints), pip_cache=pip_cache)
    site = root / SITE
    for name in PRUNE:
        shutil.rmtree(site / name, ignore_errors=True)
    for directory in sorted(path for name in TEST_DIRECTORIES for path in site.glob(f"*/**/{name}")
                            if path.is_dir() and (path.parent / "__init__.py").exists()):
        shutil.rmtree(directory, ignore_errors=True)
    # Type stubs are for type checkers on a developer's machine; the interpreter never reads them.
    for stub in sorted(site.rglob("*.pyi")):
        stub.unlink()
    strip_shared_objects(site)
    forget_absent_files(site)


def strip_version() -> str:
    """The build machine's strip (binutils): another version may write other bytes, so it is in the layer's key."""
    return subprocess.run([_strip(), "--version"], check=True, capture_output=True, text=True).stdout.splitlines()[0]


def _strip() -> str:
    found = shutil.which("strip")
    if found is None:
        raise SystemExit("strip (binutils) not found: deploy/image/build.sh installs it")
    return found


def strip_shared_objects(site: Path) -> None:
    """Symbol tables and debug sections out of every extension module (as Debian's dh_strip does for its own
    packages): the wheels of temporalio's core, cryptography and hf_xet ship them (23 MB). `--strip-unneeded`
    keeps every symbol the dynamic loader resolves; the same input and strip give the same bytes."""
    objects = sorted(str(path) for path in site.rglob("*.so") if path.is_file() and not path.is_symlink())
    if objects:
        subprocess.run([_strip(), "--strip-unneeded", *objects], check=True)


def make_sourceless(site: Path, packages: tuple[str, ...] = SOURCELESS) -> None:
    """Each module of `packages` as its compiled pyc at the source's place (`x.py` -> `x.pyc`, what CPython's
    sourceless loader imports), the source and __pycache__ removed; run after compile_bytecode."""
    for package in packages:
        for cache in sorted((site / package).rglob("__pycache__"), reverse=True):
            for compiled in sorted(cache.glob(f"*.cpython-{PYTHON_VERSION.replace('.', '')}.pyc")):
                module = compiled.name.split(".")[0]
                source = cache.parent / f"{module}.py"
                if source.is_file():
                    compiled.rename(cache.parent / f"{module}.pyc")
                    source.unlink()
            if not any(cache.iterdir()):
                cache.rmdir()
    forget_absent_files(site)


def forget_absent_files(site: Path) -> None:
    """Every RECORD in `site` rewritten to list only the files the layer holds (pip's bytes otherwise).

    pip records the scripts it wrote in the target's bin/ (pruned above) with their hashes, and those
    scripts name the build machine's interpreter on their shebang line: kept, they would make the layer's
    digest depend on where the checkout lies (a layer cached by a build from another path then differs from a
    rebuild). Lines for pruned trees would likewise name files the image lacks.
    """
    for record in sorted(site.glob("*.dist-info/RECORD")):
        lines = record.read_bytes().decode().splitlines(keepends=True)
        kept = [line for line in lines if _holds(site, next(csv.reader([line]), [""])[0])]
        if kept != lines:
            record.write_bytes("".join(kept).encode())


def _holds(site: Path, recorded: str) -> bool:
    """Whether a RECORD path (relative to site-packages, as pip writes it) is a file inside `site`."""
    path = (site / recorded).resolve()
    return bool(recorded) and path.is_relative_to(site.resolve()) and path.exists()


def build_wheel(source: Path, out_dir: Path, pip_cache: Path) -> Path:
    """The servingops wheel, built by the pinned setuptools of the build's venv (no download, no isolation)."""
    _pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", "--wheel-dir", str(out_dir),
         str(source), pip_cache=pip_cache)
    [wheel] = out_dir.glob("servingops-*.whl")
    return wheel


def install_product(root: Path, wheel: Path, pip_cache: Path) -> str:
    """The wheel into the image's site-packages and its console script into /usr/local/bin; returns the
    console script's path in the image."""
    site = root / SITE
    _pip("install", "--quiet", "--no-compile", "--no-deps", "--no-index", "--target", str(site), str(wheel),
         pip_cache=pip_cache)
    shutil.rmtree(site / "bin", ignore_errors=True)
    [dist_info] = site.glob("servingops-*.dist-info")
    # direct_url.json names the wheel's path on the build machine: different on every build.
    (dist_info / "direct_url.json").unlink(missing_ok=True)
    forget_absent_files(site)
    with zipfile.ZipFile(wheel) as archive:
        entry_points = archive.read(f"{dist_info.name}/entry_points.txt").decode()
    parser = configparser.ConfigParser()
    parser.read_string(entry_points)
    [(name, target)] = parser.items("console_scripts")
    module, _, function = target.partition(":")
    script = root / BIN / name
    script.parent.mkdir(parents=True, exist_ok=True)
    # What pip would write, with the image's interpreter on the shebang line; -s: no user site-packages.
    script.write_text(f"#!/usr/bin/python3 -s\nimport sys\nfrom {module} import {function}\n\n"
                      f"if __name__ == \"__main__\":\n    sys.exit({function}())\n")
    script.chmod(0o755)
    return f"/{BIN}/{name}"


def compile_bytecode(root: Path, tree: str) -> None:
    """Unchecked-hash pycs for every module under `tree`, by the image's python3 in a chroot of `root`."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8"}
    chroot = shutil.which("chroot") or "/usr/sbin/chroot"
    subprocess.run([chroot, str(root), "/usr/bin/python3", "-m", "compileall", "-q", "-j", "1",
                    "--invalidation-mode", "unchecked-hash", f"/{tree}"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
