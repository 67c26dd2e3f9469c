"""Running one local engine node: its instance directory, its process, and the nodes recorded so far.

Each running node owns one *instance directory* (config, data, logs, pid file) named after its kind and
port. Engines refuse to run as root, so when the caller is root the node runs as an unprivileged
system user that the harness creates and that owns the engine tree and the instance directory.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from jingpai.engine.distributions import java_home, require_tool
from jingpai.engine.modules import ensure_home_with_modules, verify_modules
from jingpai.engine.plugins import harness_http, verify_plugins
from jingpai.engine.settings import ENGINE_USER, EngineError, EngineKind, EngineSettings, NodeInfo, default_cache_dir

logger = logging.getLogger(__name__)


def _engine_user() -> tuple[int, int] | None:
    """``(uid, gid)`` to run the engine as, or ``None`` to run as the caller (non-root)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(ENGINE_USER)
    except KeyError:
        useradd = require_tool("useradd", "create an unprivileged user for the engine by hand")
        subprocess.run(
            [useradd, "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", ENGINE_USER],
            check=True,
            capture_output=True,
        )
        entry = pwd.getpwnam(ENGINE_USER)
        logger.info("created system user %s to run engines (they refuse to run as root)", ENGINE_USER)
    return entry.pw_uid, entry.pw_gid


def _check_traversable(path: Path) -> None:
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.stat().st_mode & 0o001:
            raise EngineError(
                f"{parent} is not traversable by the unprivileged engine user {ENGINE_USER}; "
                f"set JINGPAI_CACHE_DIR (or --cache-dir) to a directory outside it, e.g. /var/cache/jingpai"
            )


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.chown(path, uid, gid)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)


