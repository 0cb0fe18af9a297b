"""What every layer may use: configuration and provider resolution, errors and exit codes,
input validation, atomic state files, secret redaction, process liveness."""
