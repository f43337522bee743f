"""Build the servingops container image without a container engine, reproducibly, and push it.

Three layers, each cached under $SERVINGOPS_CACHE/image (default ~/.cache/servingops/image) by a key of
everything it depends on, so an unchanged layer is never rebuilt:

  base          Debian bookworm by mmdebstrap (debian.py)           key: its options, mmdebstrap, debian.py
  dependencies  the pinned wheels (python_layers.py)                key: base, constraints.txt, pyproject.toml
  servingops    the product's wheel and its console script          key: dependencies, the product's files

Each layer's timestamps are SOURCE_DATE_EPOCH of the commit that last changed its inputs, so a layer that did
not change keeps its digest from commit to commit (and a registry stores it once). Downloads (.debs, wheels) are
cached apart from the layers: `--no-cache` rebuilds every layer from them, which is how the reproducibility test
builds the same commit twice.

Usage (as root, mmdebstrap and oras on PATH or named; `deploy/image/build.sh` provides both):
  python deploy/image/build.py [--registry HOST:PORT] [--repository NAME] [--write-values FILE] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import debian
import oci
import python_layers
from layers import Layer, compress_tar, directory_layer

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
WORKING_DIR = f"/home/{debian.USER}"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def _epoch(*paths: str) -> int:
    """SOURCE_DATE_EPOCH for what `paths` make: the commit time of the last commit that changed one of them
    (HEAD's when none did yet). SOURCE_DATE_EPOCH in the environment, when set, wins (for every layer)."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return int(os.environ["SOURCE_DATE_EPOCH"])
    return int(_git("log", "-1", "--format=%ct", "--", *paths) or _git("log", "-1", "--format=%ct"))


def _digest(*parts: bytes | str) -> str:
    sha = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        sha.update(len(data).to_bytes(8, "big") + data)
    return sha.hexdigest()[:24]


def _product_files() -> list[str]:
    """What the wheel is built from: pyproject.toml, the servingops/ links and the product folders they name,
    as git sees them (committed or not, nothing ignored)."""
    links = sorted(path.name for path in (REPO / "servingops").iterdir() if path.is_symlink())
    listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "pyproject.toml",
                  "servingops", *links).split("\0")
    return sorted(name for name in listed if name and (REPO / name).exists())


def _content(path: Path) -> bytes:
    return f"-> {path.readlink()}".encode() if path.is_symlink() else path.read_bytes()


def _copy_product(files: list[str], to: Path) -> None:
    for name in files:
        source, target = REPO / name, to / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(source.readlink())
        else:
            shutil.copyfile(source, target)


def _extract(tar: Path, root: Path) -> None:
    """The base rootfs, owners and device nodes as they are (we are root): the chroot the pycs are compiled in."""
    root.mkdir(parents=True)
    subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-xpf", str(tar)], check=True)


@dataclass
class Store:
    """Where finished layers live: the cache, or (with --no-cache) this build's own directory."""
    directory: Path
    use_cached: bool
    hits: dict[str, bool]

    def layer(self, name: str, key: str, make: Callable[[Path], Layer]) -> Layer:
        meta = self.directory / f"{name}-{key}.json"
        cached = Layer.load(meta) if self.use_cached else None
        self.hits[name] = cached is not None
        if cached is not None:
            return cached
        layer = make(self.directory / f"{name}-{key}.tar.gz")
        layer.save(meta)
        return layer


def _source_label() -> str:
    try:
        return _git("config", "--get", "remote.origin.url")
    except subprocess.CalledProcessError:
        return os.environ.get("SERVINGOPS_IMAGE_SOURCE", "unknown (a checkout without a git remote)")