def _port_busy(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _node_config(settings: EngineSettings, inst: Path) -> str:
    lines = [
        f"cluster.name: jingpai-{settings.kind}-{settings.resolved_port}",
        "node.name: jingpai-node",
        "network.host: 127.0.0.1",
        f"http.port: {settings.resolved_port}",
        "discovery.type: single-node",
        f"path.data: {inst / 'data'}",
        f"path.logs: {inst / 'logs'}",
        "cluster.routing.allocation.disk.threshold_enabled: false",
        "action.destructive_requires_name: false",
    ]
    if settings.kind == "elasticsearch":
        # Loopback-only development node: no TLS/auth, no outbound downloads.
        lines += ["xpack.security.enabled: false"]
        if (settings.home / "modules" / "ingest-geoip").exists():
            lines.append("ingest.geoip.downloader.enabled: false")
    if settings.secured:
        from jingpai.engine.security import node_settings

        lines += node_settings()
    return "\n".join(lines) + "\n"


def _read_pid(inst: Path) -> int | None:
    try:
        return int((inst / "engine.pid").read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _pid_alive(pid: int, inst: Path) -> bool:
    """True if ``pid`` runs and is the engine started for ``inst`` (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    return str(inst) in cmdline


def _log_tail(log_file: Path, lines: int = 5) -> str:
    try:
        text = log_file.read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return "(no log written)"
    errors = [line for line in text if "ERROR" in line or "Exception" in line or "fatal" in line.lower()]
    return " | ".join((errors or text)[-lines:])


def _wait_ready(settings: EngineSettings, proc: subprocess.Popen, log_file: Path) -> dict:
    # a secured node loads its security plugin, then initialises the security index after it starts: it takes
    # about twice as long (a minute and a half on a loaded 2-core machine)
    timeout_s = settings.startup_timeout_s * (2 if settings.secured else 1)
    deadline = time.monotonic() + timeout_s
    url = settings.url
    last_exc: Exception | None = None
    # a secured node answers 401 until the security index is initialised, then 200 to the harness's admin
    with httpx.Client(timeout=5.0, **harness_http(settings)) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise EngineError(
                    f"{settings.kind} exited with code {proc.returncode} during start-up; "
                    f"see {log_file}: {_log_tail(log_file)}"
                )
            try:
                health = client.get(f"{url}/_cluster/health", params={"wait_for_status": "yellow", "timeout": "5s"})
                if health.status_code == 200 and health.json().get("status") in ("yellow", "green"):
                    # GET / is absent from the ES integ-test-zip (no rest-root module); _nodes works on both.
                    nodes = client.get(f"{url}/_nodes/_local", params={"filter_path": "nodes.*.version"}).json()
                    return {"version": next(iter(nodes["nodes"].values()))["version"]}
            except httpx.HTTPError as exc:
                last_exc = exc
            time.sleep(1.0)
    _terminate(proc.pid)
    raise EngineError(
        f"{settings.kind} did not answer on {url} within {timeout_s:.0f}s "
        f"(last error: {last_exc}); see {log_file}: {_log_tail(log_file)}"
    )


def _write_instance(settings: EngineSettings, home: Path, inst: Path) -> None:
    """The instance directory: a fresh copy of the distribution's config with the node's own settings."""
    shutil.rmtree(inst / "config", ignore_errors=True)
    for sub in ("data", "logs", "tmp"):
        (inst / sub).mkdir(parents=True, exist_ok=True)
    shutil.copytree(home / "config", inst / "config")
    config_name = "opensearch.yml" if settings.kind == "opensearch" else "elasticsearch.yml"
    (inst / "config" / config_name).write_text(_node_config(settings, inst))
    if settings.secured:
        from jingpai.engine.security import write_security_config

        write_security_config(inst / "config", inst)
    (inst / "config" / "jvm.options.d").mkdir(exist_ok=True)
    (inst / "config" / "jvm.options.d" / "jingpai.options").write_text(f"-Xms{settings.heap}\n-Xmx{settings.heap}\n")


def _node_env(settings: EngineSettings, inst: Path, jhome: Path) -> dict[str, str]:
    """The node's whole environment (nothing of the caller's but ``PATH``)."""
    prefix = "OPENSEARCH" if settings.kind == "opensearch" else "ES"
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        f"{prefix}_PATH_CONF": str(inst / "config"),
        f"{prefix}_JAVA_HOME": str(jhome),
        "JAVA_HOME": str(jhome),
        f"{prefix}_TMPDIR": str(inst / "tmp"),
        "HOME": str(inst),
    }


def launch(settings: EngineSettings) -> subprocess.Popen:
    """Prepare the instance directory and spawn the node without waiting for it.

    Use :func:`wait` afterwards; :func:`start` does both. Splitting them lets callers start several
    nodes in parallel.
    """
    home = ensure_home_with_modules(settings)
    port = settings.resolved_port
    inst = settings.instance_dir
    pid = _read_pid(inst)
    if pid is not None and _pid_alive(pid, inst):
        raise EngineError(f"{settings.kind} already runs on {settings.url} (pid {pid}); stop it with `jingpai engine down --kind {settings.kind} --port {port}`")
    if _port_busy(port):
        raise EngineError(f"port {port} on 127.0.0.1 is already in use by another process; choose another with --port")
    jhome = java_home()
    owner = _engine_user()
    if owner is not None:
        _check_traversable(settings.root)

    _write_instance(settings, home, inst)
    if owner is not None:
        _chown_tree(home, *owner)
        _chown_tree(inst, *owner)
    env = _node_env(settings, inst, jhome)
    log_file = inst / "engine.log"
    binary = home / "bin" / settings.kind
    with log_file.open("ab") as log:
        kwargs: dict = {}
        if owner is not None:
            kwargs = {"user": owner[0], "group": owner[1], "extra_groups": []}
        proc = subprocess.Popen(
            [str(binary)],
            cwd=inst,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **kwargs,
        )
    (inst / "engine.pid").write_text(str(proc.pid))
    (inst / "engine.json").write_text(
        json.dumps(
            {
                "kind": settings.kind,
                "version": settings.resolved_version,
                "url": settings.url,
                "pid": proc.pid,
                "modules": list(settings.modules),
                "plugins": list(settings.plugins),
                **({"security": _security_record(inst)} if settings.secured else {}),
            }
        )
    )
    with_modules = f" with modules {', '.join(settings.modules)}" if settings.modules else ""
    with_modules += f"{' and' if settings.modules else ' with'} plugins {', '.join(settings.plugins)}" if settings.plugins else ""
    logger.info("started %s %s%s (pid %d) on %s", settings.kind, settings.resolved_version, with_modules, proc.pid, settings.url)
    return proc


def _security_record(inst: Path) -> dict[str, str]:
    from jingpai.engine.security import describe

    return describe(inst)


def wait(settings: EngineSettings, proc: subprocess.Popen) -> NodeInfo:
    """Wait until a node spawned by :func:`launch` answers with a yellow/green cluster.

    With ``settings.modules`` (``settings.plugins``) the node must also list each of them as loaded;
    otherwise it is stopped and :class:`EngineError` names the modules (plugins) missing.
    """
    inst = settings.instance_dir
    try:
        root_info = _wait_ready(settings, proc, inst / "engine.log")
    except EngineError as exc:
        if not settings.modules and not settings.plugins:
            raise
        extras = [f"modules {', '.join(settings.modules)}"] if settings.modules else []
        extras += [f"plugins {', '.join(settings.plugins)}"] if settings.plugins else []
        raise EngineError(f"{settings.kind} with {' and '.join(extras)}: {exc}") from exc
    try:
        verify_modules(settings)
        verify_plugins(settings)
    except EngineError:
        _terminate(proc.pid)
        raise
    return NodeInfo(
        kind=settings.kind,
        version=root_info["version"],
        url=settings.url,
        pid=proc.pid,
        instance_dir=inst,
        log_file=inst / "engine.log",
        modules=settings.modules,
        plugins=settings.plugins,
        extra={"security": _security_record(inst)} if settings.secured else {},
    )


def start(settings: EngineSettings) -> NodeInfo:
    """Start a node in the background and wait until it answers.

    Raises:
        EngineError: java/mvn missing, port busy, download failed, or the node failed to come up
            (the message includes the log path and its last error lines).
    """
    return wait(settings, launch(settings))


def _terminate(pid: int, timeout_s: float = 60.0) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            finished, _ = os.waitpid(pid, os.WNOHANG)
            if finished:
                return
        except ChildProcessError:  # not our child: poll /proc instead
            if not Path(f"/proc/{pid}").exists():
                return
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
            if state == "Z":
                return
        time.sleep(0.2)
    logger.warning("engine pid %d ignored SIGTERM for %.0fs; sending SIGKILL", pid, timeout_s)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop(settings: EngineSettings, *, purge: bool = False) -> bool:
    """Stop the node this harness started for ``settings`` (never any other process).

    Args:
        purge: also delete the instance directory (data and logs).

    Returns:
        True if a running node was stopped.
    """
    inst = settings.instance_dir
    pid = _read_pid(inst)
    stopped = False
    if pid is not None and _pid_alive(pid, inst):
        _terminate(pid)
        stopped = True
    (inst / "engine.pid").unlink(missing_ok=True)
    if purge:
        shutil.rmtree(inst, ignore_errors=True)
    return stopped


def run_dir(cache_dir: Path | None = None) -> Path:
    """The directory holding one instance directory (config, data, pid and state file) per started node."""
    return (cache_dir or default_cache_dir()).resolve() / "run"


def status(cache_dir: Path | None = None) -> list[NodeInfo]:
    """All nodes recorded under the cache dir (one ``engine.json`` per node started), running or not."""
    root = run_dir(cache_dir)
    nodes = []
    for meta_file in sorted(root.glob("*/engine.json")):
        inst = meta_file.parent
        meta = json.loads(meta_file.read_text())
        pid = _read_pid(inst)
        nodes.append(
            NodeInfo(
                kind=meta["kind"],
                version=meta["version"],
                url=meta["url"],
                pid=pid or meta["pid"],
                instance_dir=inst,
                log_file=inst / "engine.log",
                alive=pid is not None and _pid_alive(pid, inst),
                modules=tuple(meta.get("modules", ())),
                plugins=tuple(meta.get("plugins", ())),
                extra={"security": meta["security"]} if "security" in meta else {},
            )
        )
    return sorted(nodes, key=lambda n: (n.kind, n.port))


def running(kind: EngineKind | None = None, cache_dir: Path | None = None) -> list[NodeInfo]:
    """The nodes recorded under the cache dir that still run, on whatever port (of ``kind`` if given)."""
    return [n for n in status(cache_dir) if n.alive and kind in (None, n.kind)]


__all__ = ["launch", "run_dir", "running", "start", "status", "stop", "wait"]
