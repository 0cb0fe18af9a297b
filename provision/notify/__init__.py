"""Notifications: a run's, a sweep's and the reaper's events told to a webhook, Slack or e-mail.

The supervisor writes every event of a run (provision.runs.supervisor); the notifier hooked
there hears each one wherever the supervisor runs (the laptop, or the host VM with the laptop
closed). What is worth a message and its words are pure (``messages``, ``formats``), and so are
the retry and rate-limit rules (``policy``); ``channels`` sends, ``secrets`` finds a channel's
secret (a mode-0600 file here, or Secret Manager on GCP), ``settings`` reads the channels a run
uses, and ``notifier`` delivers in the background and records each delivery in the run's events.
"""
