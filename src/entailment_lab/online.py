"""One network probe: can a service (the Hugging Face hub, the W&B API) be reached now?

A single HTTP request bounded by a timeout, so an offline machine fails in seconds with one
line instead of a client's long retry loop.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from urllib.parse import urlparse


def unreachable(url: str, timeout: float = 3.0) -> str | None:
    """Why ``url``'s server cannot be reached within ``timeout`` seconds; None if it answers.

    Any HTTP answer below 500 counts as reached; a 5xx is a gateway with no server behind it.
    """
    parsed = urlparse(url)
    scheme = "http" if parsed.scheme == "http" else "https"
    host = parsed.hostname or ""
    port = parsed.port or (80 if scheme == "http" else 443)
    where = f"[{host}]" if ":" in host else host  # an IPv6 address
    probe = urllib.request.Request(f"{scheme}://{where}:{port}/", method="HEAD")
    try:  # urllib's timeout bounds the connection and the answer
        urllib.request.urlopen(probe, timeout=timeout).close()
        return None
    except urllib.error.HTTPError as err:  # an answer
        return None if err.code < 500 else f"HTTP {err.code} {err.reason}"
    except (OSError, ValueError) as err:  # URLError, refused, timed out, a malformed URL
        return str(getattr(err, "reason", None) or err)
