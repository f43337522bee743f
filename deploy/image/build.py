"""Build the servingops container image without a container engine, reproducibly, and push it.

Three layers, each cached under $SERVINGOPS_CACHE/image (default ~/.cache/servingops/image) by a key of
everything it depends on, so an unchanged layer is never rebuilt:

  base          Debian bookworm by mmdebstrap (debian.py)           key: its options, mmdebstrap, debian.py,
                                                                         the mirror's InRelease
  dependencies  the pinned wheels (python_layers.py)                key: base, constraints.txt, pyproject.toml's
                                                                         dependencies
  servingops    the product's wheel and its console script          key: dependencies, the product's files

Each layer's timestamps are SOURCE_DATE_EPOCH of the commit that last changed its inputs, so a layer that did
not change keeps its digest from commit to commit (and a registry stores it once); SOURCE_DATE_EPOCH in the
environment only clamps them. Downloads (.debs, wheels) are cached apart from the layers: `--no-cache` rebuilds
every layer from them, which is how the reproducibility test builds the same commit twice. pip and the wheel run
while mmdebstrap does, and the layers are compressed side by side; the report's `phases` gives each step's time.

Usage (as root, mmdebstrap and oras on PATH or named; `deploy/image/build.sh` provides both):
  python deploy/image/build.py [--registry HOST:PORT] [--repository NAME] [--record FILE] [--json]
  python deploy/image/build.py --push REGISTRY[/REPOSITORY] [--registry-config FILE] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
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


def _clamp(epoch: int) -> int:
    """SOURCE_DATE_EPOCH in the environment, when set, is the latest time any layer or the config may carry
    (as reproducible-builds.org defines it: a clamp). The test sets HEAD's time, so a layer whose inputs last
    changed earlier keeps the epoch, and the digest, it has at every other commit."""
    pinned = os.environ.get("SOURCE_DATE_EPOCH")
    return min(epoch, int(pinned)) if pinned else epoch


def _epoch(*paths: str) -> int:
    """SOURCE_DATE_EPOCH for what `paths` make: the commit time of the last commit that changed one of them
    (HEAD's when none did yet), clamped (`_clamp`)."""
    return _clamp(int(_git("log", "-1", "--format=%ct", "--", *paths) or _git("log", "-1", "--format=%ct")))


def _dependencies_at(revision: str) -> list[str] | None:
    try:
        text = _git("show", f"{revision}:pyproject.toml")
    except subprocess.CalledProcessError:
        return None
    return list(tomllib.loads(text).get("project", {}).get("dependencies", []))


def _dependencies_epoch() -> int:
    """The epoch of pyproject.toml's dependency list: the time of the last commit that changed the list, not
    of any commit that changed pyproject.toml (its tool tables change often, and the layer holds none of
    them). HEAD's when none did yet; clamped (`_clamp`)."""
    for line in _git("log", "--format=%H %ct", "--", "pyproject.toml").splitlines():
        commit, seconds = line.split()
        if _dependencies_at(commit) != _dependencies_at(f"{commit}^"):
            return _clamp(int(seconds))
    return _epoch()


def _digest(*parts: bytes | str) -> str:
    sha = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        sha.update(len(data).to_bytes(8, "big") + data)
    return sha.hexdigest()[:24]


def _product_files() -> list[str]:
    """What the wheel is built from: pyproject.toml and the product's folder servingops/, as git sees them
    (committed or not, nothing ignored)."""
    listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "pyproject.toml",
                  "servingops").split("\0")
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
class Phases:
    """Seconds spent in each named step of the build, in the order they started (the report's `phases`)."""
    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.monotonic() - started, 1)


@dataclass
class Store:
    """Where finished layers live: the cache, or (with --no-cache) this build's own directory."""
    directory: Path
    use_cached: bool
    hits: dict[str, bool]

    def cached(self, name: str, key: str) -> Layer | None:
        layer = Layer.load(self.directory / f"{name}-{key}.json") if self.use_cached else None
        self.hits[name] = layer is not None
        return layer

    def make(self, name: str, key: str, make: Callable[[Path], Layer]) -> Layer:
        layer = make(self.directory / f"{name}-{key}.tar.gz")
        layer.save(self.directory / f"{name}-{key}.json")
        return layer


def _move_in(stage: Path, root: Path, tops: list[str]) -> None:
    """The trees `tops` installed under `stage` moved to the same paths under `root` (the extracted base, where
    each is absent or an empty directory): what installing into `root` itself would have left."""
    for top in tops:
        target = root / top
        if target.is_dir():
            target.rmdir()  # the base's empty directory; an error if the base ever ships files there
        target.parent.mkdir(parents=True, exist_ok=True)
        (stage / top).rename(target)


def _source_label() -> str:
    try:
        return _git("config", "--get", "remote.origin.url")
    except subprocess.CalledProcessError:
        return os.environ.get("SERVINGOPS_IMAGE_SOURCE", "unknown (a checkout without a git remote)")


