"""What a host VM or TPU VM is given to start with: a small bootstrap in its metadata, and tpuctl's
startup script in the cluster's bucket at a path named by its sha256.

Every list of instances or TPU nodes returns each one's metadata; with the ~20 KB startup script
there, a fleet's ``status`` moved tens of megabytes and every create sent it again. The bootstrap
(``templates/host-bootstrap.sh``, its comment lines dropped) carries the script's sha256, so the
metadata, written only by those who may create VMs, still decides what runs: a bucket writer who
replaces the object only makes the hosts refuse it (docs/security.md).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

from ..basics.templates import templates_dir
from .storage.base import Bucket

SCRIPT = "host-startup.sh"
BOOTSTRAP = "host-bootstrap.sh"
PLACEHOLDER = "@TPUCTL_STARTUP_SHA256@"
PREFIX = "tpuctl/startup/"


@dataclass(frozen=True)
class Startup:
    script: bytes       # templates/host-startup.sh, as the hosts run it
    sha256: str
    bootstrap: str      # the startup-script metadata value

    @property
    def object_name(self) -> str:
        """Where the script lives in a cluster's bucket: content-addressed, so versions never clash."""
        return object_name(self.sha256)


def object_name(sha256: str) -> str:
    return f"{PREFIX}{sha256}.sh"


def render(template: str, sha256: str) -> str:
    """The bootstrap as it goes into metadata: the digest filled in, comment lines and indentation
    dropped (the shebang kept; the script has no here-document), so that what every listed
    resource carries stays small."""
    lines = [line if n == 0 else line.lstrip() for n, line in enumerate(template.splitlines())
             if n == 0 or not line.lstrip().startswith("#")]
    return "\n".join(lines).replace(PLACEHOLDER, sha256) + "\n"


@functools.lru_cache(maxsize=1)
def current() -> Startup:
    """This tpuctl's startup script and the bootstrap that pins it (read once per process)."""
    script = (templates_dir() / SCRIPT).read_bytes()
    digest = hashlib.sha256(script).hexdigest()
    return Startup(script=script, sha256=digest, bootstrap=render((templates_dir() / BOOTSTRAP).read_text(), digest))


def stage(bucket: Bucket) -> bool:
    """Put the startup script at its content-addressed path in ``bucket`` unless it is there with
    the very bytes the bootstraps pin (compared by sha256, :func:`provision.cloud.storage.addressed.holds`);
    True if it wrote. Size and CRC32C would not do: a bucket writer can plant a copy with both
    forged, and a skipped upload would leave every new host refusing it and never booting."""
    from .storage import addressed

    s = current()
    if addressed.holds(bucket, s.object_name, s.sha256, len(s.script)):
        return False
    addressed.wrote(bucket, s.object_name, s.sha256, bucket.write_bytes(s.object_name, s.script))
    return True
