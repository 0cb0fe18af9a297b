"""What templates/host-startup.sh sends off the host from its logs is scrubbed: the bootstrap
status in the bucket and the log tail it prints to the serial console when it gives up.

A job or library that logs a chat webhook, a GitHub or Slack token or an AWS key id must not see it
copied into the bucket (read by every bucket reader) or onto the serial console (read by anyone
with compute.instances.getSerialPortOutput); the serial console's copy used to be the raw log."""

from __future__ import annotations

from tests.integration.bootstrap_stub import Stub, objects
from tests.integration.test_startup_script import STATUS, _good_attributes, _run

SECRETS = {
    "slack": "https://hooks.slack.com/services/T0ABCDEF1/B0ABCDEF2/a1B2c3D4e5F6g7H8i9J0k1L2",
    "discord": "https://discord.com/api/webhooks/1234567890123456789/AbC-dEf_GhIjKlMnOpQrStUvWxYz01234",
    "github": "ghp_0123456789abcdefghijklmnopqrstuvwxyz",
    "github_pat": "github_pat_11ABCDEFG0123456789abc_" + "x" * 59,
    "slack_bot": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "aws": "AKIAIOSFODNN7EXAMPLE",
}


def test_an_agent_log_with_secrets_reaches_the_bucket_and_the_serial_console_scrubbed(tmp_path):
    # what an earlier agent run logged; the host's agent now keeps dying
    (tmp_path / "agent.log").write_text("".join(f"notify {kind}: {value} refused\n" for kind, value in SECRETS.items()))
    stub = Stub(_good_attributes(), objects("my-runs"))
    try:
        code, out, _ = _run(tmp_path, stub, timeout=120, TPUCTL_AGENT_ONCE=None, TPUCTL_STUB_EXIT="3",
                            TPUCTL_AGENT_QUICK_DEATHS="1")
    finally:
        stub.close()
    assert code == 1, out
    failed = stub.statuses(STATUS)[-1]
    assert failed["state"] == "failed"
    serial = [line for line in out.splitlines() if line.startswith("  | ")]
    for lines in (failed["log_tail"], serial):
        text = "\n".join(lines)
        assert "stub agent: failing with exit code 3" in text            # the tail is there ...
        assert text.count("redacted") >= len(SECRETS), text              # ... each secret replaced
        for kind, value in SECRETS.items():
            assert value not in text, kind
    uploads = b"".join(body for _, body in stub.uploads)
    assert not any(value.encode() in uploads for value in SECRETS.values())
