"""provision/redact.py: what is scrubbed, in every form a careless server or library echoes it,
and what is left alone (tpuctl's own "key=value" hints)."""

from __future__ import annotations

import json

import pytest

from provision.basics import redact as r

JWT = "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJzYUBwLmlhbS5nc2VydmljZWFjY291bnQuY29tIn0.c2lnbmF0dXJlLWJ5dGVz"


@pytest.mark.parametrize("text, secret", [
    ("Authorization: Bearer ya29.a0AfB_xyz-123.abc", "a0AfB_xyz-123"),
    ("{'authorization': 'Bearer opaqueTOKEN12345'}", "opaqueTOKEN12345"),
    ('"Authorization": "Basic dXNlcjpwYXNzd29yZA=="', "dXNlcjpwYXNzd29yZA"),
    ("authorization=someRawToken123456", "someRawToken123456"),
    (f"Bearer {JWT}", JWT),
    (f"[('assertion', '{JWT}'), ('grant_type', 'jwt-bearer')]", JWT),
    ("https://s/o?X-Goog-Algorithm=GOOG4&X-Goog-Credential=sa%40p%2F2026&X-Goog-Signature=deadbeef99", "deadbeef99"),
    ("https://s/o?X-Goog-Credential=sa%40p%2F2026&X-Goog-Date=1", "sa%40p%2F2026"),
    ("next=https%3A%2F%2Fs%2Fo%3FX-Goog-Signature%3Dcafe1234", "cafe1234"),
    ("https://s/o?GoogleAccessId=sa@p&Expires=1&Signature=abc%2Bdef", "abc%2Bdef"),
    ("x-goog-signature: feedface42", "feedface42"),
    ("grant_type=refresh_token&client_secret=GOCSPX-abc123&refresh_token=1//0gAAAAAAAAAAAAAAAAAAAAA", "GOCSPX-abc123"),
    ("{'client_secret': 'sek-12345678', 'x': 1}", "sek-12345678"),
    ('{"private_key_id": "0f1e2d3c4b5a", "type": "service_account"}', "0f1e2d3c4b5a"),
    ("-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcw\\n-----END PRIVATE KEY-----", "MIIEvQIBADAN"),
    ("key: -----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAwholeKeyCutShort", "MIIEowIBAAKCAQEA"),
    ("https://api/x?key=AIzaSyA1234567890abcdefghijklmnopqrstuv", "AIzaSyA1234567890"),
    ("token 1//0gLongRefreshTokenValue_abcdefghij", "1//0gLongRefreshTokenValue"),
    # the colon form of YAML files, headers and log lines
    ("client_secret: GOCSPX-colonForm42", "GOCSPX-colonForm42"),
    ("oauth:\n  client_secret:   GOCSPX-yamlBlock7\n", "GOCSPX-yamlBlock7"),
    ("password = hunter2-but-longer", "hunter2-but-longer"),
    # a URL's user information (a proxy, a git remote, a database)
    ("ProxyError: http://alice:s3cr3t-pw@proxy.corp:3128/ refused", "s3cr3t-pw"),
    ("git remote https://oauth2:ghp_abcdefg1234567@github.com/x/y.git", "ghp_abcdefg1234567"),
    ("redis://:only-a-password@cache:6379/0", "only-a-password"),
    # chat webhooks: the URL is the credential
    ("notify: POST https://hooks.slack.com/services/T0ABCDEF1/B0ABCDEF2/a1B2c3D4e5F6g7H8i9J0k1L2 failed",
     "a1B2c3D4e5F6g7H8i9J0k1L2"),
    ("https://discord.com/api/webhooks/1234567890123456789/AbC-dEf_GhIjKlMnOpQrStUvWxYz0123456789abcdEFGH",
     "AbC-dEf_GhIjKlMnOpQrStUvWxYz0123456789abcdEFGH"),
    ("url=https://discordapp.com/api/v10/webhooks/987654321098765432/tok3n-Of_The-Webhook42?wait=true",
     "tok3n-Of_The-Webhook42"),
    # GitHub tokens, every prefix (github.blog 2021-04-05) and fine-grained ones
    ("GH_TOKEN ghp_0123456789abcdefghijklmnopqrstuvwxyz", "ghp_0123456789abcdefghijklmnopqrstuvwxyz"),
    ("gho_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij used", "gho_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij"),
    ("[ghu_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ]", "ghu_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    ("GITHUB_TOKEN=ghs_abcdefghijklmnopqrstuvwxyz0123456789", "ghs_abcdefghijklmnopqrstuvwxyz0123456789"),
    ("'ghr_1234567890abcdefghijklmnopqrstuvwxyzABCDEFGH'", "ghr_1234567890abcdefghijklmnopqrstuvwxyzABCDEFGH"),
    ("export T=github_pat_11ABCDEFG0123456789abc_" + "x" * 59, "github_pat_11ABCDEFG0123456789abc_"),
    # Slack tokens
    ("slack: xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx rejected", "AbCdEfGhIjKlMnOpQrStUvWx"),
    ("xoxp-123456789012-123456789012-1234567890123-0123456789abcdef0123456789abcdef", "0123456789abcdef0123456"),
    ("tokens: xoxa-2-abcdefghijkl, xoxr-9876543210-zyxwvutsrq, xoxs-1111111111-2222222222",
     "abcdefghijkl"),
    # AWS: an access key id alone, and a secret access key in the credentials file's form
    ("InvalidClientTokenId: AKIAIOSFODNN7EXAMPLE is not valid", "AKIAIOSFODNN7EXAMPLE"),
    ("session ASIAY34FZKBOKMUTVV7A expired", "ASIAY34FZKBOKMUTVV7A"),
    ("[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
     "wJalrXUtnFEMI/K7MDENG"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY python train.py", "wJalrXUtnFEMI/K7MDENG"),
    ('{"AccessKeyId": "ASIAY34FZKBOKMUTVV7A", "SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"}',
     "wJalrXUtnFEMI/K7MDENG"),
])
def test_secrets_are_scrubbed_in_every_form(text, secret):
    out = r.redact(text)
    assert secret not in out, out
    assert "redacted" in out


@pytest.mark.parametrize("text", [
    "invalid --set 'x'; use --set key=value, such as --set num_train_steps=1000",
    "use --label KEY=VALUE, such as --label team=nlp",
    "the job failed with exit code 3; restarting it",
    "tpuctl up: provider=gcp project=my-proj zone=us-central1-b",
    "grant roles/tpu.admin (it carries tpu.nodes.create) to the account tpuctl runs as",
    "gs://my-bucket/tpuctl/runs/bert-lab-20260101-000000-abcd/model",
    "TPUCTL_TPU_API_ENDPOINT=http://127.0.0.1:8470 (the fake cloud)",
    "http://127.0.0.1:8470/v2/projects/p/locations/z/nodes?pageToken=&x=a@b",
    "ssh://user@host.example/path",
    "notify: slack channel #training via https://hooks.slack.com (add one with tpuctl notify add)",
    "see https://discord.com/channels/1234567890/987654321 and https://github.com/settings/tokens",
    "the wheel ghp_client-1.0-py3-none-any.whl and the module xoxb_helper are code, not tokens",
    "AKIA is the prefix of a long-term AWS access key id",
])
def test_ordinary_messages_are_left_alone(text):
    assert r.redact(text) == text


def test_live_credentials_are_scrubbed_whatever_they_look_like():
    class Creds:
        token = "opaque-live-token-0123456789"
        refresh_token = "opaque-refresh-0123456789"

    creds = Creds()
    r.remember_credentials(creds)
    assert "opaque" not in r.redact(f"the server said {creds.token} and {creds.refresh_token}")
    creds.token = "rotated-token-abcdefghij"   # a refreshed token is covered too
    assert "rotated" not in r.redact("echo: rotated-token-abcdefghij")


def test_the_credential_file_in_use_is_scrubbed(tmp_path, monkeypatch):
    key = tmp_path / "key.json"
    key.write_text(json.dumps({"type": "service_account", "client_secret": "plain-words-secret-value"}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    r._last_check.clear()
    assert "plain-words-secret-value" not in r.redact("found plain-words-secret-value in the file")


def test_json_documents_are_scrubbed_string_by_string_and_stay_json():
    doc = {"ok": False, "error": 'echo "Authorization": "Bearer ya29.abc\\"def"', "n": 3,
           "list": [f"Bearer {JWT}"], "exit_code": 1}
    out = r.redact_data(doc)
    assert json.loads(json.dumps(out))["n"] == 3
    assert "ya29.abc" not in json.dumps(out) and JWT not in json.dumps(out)


def test_secrets_nested_deep_in_a_large_document_are_scrubbed_as_each_string_alone_would_be():
    """One pass gathers the secrets for the whole document (a fleet's status); every string, key
    or value, at any depth, still comes out exactly as ``redact`` makes it on its own."""
    class Creds:
        token = "opaque-fleet-token-0123456789"

    creds = Creds()
    r.remember_credentials(creds)
    deep: object = {f"echo {creds.token}": f"Authorization: Bearer {creds.token}"}
    for level in range(12):
        deep = {"level": level, "items": [deep, f"?X-Goog-Signature=sig{level}abcdef"]}
    doc = {"clusters": [{"name": f"c{i:05d}", "zone": "us-central1-b", "run": {"said": f"ok {i}"}}
                        for i in range(2000)] + [{"name": "last", "run": deep}], "token": creds.token}

    def alone(value):
        if isinstance(value, dict):
            return {alone(k): alone(v) for k, v in value.items()}
        if isinstance(value, list):
            return [alone(v) for v in value]
        return r.redact(value) if isinstance(value, str) and len(value) >= 8 else value

    out = r.redact_data(doc)
    text = json.dumps(out)
    assert "opaque-fleet-token" not in text and "sig11abcdef" not in text and "sig0abcdef" not in text
    assert out == alone(doc)
    assert out["clusters"][1999] == {"name": "c01999", "zone": "us-central1-b", "run": {"said": "ok 1999"}}


def test_tpuctl_debug_prints_the_traceback_scrubbed(tpuctl, monkeypatch):
    """TPUCTL_DEBUG=1 shows the traceback of an unexpected error, and it quotes values: a URL
    with its password, a token in the exception's message; neither may reach the terminal."""
    from provision.commands import cost

    def boom(**_kwargs):
        proxy = "http://alice:s3cr3t-pw@proxy.corp:3128/"
        raise RuntimeError(f"cannot reach {proxy} with client_secret: GOCSPX-inTheMessage")

    monkeypatch.setattr(cost.command, "callback", boom)
    monkeypatch.setenv("TPUCTL_DEBUG", "1")
    res = tpuctl("cost")
    assert res.code == 1
    assert "Traceback (most recent call last)" in res.err and "def boom" not in res.err
    assert 'raise RuntimeError(f"cannot reach {proxy}' in res.err       # the source line
    assert "s3cr3t-pw" not in res.err and "GOCSPX-inTheMessage" not in res.err, res.err
    assert "RuntimeError: cannot reach http://alice:<redacted>@proxy.corp:3128/" in res.err
    assert res.err.rstrip().splitlines()[-1].startswith("tpuctl: internal error: RuntimeError")
