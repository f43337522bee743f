"""The image's base layer: a Debian bookworm rootfs made by mmdebstrap, as a tar.

mmdebstrap's output is reproducible for the same options, mirror content and SOURCE_DATE_EPOCH (its
tar is sorted, mtimes clamped, logs and machine-id left out), so its tar is the layer as is. Everything
that changes the tar is in `BaseSpec` and so in the cache key: the mirror's content by the digest of the
suite's InRelease (which names every Packages index and so every package version apt can pick).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import tarfile
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

USER = "servingops"
UID = 65532
"""The image's only user (the value distroless images use for "nonroot"): the chart runs as it."""


@dataclass(frozen=True)
class BaseSpec:
    suite: str = "bookworm"
    mirror: str = "http://deb.debian.org/debian"
    # The essential set, then python3 (the product's interpreter), CA certificates (HTTPS to the Hub,
    # registries and Temporal Cloud) and netbase (/etc/services, /etc/protocols).
    variant: str = "essential"
    include: tuple[str, ...] = ("usr-is-merged", "python3", "ca-certificates", "netbase")
    # The essential set's init-system-helpers pulls usrmerge (and with it perl, ~50 MB) before
    # usr-is-merged can satisfy the same dependency; nothing else needs them once /usr is merged.
    purge: tuple[str, ...] = ("usrmerge", "libfile-find-rule-perl", "libnumber-compare-perl", "libtext-glob-perl",
                              "perl", "libperl5.36", "perl-modules-5.36", "libgdbm-compat4")
    # Documentation nobody reads in a container; copyright files stay (the licences travel with the image).
    # glibc's iconv modules (gconv, 8 MB): Python's codecs are its own, nothing in the image calls iconv. (Files
    # of python3.11's own packages cannot be left out: its postinst compiles every file dpkg lists for them.)
    dpkg_options: tuple[str, ...] = ("path-exclude=/usr/share/man/*", "path-exclude=/usr/share/info/*",
                                     "path-exclude=/usr/share/locale/*", "path-exclude=/usr/share/doc/*",
                                     "path-include=/usr/share/doc/*/copyright",
                                     "path-exclude=/usr/lib/x86_64-linux-gnu/gconv/*")
    epoch: int = 0
    """SOURCE_DATE_EPOCH for mmdebstrap: the commit that last changed this file."""
    mmdebstrap: str = ""
    """mmdebstrap's version: another version may lay the tar out otherwise."""
    release: str = ""
    """sha256 of the suite's InRelease at the mirror (`mirror_release`): the archive's state. A point release
    changes it, so a cached base is never older than what a rebuild would install."""

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:24]


def mmdebstrap_version() -> str:
    return subprocess.run(["mmdebstrap", "--version"], check=True, capture_output=True, text=True).stdout.strip()


def mirror_release(suite: str, mirror: str) -> str:
    """The digest of the suite's signed Release file at the mirror, as apt fetches it first."""
    url = f"{mirror}/dists/{suite}/InRelease"
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return hashlib.sha256(response.read()).hexdigest()
    except OSError as error:
        raise SystemExit(f"{url}: {error} (the base layer's cache key names the archive's state)") from error


def _hooks(deb_cache: Path, spec: BaseSpec) -> list[str]:
    cache = shlex.quote(str(deb_cache))
    user = (f'echo "{USER}:x:{UID}:{UID}:{USER}:/home/{USER}:/usr/sbin/nologin" >> "$1/etc/passwd"; '
            f'echo "{USER}:x:{UID}:" >> "$1/etc/group"; '
            f'echo "{USER}:*:{spec.epoch // 86400}:0:99999:7:::" >> "$1/etc/shadow"; '
            f'mkdir -p "$1/home/{USER}"; chown {UID}:{UID} "$1/home/{USER}"; chmod 0755 "$1/home/{USER}"')
    return [
        # Downloaded .debs are kept outside the rootfs (the Debian archive is the slow part of a cold
        # build); they are copied in before apt looks and out again before mmdebstrap empties the cache.
        # --skip=essential/unlink (below) keeps the essential set's .debs there too, for sync-out.
        f'--setup-hook=mkdir -p {cache} "$1"/var/cache/apt/archives/',
        f"--setup-hook=sync-in {cache} /var/cache/apt/archives/",
        f"--customize-hook=sync-out /var/cache/apt/archives {cache}",
        f'--customize-hook=chroot "$1" dpkg --purge {" ".join(spec.purge)}',
        f"--customize-hook={user}",
        '--customize-hook=rm -rf "$1"/var/cache/ldconfig/aux-cache "$1"/var/cache/debconf/*-old',
    ]


LEFT_BY_APT = ("./var/lib/apt", "./var/cache/apt", "./var/log/apt")
"""The essential variant has no apt: these are what mmdebstrap's own apt left (recreated by its last cleanup,
after every hook), so the base layer leaves them out."""
RUNTIME_PROVIDED = ("./dev",)
"""Directories a container runtime mounts over: their contents (mmdebstrap's device nodes) stay out of the
layer, as in any OCI image, and unpack without privileges."""


SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def build_base(spec: BaseSpec, out: Path, deb_cache: Path, log: Path) -> None:
    """mmdebstrap into `out` (a tar), via a temporary name so a failed build never counts as cached."""
    part = out.with_name(f"{out.name}.{os.getpid()}.part")
    argv = ["mmdebstrap", "--format=tar", f"--variant={spec.variant}", f"--include={','.join(spec.include)}",
            "--skip=essential/unlink", *(f"--dpkgopt={option}" for option in spec.dpkg_options),
            *_hooks(deb_cache, spec), spec.suite, str(part), spec.mirror]
    # The system's PATH: mmdebstrap pipes every essential .deb through mmtarfilter (`#!/usr/bin/env python3`,
    # for the dpkg path-excludes), and a version manager's python3 shim first on PATH (pyenv's) costs a
    # quarter second a start, ~70 starts. The tar is the same either way.
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(spec.epoch), "PATH": SYSTEM_PATH}
    with log.open("w") as sink:
        subprocess.run(argv, check=True, env=env, stdout=sink, stderr=subprocess.STDOUT)
    os.replace(part, out)


def installed_packages(base_tar: Path) -> list[str]:
    """The packages dpkg counts as installed in the rootfs, read from its status file."""
    with tarfile.open(base_tar) as tar:
        member = tar.extractfile("./var/lib/dpkg/status")
        assert member is not None
        text = member.read().decode()
    names = []
    for stanza in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line[0].isspace())
        if fields.get("Status") == "install ok installed":
            names.append(fields["Package"])
    return sorted(names)
