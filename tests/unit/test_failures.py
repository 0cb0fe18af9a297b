"""One place classifies cloud errors; zone failover acts on the class only."""

import pytest

from provision.cloud.failures import Kind, Scope, classify
from provision.cluster.failover import ZonePlan

CIDR_MSG = ('Error code 3 ... The \'CIDR Range\' value "10.2.0.0/29" on network default conflicts with another '
            'subnet or object in the (peered) customer network')


@pytest.mark.parametrize("kw, kind, scope", [
    (dict(http_status=429, message="Rate Limit Exceeded"), Kind.TRANSIENT, Scope.CALL),
    (dict(http_status=503, message="Service Unavailable"), Kind.TRANSIENT, Scope.CALL),
    (dict(http_status=500, message="Internal error"), Kind.TRANSIENT, Scope.CALL),
    (dict(code=4, message="Deadline exceeded"), Kind.TRANSIENT, Scope.CALL),
    (dict(code=8, message='There is no more capacity in the zone "us-central1-b"'), Kind.STOCKOUT, Scope.ZONE),
    (dict(code=8, message="ZONE_RESOURCE_POOL_EXHAUSTED"), Kind.STOCKOUT, Scope.ZONE),
    (dict(code=8, message="Quota 'TPUV2sPreemptiblePodPerProjectPerZoneForTPUAPI' exceeded in region us-central1"),
     Kind.QUOTA, Scope.REGION),
    (dict(code=3, message=CIDR_MSG), Kind.CIDR_CONFLICT, Scope.CALL),
    (dict(code=7, message="Permission 'tpu.nodes.create' denied on 'projects/p/locations/z'"), Kind.PERMISSION,
     Scope.CLOUD),
    (dict(http_status=403, reason="SERVICE_DISABLED",
          message="Cloud TPU API has not been used in project p before or it is disabled"), Kind.API_DISABLED,
     Scope.CLOUD),
    (dict(code=6, message="already exists"), Kind.EXISTS, Scope.CALL),
    (dict(code=3, message="Invalid accelerator type"), Kind.INVALID, Scope.CLOUD),
])
def test_classification(kw, kind, scope):
    f = classify(**kw)
    assert (f.kind, f.scope) == (kind, scope)


def test_permission_hint_names_the_role():
    f = classify(code=7, message="Permission 'tpu.nodes.create' denied")
    assert "roles/tpu.admin" in f.hint and "tpu.nodes.create" in f.hint
    f = classify(code=7, message="Required 'compute.instances.create' permission for 'projects/p'")
    assert "roles/compute.instanceAdmin.v1" in f.hint


def test_disabled_api_hint_names_the_api():
    f = classify(http_status=403, message="Compute Engine API has not been used ... compute.googleapis.com")
    assert f.hint == "enable it: gcloud services enable compute.googleapis.com"


def test_failover_skips_stocked_out_zones_and_quota_regions():
    plan = ZonePlan(("us-central1-b", "us-central1-c", "europe-west4-a", "europe-west4-b"))
    plan.record("us-central1-b", classify(code=8, message="no more capacity in the zone"))
    assert plan.next_zone() == "us-central1-c"
    plan.record("us-central1-c", classify(code=8, message="Quota exceeded in region us-central1"))
    assert plan.next_zone() == "europe-west4-a"
    plan.record("europe-west4-a", classify(code=7, message="Permission 'tpu.nodes.create' denied"))
    assert plan.next_zone() is None and plan.stopped.kind == Kind.PERMISSION
    assert "us-central1-b: stockout" in plan.explain() and "region us-central1: quota" in plan.explain()


def test_storage_hints_name_bucket_level_roles_not_storage_admin():
    from provision.cloud.failures import role_for

    assert role_for("storage.objects.create").startswith("roles/storage.objectUser")
    assert role_for("storage.buckets.get").startswith("roles/storage.legacyBucketReader")
    assert role_for("storage.buckets.setIamPolicy").startswith("roles/storage.admin")
    assert role_for("compute.projects.setCommonInstanceMetadata") == "roles/compute.instanceAdmin.v1"
