"""Bad input gets one line that names the fix, and exit code 2, before anything is created."""

import pytest

from provision.basics import validate
from provision.basics.errors import EXIT_USAGE, UsageError


@pytest.mark.parametrize("name, fragment", [
    ("", "invalid cluster name"),
    ("Bert", "invalid cluster name"),
    ("1bert", "invalid cluster name"),
    ("bert-", "invalid cluster name"),
    ("bert_lab", "invalid cluster name"),
    ("a" * 64, "invalid cluster name"),
    ("bert;rm -rf /", "invalid cluster name"),
    ("bert\nlab", "invalid cluster name"),
])
def test_bad_cluster_names(name, fragment):
    with pytest.raises(UsageError) as err:
        validate.cluster_name(name)
    line = err.value.one_line()
    assert fragment in line and "use 1-63 lowercase letters" in line
    assert "\n" not in line and err.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize("name", ["a", "bert-lab", "b" * 63, "x1-2-3"])
def test_good_cluster_names(name):
    assert validate.cluster_name(name) == name


@pytest.mark.parametrize("zone", ["us-central1", "US-central1-b", "us-central1-bb", "central1-b", "x", ""])
def test_bad_zones(zone):
    with pytest.raises(UsageError, match="invalid zone .*such as us-central1-b"):
        validate.zone(zone)


def test_zone_list_keeps_order_and_drops_duplicates():
    assert validate.zones("us-central1-b,europe-west4-a,us-central1-b") == ("us-central1-b", "europe-west4-a")
    assert validate.region_of("europe-west4-a") == "europe-west4"


@pytest.mark.parametrize("text, seconds", [
    ("30m", 1800), ("1h30m", 5400), ("90s", 90), ("2d", 172800), ("45", 45), ("1.5h", 5400), (" 10M ", 600),
])
def test_durations(text, seconds):
    assert validate.duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "10x", "1h-5m", "-5m", "5m30", "forever", "400d", "nan"])
def test_bad_durations(text):
    with pytest.raises(UsageError, match="duration"):
        validate.duration(text)


def test_format_duration_round_trips_common_values():
    assert validate.format_duration(5400) == "1h30m"
    assert validate.format_duration(42) == "42s"
    assert validate.duration(validate.format_duration(7200)) == 7200


@pytest.mark.parametrize("block, fragment", [
    ("10.240.1.0/33", "invalid CIDR"), ("10.240.1.1/29", "host bits zero"), ("banana", "invalid CIDR"),
    ("8.8.8.0/29", "not private"), ("fd00::/64", "not IPv4"),
])
def test_bad_cidrs(block, fragment):
    with pytest.raises(UsageError, match=fragment):
        validate.cidr(block)


@pytest.mark.parametrize("item, fragment", [
    ("team", "use --label KEY=VALUE"), ("Team=nlp", "invalid label key"), ("team=NLP", "invalid label value"),
    ("tpuctl-cluster=x", "reserved for tpuctl"), ("tpuctl-keep=yes", "must be true or false"),
    ("team=" + "a" * 64, "invalid label value"), ("1team=x", "invalid label key"),
])
def test_bad_labels(item, fragment):
    with pytest.raises(UsageError, match=fragment):
        validate.label(item)


def test_labels_accept_keep_and_reject_conflicting_duplicates():
    assert validate.labels(["team=nlp", "tpuctl-keep=true"]) == {"team": "nlp", "tpuctl-keep": "true"}
    with pytest.raises(UsageError, match="given twice"):
        validate.labels(["team=a", "team=b"])


@pytest.mark.parametrize("url, fragment", [
    ("s3://bucket/x", "use gs://BUCKET"), ("gs://", "invalid bucket name"), ("gs://Bucket/x", "invalid bucket name"),
    ("gs://goog-bucket", "invalid bucket name"), ("gs://bkt/../etc", "invalid object prefix"),
    ("gs://bucket/a//b", "empty path segment"),
])
def test_bad_bucket_urls(url, fragment):
    with pytest.raises(UsageError, match=fragment):
        validate.bucket_url(url)


def test_bucket_url_parts():
    url = validate.bucket_url("gs://my-bucket/bert/base/")
    assert (url.bucket, url.prefix) == ("my-bucket", "bert/base")
    assert str(url.join("runs", "r1")) == "gs://my-bucket/bert/base/runs/r1"


def test_error_messages_do_not_echo_control_characters():
    with pytest.raises(UsageError) as err:
        validate.cluster_name("bad\x1b[31mname")
    assert "\x1b" not in err.value.one_line()


@pytest.mark.parametrize("check, value", [
    (validate.cluster_name, "bert\n"), (validate.zone, "us-central1-b\n"), (validate.label, "team=nlp\n"),
    (validate.label, "team\n=nlp"), (validate.bucket_url, "gs://bucket\n"), (validate.project, "my-project\n"),
    (validate.network, "default\n"), (validate.machine_type, "n1-standard-2\n"),
])
def test_a_trailing_newline_is_not_let_through(check, value):
    # Python's "$" also matches before a final newline; the rules anchor on the real end
    with pytest.raises(UsageError):
        check(value)


@pytest.mark.parametrize("check, good, bad", [
    (validate.network, "my-vpc", "../../projects/x/global/networks/y"),
    (validate.machine_type, "e2-custom-4-8192", "n1;id"),
    (lambda v: validate.software_version(v, "--runtime-version"), "tpu-vm-tf-2.16.1-pjrt", "`id`"),
    (validate.service_account, "runs@my-proj.iam.gserviceaccount.com", "user@gmail.com"),
    (validate.service_account, "123456789-compute@developer.gserviceaccount.com", "a@b.gserviceaccount.com\n"),
])
def test_resource_names_that_reach_api_paths(check, good, bad):
    assert check(good) == good
    with pytest.raises(UsageError):
        check(bad)


def test_bucket_prefixes_refuse_control_characters_and_huge_paths():
    for url in ("gs://bucket/a\rb", "gs://bucket/a\x1b[31m", "gs://bucket/" + "x" * 901):
        with pytest.raises(UsageError, match="invalid object prefix"):
            validate.bucket_url(url)
    assert validate.bucket_url("gs://bucket/d\u00e9j\u00e0/vu").prefix == "d\u00e9j\u00e0/vu"
