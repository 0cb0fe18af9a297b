"""`tpuctl up --least-privilege` says, at up, one line for each thing the cluster's options will ask
of the hosts that their account (only roles/storage.objectUser on the run's bucket) cannot do, with
the grant that lets it: before, a host first failed at it hours later (a detached supervisor that
could not recreate a preempted TPU, a notification whose Secret Manager secret it could not read).
Over the wire against the fake cloud, as test_least_privilege.py."""

from __future__ import annotations

from provision.basics.config import config_path
from tests.integration.test_least_privilege import BUCKET, PROJECT, ZONE, stub  # noqa: F401 - the fixture

SECRET = f"projects/{PROJECT}/secrets/tpuctl-slack"


def _email(cluster: str) -> str:
    return f"tpuctl-{cluster}@{PROJECT}.iam.gserviceaccount.com"


def _grant(email: str, role: str) -> str:
    return f"gcloud projects add-iam-policy-binding {PROJECT} --member=serviceAccount:{email} --role={role}"


def test_a_host_vm_cluster_names_the_detached_supervisors_and_notifications_grants(fakegcp_env, tpuctl, stub):  # noqa: F811
    added = tpuctl("notify", "add", "team", "--slack", "--secret", f"sm://{SECRET}")
    assert added.code == 0, added.err
    config_path().parent.mkdir(parents=True, exist_ok=True)
    config_path().write_text('[notify]\ndefault = ["team"]\n')
    r = tpuctl("up", "lab", "--zone", ZONE, "--least-privilege", "--bucket", BUCKET)
    assert r.code == 0, r.err
    email = _email("lab")
    lines = r.err.splitlines()
    assert (f"train --detach: the supervisor on the host VM recreates a preempted TPU as {email}, which has no role "
            f"for that: grant it roles/tpu.admin on project {PROJECT} before a detached run, e.g. "
            f"{_grant(email, 'roles/tpu.admin')}") in lines
    assert (f"notify: channel team's secret {SECRET} is read by the supervisor on the host as {email}, which has no "
            f"role for that: grant it roles/secretmanager.secretAccessor on that secret, e.g. gcloud secrets "
            f"add-iam-policy-binding {SECRET} --member=serviceAccount:{email} "
            f"--role=roles/secretmanager.secretAccessor") in lines
    assert (f"other buckets: the hosts read only {BUCKET} as {email}; a job spec that reads another bucket "
            f"(bert_dir, init_checkpoint, data elsewhere) needs roles/storage.objectViewer there, e.g. gcloud storage "
            f"buckets add-iam-policy-binding gs://OTHER --member=serviceAccount:{email} "
            f"--role=roles/storage.objectViewer") in lines
    # options not in play say nothing: no TPU node, no autodown
    assert not any(line.startswith(("--arch node:", "autodown:")) for line in lines)


def test_without_a_host_vm_nothing_is_said_of_a_supervisor_or_a_node(fakegcp_env, tpuctl, stub):  # noqa: F811
    r = tpuctl("up", "bare", "--zone", ZONE, "--least-privilege", "--bucket", BUCKET, "--no-vm")
    assert r.code == 0, r.err
    lines = r.err.splitlines()
    assert not any(line.startswith(("train --detach:", "notify:", "--arch node:", "autodown:")) for line in lines)
    assert any(line.startswith(f"other buckets: the hosts read only {BUCKET} as {_email('bare')}") for line in lines)


def test_a_tpu_node_cluster_names_the_viewer_role_its_host_needs(fakegcp_env, tpuctl, stub):  # noqa: F811
    # a dry run: the fake, as Google does for new projects, refuses TPU Nodes
    r = tpuctl("up", "nodes", "--zone", ZONE, "--least-privilege", "--bucket", BUCKET, "--arch", "node", "--dry-run")
    assert r.code == 0, r.err
    email = _email("nodes")
    assert (f"--arch node: the host VM reads the TPU node (its address, state, health) as {email}, which has no role "
            f"for that: grant it roles/tpu.viewer on project {PROJECT}, e.g. {_grant(email, 'roles/tpu.viewer')}"
            ) in (r.out + r.err).splitlines()
