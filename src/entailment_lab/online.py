"""One network probe: can a service (the Hugging Face hub, the W&B API) be reached now?

A single HTTP request bounded by a timeout, so an offline machine fails in seconds with one
line instead of a client's long retry loop.
"""

from __future__ import annotations

import functools
import os
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


#: What huggingface_hub and datasets read as "on" in HF_HUB_OFFLINE / HF_DATASETS_OFFLINE.
TRUE_VALUES = {"1", "ON", "YES", "TRUE"}


def hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the Hugging Face hub cannot be used now, in a few words: an offline flag
    (``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE``) or why one request to ``HF_ENDPOINT`` failed;
    None when it answers. The answer of the request is kept for the process: the command-line
    check, the run's checks and the DataModule's ``prepare_data`` ask seconds apart."""
    flags = [f for f in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
             if (os.environ.get(f) or "").upper() in TRUE_VALUES]
    if flags:
        return f"{' and '.join(flags)} set"
    return _probe(os.environ.get("HF_ENDPOINT") or "https://huggingface.co", timeout)


@functools.lru_cache(maxsize=8)
def _probe(url: str, timeout: float) -> str | None:
    reason = unreachable(url, timeout)
    return None if reason is None else f"the hub is unreachable: {reason}"