DEFAULT_REPOSITORY = "servingops/servingops"


def split_push(target: str) -> tuple[str, str]:
    """`--push REGISTRY[/REPOSITORY]` as (registry, repository): the first path element is the registry's host
    (and port), the rest the repository, DEFAULT_REPOSITORY when none is given."""
    registry, _, repository = target.strip("/").partition("/")
    if not registry or ("." not in registry and ":" not in registry and registry != "localhost"):
        raise SystemExit(f"--push {target}: name the registry's host first (registry.example.com[/team/servingops])")
    return registry, repository or DEFAULT_REPOSITORY


def chart_values(repository: str, tag: str, digest: str) -> dict[str, str]:
    """The chart's image values (deploy/chart/values.yaml `image:`) that run exactly the pushed image."""
    return {"repository": repository, "tag": tag, "digest": digest}


def record(path: Path, values: dict[str, str]) -> None:
    """What was pushed, for the local stack (devstack/identities.built_image_values): a file under the cache,
    written whole or not at all; nothing tracked is touched, so the next build of the same tree is clean."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}")
    part.write_text(json.dumps(values, indent=1) + "\n")
    os.replace(part, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--registry", help="host:port to push to; none: build the layout only")
    parser.add_argument("--repository", default=DEFAULT_REPOSITORY)
    parser.add_argument("--push", metavar="REGISTRY[/REPOSITORY]",
                        help="push to your own registry over HTTPS with oras's credentials (oras/docker login, or "
                             "--registry-config) and print the chart values that run it; instead of --registry")
    parser.add_argument("--registry-config", type=Path, help="a docker config.json with the registry's credentials")
    parser.add_argument("--plain-http", action=argparse.BooleanOptionalAction, default=None,
                        help="talk HTTP to the registry (default with --registry: the local one); HTTPS with --push")
    parser.add_argument("--record", type=Path, help="write the pushed image's chart values (JSON) to this file")
    parser.add_argument("--oras", default=shutil.which("oras") or "oras")
    parser.add_argument("--layout", type=Path, help="where to write the OCI layout (default: in the cache)")
    parser.add_argument("--no-cache", action="store_true", help="rebuild every layer (downloads stay cached)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    parser.add_argument("--revision", help="what the revision label and the tag name (default: HEAD, with -dirty "
                                           "when tracked files differ from it); with SOURCE_DATE_EPOCH, pins a "
                                           "build to a commit while HEAD moves on")
    args = parser.parse_args()
    if args.push:
        if args.registry:
            parser.error("--push and --registry: name one place to push to")
        args.registry, args.repository = split_push(args.push)
    plain_http = args.plain_http if args.plain_http is not None else not args.push
    started = time.monotonic()

    cache = Path(os.environ.get("SERVINGOPS_CACHE", Path.home() / ".cache" / "servingops")) / "image"
    for sub in ("debs", "pip", "wheels", "layers", "work"):
        (cache / sub).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=cache / "work"))
    store = Store(cache / "layers" if not args.no_cache else work, not args.no_cache, {})
    phase = Phases()
    try:
        revision = args.revision or _git("rev-parse", "HEAD") + (
            "-dirty" if _git("status", "--porcelain", "--untracked-files=no") else "")
        head_epoch = _epoch()
        project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
        requirements: list[str] = project["dependencies"]
        builder = [(HERE / name).read_bytes() for name in ("layers.py", "python_layers.py")]

        with phase("keys"):
            spec = debian.BaseSpec(epoch=_epoch("deploy/image/debian.py"), mmdebstrap=debian.mmdebstrap_version())
            spec = dataclasses.replace(spec, release=debian.mirror_release(spec.suite, spec.mirror))
            base_key = _digest(spec.key(), (HERE / "debian.py").read_bytes(), builder[0])
            deps_epoch = max(_epoch("constraints.txt", "deploy/image/python_layers.py"), _dependencies_epoch())
            constraints = (REPO / "constraints.txt").read_bytes()
            deps_key = _digest(base_key, constraints, json.dumps(requirements), *builder, str(deps_epoch),
                               python_layers.strip_version())
            wheels_key = _digest(constraints, json.dumps(requirements), builder[1])
            files = _product_files()
            app_key = _digest(deps_key, *builder, str(head_epoch),
                              *(part for name in files for part in (name, _content(REPO / name))))
        base_tar = (cache / "layers" if not args.no_cache else work) / f"rootfs-{base_key}.tar"
        entrypoint = f"/{python_layers.BIN}/servingops"
        base = store.cached("base", base_key)
        deps = store.cached("dependencies", deps_key)
        app = store.cached("servingops", app_key)
        deps_stage, app_stage = work / "deps-stage", work / "app-stage"

        # The Python layers are installed into stages of their own while mmdebstrap makes the base (pip runs on
        # the build machine and needs no rootfs), and moved into an extracted base for their bytecode once it is
        # there; the three layers are then compressed side by side. Every layer is made from the same inputs
        # as one after the other would be: only the waiting is shorter.
        def stage_dependencies() -> None:
            print("== dependencies: pip (pinned by constraints.txt), bytecode", file=sys.stderr)
            with phase("dependencies: download"):
                wheels = python_layers.download_dependencies(requirements, REPO / "constraints.txt",
                                                             cache / "wheels" / wheels_key, cache / "pip")
            with phase("dependencies: pip install"):
                python_layers.install_dependencies(deps_stage, requirements, REPO / "constraints.txt", wheels,
                                                   cache / "pip")

        def stage_app() -> None:
            print("== servingops: wheel, console script, bytecode", file=sys.stderr)
            source, wheels = work / "source", work / "wheels"
            with phase("servingops: wheel"):
                _copy_product(files, source)
                wheel = python_layers.build_wheel(source, wheels, cache / "pip")
            with phase("servingops: install"):
                python_layers.install_product(app_stage, wheel, cache / "pip")

        def make_base(out: Path) -> Layer:
            with phase("base: compress"):
                return compress_tar(base_tar, out, debian.LEFT_BY_APT, debian.RUNTIME_PROVIDED)

        def make_python_layer(name: str, staged: Future[None], stage: Path, tops: list[str], epoch: int,
                              out: Path) -> Layer:
            staged.result()
            root = work / f"{name}-root"
            with phase(f"{name}: extract base"):
                _extract(base_tar, root)
                _move_in(stage, root, tops)
            with phase(f"{name}: bytecode"):
                python_layers.compile_bytecode(root, python_layers.SITE)
                if name == "dependencies":
                    python_layers.make_sourceless(root / python_layers.SITE)
            with phase(f"{name}: compress"):
                return directory_layer(root, tops, epoch, out)

        # Enough workers for every task at once: a layer's task waits for its stage's, never for a free worker.
        with ThreadPoolExecutor(max_workers=5) as pool:
            deps_staged = pool.submit(stage_dependencies) if deps is None else None
            app_staged = pool.submit(stage_app) if app is None else None
            if args.no_cache or not base_tar.is_file():
                print(f"== base: mmdebstrap {spec.suite} (log: {work}/mmdebstrap.log)", file=sys.stderr)
                with phase("base: mmdebstrap"):
                    debian.build_base(spec, base_tar, cache / "debs", work / "mmdebstrap.log")
            made: dict[str, Future[Layer]] = {}
            if base is None:
                made["base"] = pool.submit(store.make, "base", base_key, make_base)
            if deps_staged is not None:
                made["dependencies"] = pool.submit(
                    store.make, "dependencies", deps_key, functools.partial(
                        make_python_layer, "dependencies", deps_staged, deps_stage, [python_layers.SITE], deps_epoch))
            if app_staged is not None:
                made["servingops"] = pool.submit(
                    store.make, "servingops", app_key, functools.partial(
                        make_python_layer, "servingops", app_staged, app_stage, [python_layers.SITE, python_layers.BIN],
                        head_epoch))
            packages = debian.installed_packages(base_tar)
            layers = [layer or made[name].result() for name, layer in
                      (("base", base), ("dependencies", deps), ("servingops", app))]

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
        with phase("layout"):
            digest = oci.write_layout(layout, layers, image, tag)

        reference, values = None, None
        if args.registry:
            reference = f"{args.registry}/{args.repository}"
            with phase("push"):
                oci.push(args.oras, layout, tag, f"{reference}:{tag}", plain_http, args.registry_config)
            values = chart_values(reference, tag, digest)
            if args.record:
                record(args.record, values)

        size, unpacked = sum(layer.size for layer in layers), sum(layer.uncompressed_size for layer in layers)
        seconds = round(time.monotonic() - started, 1)
        result = {
            "digest": digest, "tag": tag, "layout": str(layout),
            "reference": f"{reference}@{digest}" if reference else None, "size": size, "uncompressed_size": unpacked,
            "packages": len(packages), "cached": store.hits, "seconds": seconds, "phases": phase.seconds,
            "values": values,
        }
        print("phases (s, some side by side): "
              + ", ".join(f"{name} {spent}" for name, spent in phase.seconds.items()), file=sys.stderr)
        print(f"image {digest} ({tag}): {size / 1e6:.1f} MB compressed, {unpacked / 1e6:.1f} MB unpacked, "
              f"{len(packages)} Debian packages; layers cached: {store.hits}; {seconds} s", file=sys.stderr)
        if reference and values:
            print(f"pushed {reference}:{tag} = {reference}@{digest}", file=sys.stderr)
            print("chart values (deploy/chart/values.yaml `image:`) that run it:\n"
                  + "".join(f"  --set image.{key}={value}" for key, value in values.items()), file=sys.stderr)
        if args.json:
            print(json.dumps(result))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
