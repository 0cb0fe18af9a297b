"""One module per ``tpuctl`` command; each imports only click and light modules at the top."""
