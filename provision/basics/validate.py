"""Input validation, run before any resource is created.

Each check raises :class:`UsageError` with one line that names the fix. The rules follow
Google Cloud's own: resource names are RFC 1035 labels, label keys and values use lowercase
letters, digits, ``_`` and ``-``, zones look like ``us-central1-b``.
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass

from .errors import UsageError

# the longest a supervisor waits between two looks at a run (``train --poll``'s most): the CLI's
# option range and the caps' deadline margin (provision.runs.caps) both read it here, where a
# command's option parsing may look without loading the runs layer
LONGEST_POLL_S = 10.0


NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?\Z")
ZONE_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]{1,2}-[a-z]\Z")
REGION_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]{1,2}\Z")
PROJECT_RE = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]\Z|^[a-z][-a-z0-9.:]{4,61}[a-z0-9]\Z")
LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}\Z")
LABEL_VALUE_RE = re.compile(r"^[a-z0-9_-]{0,63}\Z")
DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(d|h|m|s)")
BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]\Z")
RESOURCE_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?\Z")          # networks, subnetworks (RFC 1035)
MACHINE_TYPE_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+){0,8}\Z")
VERSION_RE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?\Z")      # runtime images, TF versions
SERVICE_ACCOUNT_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}@[a-z0-9][a-z0-9.:-]{0,120}\.gserviceaccount\.com\Z")

# Label keys tpuctl owns. Users may set tpuctl-keep; the rest are written by tpuctl only.
CLUSTER_LABEL = "tpuctl-cluster"
ROLE_LABEL = "tpuctl-role"
HOST_ROLE = "host"          # ROLE_LABEL of a cluster's host VM (a TPU's, on either API, is "tpu")
KEEP_LABEL = "tpuctl-keep"
RESERVED_LABEL_PREFIX = "tpuctl-"
USER_SETTABLE_RESERVED = {KEEP_LABEL}
MAX_LABELS = 64


def show(value: object) -> str:
    """Quote a user value for an error message, cut short and without control characters."""
    text = str(value)
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    if len(text) > 70:
        text = text[:67] + "..."
    return repr(text)


def cluster_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise UsageError(
            f"invalid cluster name {show(name)}",
            hint="use 1-63 lowercase letters, digits or '-', starting with a letter and not ending "
                 "with '-' (e.g. bert-lab)",
        )
    return name


def zone(value: str) -> str:
    if not isinstance(value, str) or not ZONE_RE.match(value):
        raise UsageError(f"invalid zone {show(value)}",
                         hint="use a Google Cloud zone such as us-central1-b or europe-west4-a")
    return value


def zones(value: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Parse ``z1,z2,...`` (the failover order) into a tuple of distinct zones."""
    items = value.split(",") if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        z = zone(item.strip())
        if z not in out:
            out.append(z)
    if not out:
        raise UsageError("no zone given", hint="pass --zone us-central1-b (or z1,z2 for failover)")
    return tuple(out)


def accelerator_types(value: str) -> tuple[str, ...]:
    """Split ``v5litepod-8,v6e-8`` into the types listed (each checked where it is parsed)."""
    items = tuple(dict.fromkeys(t.strip() for t in str(value or "").split(",") if t.strip()))
    if not items:
        raise UsageError("empty --accelerator-type", hint="name a TPU type, e.g. --accelerator-type v2-8")
    return items


def region_of(zone_name: str) -> str:
    return zone_name.rsplit("-", 1)[0]


def project(value: str) -> str:
    if not isinstance(value, str) or not PROJECT_RE.match(value):
        raise UsageError(f"invalid project id {show(value)}",
                         hint="use the project ID (6-30 lowercase letters, digits, '-'), not its name or number")
    return value


def network(value: str, what: str = "network") -> str:
    """A VPC network or subnetwork name (tpuctl builds the resource path from it)."""
    if not isinstance(value, str) or not RESOURCE_RE.match(value):
        raise UsageError(f"invalid {what} name {show(value)}",
                         hint=f"use the {what}'s name (1-63 lowercase letters, digits or '-', starting with a "
                              f"letter), such as default")
    return value


def machine_type(value: str) -> str:
    if not isinstance(value, str) or len(value) > 63 or not MACHINE_TYPE_RE.match(value):
        raise UsageError(f"invalid machine type {show(value)}",
                         hint="use a Compute Engine machine type such as n1-standard-2 or e2-standard-4")
    return value


def software_version(value: str, flag: str) -> str:
    """A TPU VM runtime image (``--runtime-version``) or a TPU Node TensorFlow version (``--tf-version``)."""
    if not isinstance(value, str) or not VERSION_RE.match(value):
        example = "tpu-vm-tf-2.16.1-pjrt" if flag == "--runtime-version" else "2.12.0"
        raise UsageError(f"invalid {flag} {show(value)}",
                         hint=f"use lowercase letters, digits, '.', '_' or '-', such as {flag} {example}")
    return value


def service_account(value: str) -> str:
    if not isinstance(value, str) or not SERVICE_ACCOUNT_RE.match(value):
        raise UsageError(f"invalid service account {show(value)}",
                         hint="use the account's email, such as tpuctl-host@PROJECT.iam.gserviceaccount.com")
    return value