def write_values(values: Path, repository: str, tag: str, digest: str) -> None:
    """Point the chart's default image (its `image:` block) at what was built; every other line untouched."""
    lines = values.read_text().splitlines(keepends=True)
    start = lines.index("image:\n")
    wanted = {"repository": repository, "tag": tag, "digest": digest}
    for index in range(start + 1, len(lines)):
        line = lines[index]
        if line.strip() and not line.startswith(" "):
            break
        match = re.match(r"^  (repository|tag|digest):", line)
        if match:
            lines[index] = f"  {match.group(1)}: {json.dumps(wanted.pop(match.group(1)))}\n"
    if wanted:
        raise SystemExit(f"{values}: no {', '.join(wanted)} under image:")
    values.write_text("".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--registry", help="host:port to push to; none: build the layout only")
    parser.add_argument("--repository", default="servingops/servingops")
    parser.add_argument("--plain-http", action=argparse.BooleanOptionalAction, default=True,
                        help="talk HTTP to the registry (the local one); --no-plain-http for HTTPS")
    parser.add_argument("--oras", default=shutil.which("oras") or "oras")
    parser.add_argument("--layout", type=Path, help="where to write the OCI layout (default: in the cache)")
    parser.add_argument("--no-cache", action="store_true", help="rebuild every layer (downloads stay cached)")
    parser.add_argument("--write-values", type=Path, help="the chart's values.yaml to point at the pushed image")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    parser.add_argument("--revision", help="what the revision label and the tag name (default: HEAD, with -dirty "
                                           "when tracked files differ from it); with SOURCE_DATE_EPOCH, pins a "
                                           "build to a commit while HEAD moves on")
    args = parser.parse_args()
    started = time.monotonic()

    cache = Path(os.environ.get("SERVINGOPS_CACHE", Path.home() / ".cache" / "servingops")) / "image"
    for sub in ("debs", "pip", "layers", "work"):
        (cache / sub).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=cache / "work"))
    store = Store(cache / "layers" if not args.no_cache else work, not args.no_cache, {})
    try:
        revision = args.revision or _git("rev-parse", "HEAD") + (
            "-dirty" if _git("status", "--porcelain", "--untracked-files=no") else "")
        head_epoch = _epoch()
        project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
        builder = [(HERE / name).read_bytes() for name in ("layers.py", "python_layers.py")]

        spec = debian.BaseSpec(epoch=_epoch("deploy/image/debian.py"), mmdebstrap=debian.mmdebstrap_version())
        base_key = _digest(spec.key(), (HERE / "debian.py").read_bytes(), builder[0])
        base_tar = (cache / "layers" if not args.no_cache else work) / f"rootfs-{base_key}.tar"
        if args.no_cache or not base_tar.is_file():
            print(f"== base: mmdebstrap {spec.suite} (log: {work}/mmdebstrap.log)", file=sys.stderr)
            debian.build_base(spec, base_tar, cache / "debs", work / "mmdebstrap.log")
        base = store.layer("base", base_key, lambda out: compress_tar(base_tar, out, debian.LEFT_BY_APT,
                                                                            debian.RUNTIME_PROVIDED))
        packages = debian.installed_packages(base_tar)

        deps_epoch = _epoch("constraints.txt", "pyproject.toml", "deploy/image/python_layers.py")
        constraints = (REPO / "constraints.txt").read_bytes()
        deps_key = _digest(base_key, constraints, json.dumps(project["dependencies"]), *builder, str(deps_epoch))

        def make_deps(out: Path) -> Layer:
            print("== dependencies: pip (pinned by constraints.txt), bytecode", file=sys.stderr)
            root = work / "deps-root"
            _extract(base_tar, root)
            python_layers.install_dependencies(root, project["dependencies"], REPO / "constraints.txt",
                                               cache / "pip")
            python_layers.compile_bytecode(root, python_layers.SITE)
            return directory_layer(root, [python_layers.SITE], deps_epoch, out)
        deps = store.layer("dependencies", deps_key, make_deps)

        files = _product_files()
        app_key = _digest(deps_key, *builder, str(head_epoch),
                          *(part for name in files for part in (name, _content(REPO / name))))
        entrypoint = f"/{python_layers.BIN}/servingops"

        def make_app(out: Path) -> Layer:
            print("== servingops: wheel, console script, bytecode", file=sys.stderr)
            source, wheels, root = work / "source", work / "wheels", work / "app-root"
            _copy_product(files, source)
            wheel = python_layers.build_wheel(source, wheels, cache / "pip")
            _extract(base_tar, root)
            python_layers.install_product(root, wheel, cache / "pip")
            python_layers.compile_bytecode(root, python_layers.SITE)
            return directory_layer(root, [python_layers.SITE, python_layers.BIN], head_epoch, out)
        app = store.layer("servingops", app_key, make_app)

        version = str(project["version"])
        commit, _, suffix = revision.partition("-")
        tag = f"{version}-{commit[:12]}" + (f"-{suffix}" if suffix else "")
        labels = {"org.opencontainers.image.source": _source_label(),
                  "org.opencontainers.image.version": version,
                  "org.opencontainers.image.revision": revision,
                  "org.opencontainers.image.title": "servingops"}
        image = oci.ImageConfig(
            user=f"{debian.UID}:{debian.UID}", entrypoint=[entrypoint],
            env=["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
                 # The image's files are read-only to its user: nothing to write a pyc to, and none is needed.
                 "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"],
            working_dir=WORKING_DIR, labels=labels, epoch=head_epoch,
            history=[f"mmdebstrap {spec.suite} {spec.variant} +{','.join(spec.include)} -{','.join(spec.purge)}",
                     "pip install --target /" + python_layers.SITE + " (constraints.txt)",
                     f"pip install servingops {version} ({revision})"])
        layout = args.layout or cache / "layout"
        digest = oci.write_layout(layout, [base, deps, app], image, tag)

        reference = None
        if args.registry:
            reference = f"{args.registry}/{args.repository}"
            oci.push(args.oras, layout, tag, f"{reference}:{tag}", args.plain_http)
            if args.write_values:
                write_values(args.write_values, reference, tag, digest)

        layers = [base, deps, app]
        size, unpacked = sum(layer.size for layer in layers), sum(layer.uncompressed_size for layer in layers)
        seconds = round(time.monotonic() - started, 1)
        result = {
            "digest": digest, "tag": tag, "layout": str(layout),
            "reference": f"{reference}@{digest}" if reference else None, "size": size, "uncompressed_size": unpacked,
            "packages": len(packages), "cached": store.hits, "seconds": seconds,
        }
        print(f"image {digest} ({tag}): {size / 1e6:.1f} MB compressed, {unpacked / 1e6:.1f} MB unpacked, "
              f"{len(packages)} Debian packages; layers cached: {store.hits}; {seconds} s", file=sys.stderr)
        if reference:
            print(f"pushed {reference}:{tag} = {reference}@{digest}", file=sys.stderr)
        if args.json:
            print(json.dumps(result))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
