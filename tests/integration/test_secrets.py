"""No credential, token or signed URL appears in any output, state file, event or error.

tpuctl runs here with **real, non-anonymous credentials** against the fake cloud and
fake-gcs-server, so google-auth really loads a credential file, (for a service account) really
fetches an access token from the fake's OAuth endpoint, and really sends ``Authorization: Bearer
...`` with every call. Then the fake cloud misbehaves as a careless proxy would: its errors quote
the request's Authorization header and a signed URL, and its token endpoint refuses a grant by
quoting the form it was sent. Every byte tpuctl writes (stdout, stderr, ``--json``, files under
TPUCTL_HOME, the exception messages its providers raise) is scanned for the secrets.

Note: google-auth ignores ``token_uri`` in an ``authorized_user`` file (it always refreshes at
oauth2.googleapis.com), so the user-credential case carries a live access token with a future
expiry in the file (as gcloud-written files may) and never refreshes; the service-account case
exercises the token endpoint.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import pytest

ACCESS = "ya29.a0AfB_MARKERaccessTOKEN0123456789abcdefXYZ"
OPAQUE = "opaqueMARKERaccessTOKENnotGoogleShaped0123456789"   # e.g. from a token broker
REFRESH = "1//0gMARKERrefreshTOKEN-abcdefghijklmnopqrstuvwxyz"
CLIENT_SECRET = "GOCSPX-MARKERclientSECRET42xyz"
ISSUED = "ya29.c.MARKERissuedBYtokenENDPOINT987654321"
ZONE = "us-central1-b"


def _rsa_pem() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


@pytest.fixture(scope="module")
def pem() -> str:
    return _rsa_pem()


def _key_lines(pem: str) -> list[str]:
    return [ln for ln in pem.splitlines() if "PRIVATE KEY" not in ln and len(ln) >= 40]


def _user_file(path: Path, token: str = ACCESS) -> Path:
    expiry = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))
    path.write_text(json.dumps({
        "type": "authorized_user", "client_id": "123-marker.apps.googleusercontent.com",
        "client_secret": CLIENT_SECRET, "refresh_token": REFRESH, "token": token,
        "expiry": expiry.strftime("%Y-%m-%dT%H:%M:%SZ")}))
    return path


def _service_account_file(path: Path, pem: str, token_uri: str) -> Path:
    path.write_text(json.dumps({
        "type": "service_account", "project_id": "tpuctl-test", "private_key_id": "0f1e2d3c4b5a69788796a5b4c3d2e1f0MARKER",
        "private_key": pem, "client_email": "tpuctl-sa@tpuctl-test.iam.gserviceaccount.com",
        "client_id": "1234567890", "token_uri": token_uri}))
    return path


@pytest.fixture
def real_creds(fakegcp_env, gcs_env, monkeypatch):
    """The fake cloud and fake GCS, reached with whatever GOOGLE_APPLICATION_CREDENTIALS names."""
    monkeypatch.delenv("TPUCTL_CREDENTIALS", raising=False)
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")  # never ask a metadata server
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    return fakegcp_env


def _spec(tmp_path: Path, bucket: str) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"job: bert-finetune\nbert_dir: gs://{bucket}/bert\ntrain_file: gs://{bucket}/data/train.tsv\n"
                    "num_train_steps: 10\n")
    return spec


class Transcript:
    """Everything tpuctl said, and the files it left, to be scanned for secrets."""

    def __init__(self, tpuctl):
        self.tpuctl = tpuctl
        self.texts: list[str] = []

    def __call__(self, *args: str):
        r = self.tpuctl(*args)
        self.texts += [r.out, r.err]
        return r

    def scan(self, secrets: list[str]) -> None:
        home = Path(os.environ["TPUCTL_HOME"])
        files = [p for p in home.rglob("*") if p.is_file()] if home.exists() else []
        blobs = self.texts + [p.read_text(errors="replace") for p in files]
        for secret in secrets:
            for blob in blobs:
                assert secret not in blob, f"secret {secret[:16]}... leaked in:\n{blob[:2000]}"


def _one_error(r) -> str:
    lines = [ln for ln in r.err.splitlines() if ln.startswith("tpuctl: error:")]
    assert len(lines) == 1, r.err
    return lines[0]


@pytest.mark.parametrize("token", [ACCESS, OPAQUE], ids=["google-token", "opaque-token"])
def test_user_credentials_never_leak_through_outputs_state_or_errors(real_creds, gcs_bucket, tpuctl, tmp_path,
                                                                     monkeypatch, token):
    fake = real_creds
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(_user_file(tmp_path / "adc.json", token)))
    run = Transcript(tpuctl)

    r = run("up", "sec", "--zone", ZONE, "--no-vm", "--json")
    assert r.code == 0, r.err
    # the credentials were really used: every REST call carried the marker token
    auths = {c["auth"] for c in fake.calls() if c["transport"] == "rest"}
    assert auths == {f"Bearer {token}"}, auths

    # a gateway quotes the Authorization header and a signed URL in its error, on a create
    fake.echo_credentials(1, path="instances$", method="POST")
    r = run("up", "sec2", "--zone", ZONE, "--json")
    assert r.code == 1
    line = _one_error(r)
    assert "Authorization: Bearer <redacted>" in line and token[8:] not in line, line
    assert "X-Goog-Signature=<redacted>" in line and "X-Goog-Credential=<redacted>" in line, line
    assert r.json()["ok"] is False and "<redacted>" in r.json()["error"]
    assert not [n for n in fake.resources()["nodes"] if n["name"].endswith("sec2")]   # rolled back / never made

    # ... and on reads, for status in both output forms
    fake.echo_credentials(1, path="nodes$", method="GET")
    assert run("status", "--json").code == 1
    fake.echo_credentials(1, path="nodes$", method="GET")
    assert run("status").code == 1

    # staging and a dry-run train with the same credentials
    src = tmp_path / "bert"
    src.mkdir()
    (src / "bert_config.json").write_text("{}")
    (src / "vocab.txt").write_text("[PAD]\n")
    assert run("stage", str(src), f"gs://{gcs_bucket}/bert", "--json").code == 0
    r = run("train", "sec", "--job", str(_spec(tmp_path, gcs_bucket)), "--bucket", f"gs://{gcs_bucket}",
            "--dry-run", "--json")
    assert r.code == 0, r.err
    assert run("status", "sec", "--json").code == 0
    assert run("down", "sec", "--json").code == 0

    # the provider's exceptions themselves are scrubbed, not only the printed line
    from provision.basics.config import resolve
    from provision.basics.errors import TpuctlError
    from provision.cloud import get_provider

    prov = get_provider(resolve())
    fake.echo_credentials(1, path="nodes$", method="GET")
    with pytest.raises(TpuctlError) as err:
        prov.list_tpus()
    run.texts += [str(err.value), repr(err.value), err.value.message]
    assert "<redacted>" in str(err.value)

    run.scan([token, token[8:], REFRESH, CLIENT_SECRET, "5d0c0ffee5ec12e7519aa7ea0d5eadbeef"])


def test_service_account_key_and_issued_tokens_never_leak(real_creds, gcs_bucket, tpuctl, tmp_path, monkeypatch,
                                                          pem):
    fake = real_creds
    fake.set_token(ISSUED)
    key_file = _service_account_file(tmp_path / "sa.json", pem, fake.token_uri)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
    run = Transcript(tpuctl)

    src = tmp_path / "data"
    src.mkdir()
    (src / "train.tsv").write_text("text\tlabel\na\tb\n")
    r = run("stage", str(src), f"gs://{gcs_bucket}/data", "--json")
    assert r.code == 0, r.err
    # google-auth signed a JWT with the key and the fake's token endpoint issued the marker token
    assert any(req.get("grant_type") == "urn:ietf:params:oauth:grant-type:jwt-bearer"
               for req in fake.set_token()["requests"])

    fake.echo_credentials(1, path="instances$", method="POST")
    r = run("up", "sa", "--zone", ZONE, "--json")
    assert r.code == 1 and "Authorization: Bearer <redacted>" in _one_error(r)
    assert run("status", "--json").code == 0

    # the token endpoint refuses the grant and quotes the signed assertion it was sent
    fake.set_token(fail=5)
    from provision.cloud import storage

    storage._clients.clear()   # a fresh client must fetch a token
    r = run("stage", str(src), f"gs://{gcs_bucket}/again", "--json")
    assert r.code in (1, 2)
    line = _one_error(r)
    assert "invalid_grant" in line and "eyJ" not in line, line
    fake.set_token(fail=0)

    run.scan([ISSUED, *_key_lines(pem), "0f1e2d3c4b5a69788796a5b4c3d2e1f0MARKER", "5d0c0ffee5ec12e7519aa7ea0d5eadbeef"])


@pytest.mark.parametrize("content", [
    ("not json at all\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCMARKERkeyBODYline0123456789abcdef\n"
     "-----END PRIVATE KEY-----\n"),
    json.dumps({"type": "service_account", "project_id": "p", "private_key_id": "k",
                "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANMARKERkeyBODYline0123456789abcdefgh\n"
                               "-----END PRIVATE KEY-----\n",
                "client_email": "sa@p.iam.gserviceaccount.com", "client_id": "1", "token_uri": "http://127.0.0.1:9/t"}),
    json.dumps({"type": "authorized_user", "refresh_token": "1//0MARKERkeyBODYline0123456789abcdefgh"}),
    json.dumps({"refresh_token": "1//0MARKERkeyBODYline0123456789abcdefgh", "client_secret": "MARKERkeyBODYline0123"}),
])
def test_a_malformed_credentials_file_is_named_without_its_contents(real_creds, tpuctl, tmp_path, monkeypatch,
                                                                    content):
    bad = tmp_path / "key.json"
    bad.write_text(content)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(bad))
    for args in (("status", "--json"), ("up", "x", "--zone", ZONE), ("stage", str(tmp_path), "gs://some-bucket/x")):
        r = tpuctl(*args)
        assert r.code == 2, (args, r.err)
        line = _one_error(r)
        assert "GOOGLE_APPLICATION_CREDENTIALS" in line, line
        assert "MARKERkeyBODY" not in r.out + r.err, r.err
    assert not real_creds.call_counts()
