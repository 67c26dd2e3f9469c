"""Container health check: exit 0 when ``GET URL`` answers 2xx, else 1 (with the reason on stderr).

Used by the images' ``HEALTHCHECK`` and by ``docker/compose.yaml``. Standard library only, because the
slim Python base image has no curl and a health check must not import the (slow) jingpai package.

Example:
    python /opt/jingpai/healthcheck.py http://127.0.0.1:8081/health
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request


def check(url: str, *, timeout_s: float = 4.0) -> str | None:
    """Return ``None`` when ``url`` answers 2xx, else why not.

    Args:
        url: the http(s) URL to GET.
        timeout_s: connect + read timeout.

    Returns:
        ``None`` if healthy, otherwise a one-line reason naming the URL.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (local URL from the image)
            status = resp.status
    except urllib.error.HTTPError as exc:
        return f"{url} answered HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return f"{url} is unreachable: {getattr(exc, 'reason', exc)}"
    if not 200 <= status < 300:
        return f"{url} answered HTTP {status}"
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].startswith(("http://", "https://")):
        print(f"usage: healthcheck.py http://HOST:PORT/PATH (got {argv!r})", file=sys.stderr)
        return 2
    reason = check(argv[0])
    if reason is not None:
        print(f"unhealthy: {reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
