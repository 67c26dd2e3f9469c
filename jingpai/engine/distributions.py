"""Engine distributions: the official *integ-test-zip* of each engine, fetched once and unpacked once.

The zip is fetched from Maven Central with ``mvn dependency:copy`` into ``<cache>/zips`` and unpacked
into ``<cache>/dist/<kind>-<version>`` (a marker file says the unpacking finished); the node runs on
the machine's Java 17 (:func:`java_home`).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

from jingpai.engine.settings import ARTIFACTS, EngineError, EngineSettings

logger = logging.getLogger(__name__)


def require_tool(name: str, fix: str) -> str:
    """The path of tool ``name``; :class:`EngineError` saying ``fix`` when it is not on ``PATH``."""
    path = shutil.which(name)
    if path is None:
        raise EngineError(f"`{name}` was not found on PATH; {fix}")
    return path


def java_home() -> Path:
    """The Java installation the engines run on (``JAVA_HOME`` or the ``java`` on PATH)."""
    env = os.environ.get("JAVA_HOME")
    if env and (Path(env) / "bin" / "java").exists():
        return Path(env)
    java = require_tool("java", "install Java 17 (Debian: apt-get install openjdk-17-jre-headless)")
    return Path(java).resolve().parent.parent


def ensure_distribution(settings: EngineSettings) -> Path:
    """Download (once) and unpack (once) the integ-test-zip; return the unpacked home (``settings.dist_home``)."""
    home = settings.dist_home
    marker = home / ".jingpai-unpacked"
    if marker.exists():
        return home
    version = settings.resolved_version
    zips = settings.root / "zips"
    zip_path = zips / f"{settings.kind}-{version}.zip"
    if not zip_path.exists():
        mvn = require_tool("mvn", "install Maven (Debian: apt-get install maven)")
        zips.mkdir(parents=True, exist_ok=True)
        artifact = f"{ARTIFACTS[settings.kind]}:{version}:zip"
        logger.info("fetching %s from Maven Central", artifact)
        proc = subprocess.run(
            [mvn, "-q", "-B", "dependency:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={zips}"],
            capture_output=True,
            text=True,
            cwd=zips,
        )
        if proc.returncode != 0 or not zip_path.exists():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
            raise EngineError(
                f"could not fetch {artifact} with `mvn dependency:copy` (exit {proc.returncode}); "
                f"check the version exists on Maven Central and the network reaches it: {' | '.join(tail)}"
            )
    staging = home.with_name(home.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as zf:
        for info in zf.infolist():
            extracted = Path(zf.extract(info, staging))
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                extracted.chmod(mode)
    (inner,) = [p for p in staging.iterdir() if p.is_dir()]
    shutil.rmtree(home, ignore_errors=True)
    inner.rename(home)
    staging.rmdir()
    marker.write_text(version)
    return home


__all__ = ["ensure_distribution", "java_home", "require_tool"]