def duration(value: str | float) -> float:
    """Parse ``30m``, ``1h30m``, ``90s``, ``2d`` or a bare number of seconds into seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = str(value).strip().lower()
        if re.fullmatch(r"\d+(\.\d+)?", text):
            seconds = float(text)
        else:
            pos, seconds = 0, 0.0
            unit = {"d": 86400, "h": 3600, "m": 60, "s": 1}
            for m in DURATION_RE.finditer(text):
                if m.start() != pos:
                    break
                seconds += float(m.group(1)) * unit[m.group(2)]
                pos = m.end()
            if pos != len(text) or not text:
                raise UsageError(f"invalid duration {show(value)}",
                                 hint="use a number with a unit, such as 90s, 30m, 1h30m or 2d")
    if math.isnan(seconds) or seconds < 0 or seconds > 366 * 86400:
        raise UsageError(f"invalid duration {show(value)}",
                         hint="use a positive duration of at most a year, such as 30m")
    return seconds


def duration_with_unit(value: str, option: str) -> float:
    """A duration on a command that deletes: ``30`` could mean 30 minutes and would delete after 30
    seconds, so a bare number other than 0 is refused with its fix; anything else as :func:`duration`."""
    text = str(value).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text) and float(text) != 0:
        raise UsageError(f"{option} {text} has no unit, on a command that deletes TPUs",
                         hint=f"write {option} {text}m for minutes or {option} {text}s for seconds "
                              "(units s, m, h, d, e.g. 1h30m)")
    return duration(value)


def format_duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts[:2])


def cidr(value: str) -> ipaddress.IPv4Network:
    """Syntax and privacy of a CIDR block; overlap is checked later against the network."""
    try:
        net = ipaddress.ip_network(str(value).strip(), strict=True)
    except ValueError:
        raise UsageError(f"invalid CIDR block {show(value)}",
                         hint="use an IPv4 block with its host bits zero, such as 10.240.1.0/29") from None
    if not isinstance(net, ipaddress.IPv4Network):
        raise UsageError(f"CIDR block {value} is not IPv4", hint="use an IPv4 block such as 10.240.1.0/29")
    if not any(net.subnet_of(p) for p in PRIVATE_RANGES):
        raise UsageError(f"CIDR block {value} is not private",
                         hint="use a block inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16")
    return net


PRIVATE_RANGES = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))


def label(item: str) -> tuple[str, str]:
    """Parse one ``KEY=VALUE`` given to ``--label``."""
    if not isinstance(item, str) or "=" not in item:
        raise UsageError(f"invalid label {show(item)}", hint="use --label KEY=VALUE, such as --label team=nlp")
    key, value = item.split("=", 1)
    if not LABEL_KEY_RE.match(key):
        raise UsageError(f"invalid label key {show(key)}",
                         hint="start with a lowercase letter; use at most 63 lowercase letters, digits, '_' or '-'")
    if not LABEL_VALUE_RE.match(value):
        raise UsageError(f"invalid label value {show(value)} for {key}",
                         hint="use at most 63 lowercase letters, digits, '_' or '-'")
    if key.startswith(RESERVED_LABEL_PREFIX) and key not in USER_SETTABLE_RESERVED:
        raise UsageError(f"label key {key} is reserved for tpuctl",
                         hint=f"choose another key (of the tpuctl- keys only {KEEP_LABEL} can be set)")
    if key == KEEP_LABEL and value not in ("true", "false"):
        raise UsageError(f"{KEEP_LABEL} must be true or false", hint=f"use --label {KEEP_LABEL}=true")
    return key, value


def labels(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or ():
        k, v = label(item)
        if k in out and out[k] != v:
            raise UsageError(f"label {k} given twice with different values", hint="pass each key once")
        out[k] = v
    # tpuctl adds its own two labels to every resource
    if len(out) > MAX_LABELS - 2:
        raise UsageError(f"too many labels ({len(out)})", hint=f"pass at most {MAX_LABELS - 2} labels")
    return out


def run_id(value: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", value):
        raise UsageError(f"invalid run id {show(value)}",
                         hint="use the id printed by tpuctl train (lowercase letters, digits and '-')")
    return value


@dataclass(frozen=True)
class BucketUrl:
    bucket: str
    prefix: str  # no leading slash; "" for the bucket root

    def __str__(self) -> str:
        return f"gs://{self.bucket}/{self.prefix}" if self.prefix else f"gs://{self.bucket}"

    def join(self, *parts: str) -> BucketUrl:
        segs = [p.strip("/") for p in (self.prefix, *parts) if p and p.strip("/")]
        return BucketUrl(self.bucket, "/".join(segs))


def bucket_url(value: str) -> BucketUrl:
    text = str(value)
    if not text.startswith("gs://"):
        raise UsageError(f"invalid bucket URL {show(value)}", hint="use gs://BUCKET[/PREFIX]")
    rest = text[len("gs://"):]
    bucket, _, prefix = rest.partition("/")
    if (not BUCKET_RE.match(bucket) or ".." in bucket or bucket.startswith("goog")
            or "google" in bucket):
        raise UsageError(f"invalid bucket name {show(bucket)}",
                         hint="use 3-63 lowercase letters, digits, '-', '_' or '.', starting and ending "
                              "with a letter or digit")
    prefix = prefix.strip("/")
    if (any(seg in (".", "..") for seg in prefix.split("/") if prefix)
            or any(not ch.isprintable() for ch in prefix) or len(prefix.encode("utf-8", "replace")) > 900):
        raise UsageError(f"invalid object prefix in {show(value)}",
                         hint="remove '.', '..', control characters and line breaks from the path "
                              "(at most 900 bytes)")
    if "//" in prefix:
        raise UsageError(f"empty path segment in {show(value)}", hint="remove the doubled '/'")
    return BucketUrl(bucket, prefix)
